"""Unit tests of block size auto: the cost model, the acceptance estimator, the chooser."""

from __future__ import annotations

import numpy as np
import pytest

from engine.decoding.blocksize import (
    MIN_EVIDENCE,
    MIN_SPEEDUP,
    SHADOW_SLACK,
    AcceptanceEstimator,
    BlockSizeChooser,
    CostModel,
    FixedBlock,
)


def test_cost_model_interpolates_and_extrapolates_monotonically():
    cost = CostModel({1: 0.010, 2: 0.017, 4: 0.026, 8: 0.048, 16: 0.085})
    assert abs(cost(3) - 0.0215) < 1e-9
    assert cost(32) > cost(16) > cost(8)
    cost.observe(2, 0.020)
    assert 0.017 < cost(2) < 0.020
    fixed = CostModel({1: 0.010, 16: 0.011}, ema=0.0)
    fixed.observe(2, 5.0)
    assert fixed(2) < 0.011


def test_chooser_verifies_more_when_acceptance_is_high():
    cost = CostModel({1: 0.010, 2: 0.017, 4: 0.026, 8: 0.048, 16: 0.085})
    chooser = BlockSizeChooser(cost, max_block=16)
    for _ in range(200):
        chooser.estimator.record("good", 15, 15)
        chooser.estimator.record("bad", 0, 15)
    assert chooser.choose("good", 15) >= 7
    assert chooser.choose("bad", 15) == 0
    assert chooser.choose("good", 0) == 0


def test_a_drafters_prior_lets_its_first_proposal_be_verified():
    """A copy of the caller's own prediction is verified from its first proposal on, while a
    kind nothing is known about waits for evidence; outcomes then replace the prior."""
    cost = CostModel({1: 0.010, 2: 0.017, 4: 0.026, 8: 0.048, 16: 0.085})
    chooser = BlockSizeChooser(cost, max_block=16)
    chooser.observe_draft_time(0.0001)
    proposal = np.arange(15)
    assert chooser.choose_drafts("blank", proposal) == 0
    assert chooser.choose_drafts("copy", proposal, prior=0.9) >= 3
    assert chooser.worth_drafting()  # the declared kind counts before it has evidence
    for _ in range(20):
        chooser.estimator.record("copy", 0, 15)
    assert chooser.choose("copy", 15) == 0
    assert chooser.estimator.rates("blank")[0] == 0.5


def test_chooser_learns_from_proposals_it_did_not_verify():
    cost = CostModel({1: 0.010, 2: 0.017, 16: 0.085})
    chooser = BlockSizeChooser(cost)
    chooser.committed([5, 6, 7])
    assert chooser.choose_drafts("b", np.array([8, 9, 10])) == 0  # verifies none of them
    chooser.committed([8])  # slot 2 not yet known
    assert chooser.estimator._stats("b").trials.sum() == 0
    chooser.committed([9, 11])  # slots 1-2 matched, slot 3 rejected
    s = chooser.estimator._stats("b")
    assert s.accepted[:2].tolist() == [1, 1] and s.trials[:3].tolist() == [1, 1, 1]


def test_estimator_prior_and_decay():
    est = AcceptanceEstimator(decay=0.5)
    assert np.allclose(est.rates("x")[:2], 0.5)
    est.record("x", 1, 3)
    est.record("x", 1, 3)
    rates = est.rates("x")
    assert rates[0] > 0.5 and rates[1] < 0.5


def _simulate(chooser: BlockSizeChooser, right: bool, steps: int = 200) -> list[int]:
    """Run the loop's bookkeeping: a drafter proposing 8 tokens that are the stream's true
    continuation (right) or wrong from slot 1; returns the block chosen per step (-1: not asked)."""
    truth = [i % 7 for i in range(10_000)]  # a repeated pattern, as in quoted text
    chooser.start()
    position, chosen = 20, []
    chooser.committed(truth[:position])
    chooser.observe_draft_time(0.002)
    while len(chosen) < steps:
        if not chooser.worth_drafting():
            chosen.append(-1)
            chooser.committed(truth[position : position + 1])
            position += 1
            continue
        proposal = truth[position : position + 8] if right else [99] * 8
        k = chooser.choose_drafts("m3", np.array(proposal))
        chosen.append(k)
        accepted = k if right else 0
        chooser.committed(truth[position : position + accepted + 1])
        position += accepted + 1
    return chosen


def test_chooser_takes_runs_of_full_matches_quickly():
    cost = CostModel({1: 0.010, 2: 0.017, 4: 0.026, 8: 0.048, 16: 0.085}, ema=0.0)
    chooser = BlockSizeChooser(cost, max_block=16)
    for _ in range(100):  # this kind of proposal is usually wrong on average...
        chooser.estimator.record("m3", 0, 8)
    chosen = _simulate(chooser, right=True, steps=60)
    # ...but once one is taken whole, the run bucket learns within a few proposals and
    # verifies blocks of the size this (CPU-like) cost curve rewards
    assert chooser.bucket("m3") == "m3|run"
    assert min(chosen[-8:]) >= 3, chosen
    # the same history judged by the kind's average alone never verifies anything
    averaged = BlockSizeChooser(cost, max_block=16)
    averaged.bucket = lambda kind: kind
    for _ in range(100):
        averaged.estimator.record("m3", 0, 8)
    assert max(_simulate(averaged, right=True, steps=60)) <= 0


def test_chooser_lowers_the_block_on_novel_text_and_never_starves():
    cost = CostModel({1: 0.010, 2: 0.017, 4: 0.026, 8: 0.048, 16: 0.085}, ema=0.0)
    chooser = BlockSizeChooser(cost, max_block=16)
    chosen = _simulate(chooser, right=False, steps=300)
    assert chooser.bucket("m3") == "m3"  # no full match, no run
    late = chosen[100:]
    assert all(k <= 0 for k in late)  # verifies nothing
    asked = [i for i, k in enumerate(late) if k == 0]
    assert 0 < len(asked) < len(late) / 8  # rarely asked: the drafter's time is saved...
    assert max(b - a for a, b in zip(asked, asked[1:], strict=False)) <= 32  # ...not starved


def _saving_from_scratch(chooser: BlockSizeChooser) -> float:
    """The expected saving per drafter call, computed bucket by bucket as the docstring says."""
    total = sum(chooser._bucket_counts.values())
    n = chooser.max_block - 1
    saving = 0.0
    for bucket, count in chooser._bucket_counts.items():
        if bucket and chooser.estimator.evidence(bucket) >= MIN_EVIDENCE:
            expected = 1.0 + np.cumsum(np.cumprod(chooser.estimator.rates(bucket)[:n]))
            gains = expected * chooser.cost(1) / (1 + MIN_SPEEDUP) - chooser.cost.table[1 : n + 1]
            saving += count / total * max(0.0, float(gains.max()))
    return saving


def test_cached_saving_follows_proposals_and_the_cost_model():
    cost = CostModel({1: 0.010, 2: 0.017, 4: 0.026, 8: 0.048, 16: 0.085})
    chooser = BlockSizeChooser(cost, max_block=16)
    chooser.observe_draft_time(0.001)
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 5, 400).tolist()
    position = 0
    chooser.committed(truth[:10])
    position = 10
    for step in range(150):
        if chooser.worth_drafting():
            wrong = step % 3 == 0
            proposal = [t + 10 * wrong for t in truth[position : position + 6]]
            chooser.choose_drafts(f"b{step % 4}", np.array(proposal))
        chooser.observe_verify(1, 0.010 + 0.0001 * (step % 7))  # the cost model drifts
        chooser.committed(truth[position : position + 1])
        position += 1
        # stale by at most SAVING_REFRESH cost updates, exact after a proposal resolves
        assert abs(chooser._expected_saving() - _saving_from_scratch(chooser)) < 2e-4
    chooser._saving = None
    assert chooser._expected_saving() == pytest.approx(_saving_from_scratch(chooser), rel=1e-12)
    assert chooser._expected_saving() > 0  # the test is about a saving that matters


def test_cost_model_shrugs_off_one_slow_decode():
    cost = CostModel({1: 0.010, 4: 0.026}, ema=0.1)
    cost.observe(1, 0.100)  # a scheduler hiccup: ten times the usual time
    assert cost(1) <= 0.010 * (1 + 0.1 * 0.25) + 1e-12
    for _ in range(60):  # a real, lasting change is followed
        cost.observe(1, 0.020)
    assert cost(1) > 0.019


def test_chooser_verifies_only_beyond_its_margin():
    cost = CostModel({1: 0.010, 2: 0.017, 16: 0.085}, ema=0.0)
    chooser = BlockSizeChooser(cost)
    # slot-1 rate r: one draft is worth (1 + r) / 1.7 plain speed; break-even at r = 0.7
    for i in range(400):
        chooser.estimator.record("even", 1 if i % 4 < 3 else 0, 1)  # r = 0.75
    rate = chooser.estimator.rates("even")[0]
    assert 1 < (1 + rate) / 1.7 < 1 + MIN_SPEEDUP  # a gain, but inside the margin...
    assert chooser.choose("even", 1) == 0  # ...verifies nothing
    for _ in range(400):
        chooser.estimator.record("sure", 1, 1)
    assert chooser.choose("sure", 1) == 1


def test_saving_waits_for_evidence():
    cost = CostModel({1: 0.010, 2: 0.012, 16: 0.030}, ema=0.0)
    chooser = BlockSizeChooser(cost)
    chooser.observe_draft_time(0.0005)
    chooser.propose_made("new", [1, 2, 3], 0)  # no outcome yet: the prior alone
    chooser._steps_since_draft = 0
    assert chooser._expected_saving() == 0.0 and not chooser.worth_drafting()
    for _ in range(int(MIN_EVIDENCE) + 1):
        chooser.estimator.record("new", 3, 3)
    chooser._saving = None
    assert chooser._expected_saving() > 0.0005 and chooser.worth_drafting()


def test_draft_budget_is_the_largest_chosen_block_plus_the_shadow_slack():
    cost = CostModel({1: 0.010, 2: 0.017, 4: 0.026, 8: 0.048, 16: 0.085}, ema=0.0)
    chooser = BlockSizeChooser(cost, max_block=16)
    assert chooser.draft_budget(15) == 15  # no evidence yet: ask for all
    chooser.propose_made("bad", [1, 2, 3], 0)
    for _ in range(50):
        chooser.estimator.record("bad", 0, 15)
    chooser._budget = None  # (record() bypasses the resolution that drops the cache)
    assert chooser.draft_budget(15) == SHADOW_SLACK  # nothing worth verifying: the slack only
    chooser.propose_made("fair", [1, 2, 3], 0)
    for _ in range(50):
        chooser.estimator.record("fair", 3, 15)
    chooser._budget = None
    assert chooser.choose("fair", 15) == 3
    assert chooser.draft_budget(15) == 3 + SHADOW_SLACK
    assert chooser.draft_budget(2) == 2  # never beyond what the loop allows
    assert FixedBlock(8).draft_budget(7) == 7
