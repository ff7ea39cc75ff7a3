"""Unit tests of the n-gram drafter, the block-size chooser and the text stream."""

from __future__ import annotations

import numpy as np

from engine.blocksize import AcceptanceEstimator, BlockSizeChooser, CostModel
from engine.drafters import NgramDrafter
from engine.speculative import _TextStream, validate_block_size


def test_ngram_proposes_continuation_of_most_recent_match():
    d = NgramDrafter(max_ngram=3)
    d.observe([1, 2, 3, 4, 5, 9, 2, 3, 7, 8])
    # anchor 3 after history ending in ...7, 8: 3-gram (7,8,3) unseen, 2-gram (8,3) unseen,
    # 1-gram (3,) last seen before 7 -> 7, 8 reach the present (the anchor 3), so the copy
    # runs on through the proposal: the loop 7, 8, 3 repeats to the draft length
    draft = d.propose(3, 4)
    assert draft.tokens.tolist() == [7, 8, 3, 7] and draft.bucket == "ngram1"
    d.observe([3])  # anchor committed; history ...7, 8, 3
    draft = d.propose(7, 3)  # (8, 3, 7) unseen; (3, 7) seen: continuation 8, 3, 7
    assert draft.tokens.tolist() == [8, 3, 7] and draft.bucket == "ngram2"
    d.observe([7])
    draft = d.propose(8, 7)  # (3, 7, 8) seen: continuation 3, 7, 8, 3, 7, 8, 3
    assert draft.tokens.tolist() == [3, 7, 8, 3, 7, 8, 3] and draft.bucket == "ngram3"
    assert d.propose(8, 2).tokens.tolist() == [3, 7]
    assert d.propose(42, 4).tokens.size == 0
    assert d.memory_bytes() > 0
    d.reset()
    assert d.propose(3, 4).tokens.size == 0


def test_ngram_respects_max_tokens():
    d = NgramDrafter()
    d.observe(list(range(10)) + [0, 1])
    assert d.propose(2, 3).tokens.tolist() == [3, 4, 5]
    assert d.propose(2, 0).tokens.size == 0


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


def test_chooser_learns_from_proposals_it_did_not_verify():
    cost = CostModel({1: 0.010, 2: 0.017, 16: 0.085})
    chooser = BlockSizeChooser(cost)
    stream = [5, 6, 7]
    chooser.propose_made("b", [8, 9, 10], start=len(stream))
    stream += [8]
    chooser.committed(stream)  # slot 2 not yet known
    assert chooser.estimator._stats("b").trials.sum() == 0
    stream += [9, 11]
    chooser.committed(stream)  # slots 1-2 matched, slot 3 rejected
    s = chooser.estimator._stats("b")
    assert s.accepted[:2].tolist() == [1, 1] and s.trials[:3].tolist() == [1, 1, 1]


def test_estimator_prior_and_decay():
    est = AcceptanceEstimator(decay=0.5)
    assert np.allclose(est.rates("x")[:2], 0.5)
    est.record("x", 1, 3)
    est.record("x", 1, 3)
    rates = est.rates("x")
    assert rates[0] > 0.5 and rates[1] < 0.5


def test_text_stream_is_utf8_safe_and_stops_on_stop_strings():
    s = _TextStream(["STOP"])
    emoji = "é🙂".encode()
    out = s.feed(emoji[:1]) + s.feed(emoji[1:3]) + s.feed(emoji[3:])
    assert out == "é🙂"
    out = s.feed(b"abc ST")
    assert out == "abc "  # "ST" held back: could be the start of STOP
    out += s.feed(b"OP and more")
    assert s.stopped and s.text == "é🙂abc " and out == "abc "


def test_block_size_validation():
    assert validate_block_size("auto") is None
    assert validate_block_size(4) == 4
    for bad in (0, 1000, "x", -1):
        try:
            validate_block_size(bad)
        except ValueError as exc:
            assert "block size" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")


def _simulate(chooser: BlockSizeChooser, right: bool, steps: int = 200) -> list[int]:
    """Run the loop's bookkeeping: a drafter proposing 8 tokens that are the stream's true
    continuation (right) or wrong from slot 1; returns the block chosen per step (-1: not asked)."""
    truth = [i % 7 for i in range(10_000)]  # a repeated pattern, as in quoted text
    stream, chosen = truth[:20], []
    chooser.observe_draft_time(0.002)
    while len(chosen) < steps:
        if not chooser.worth_drafting():
            chosen.append(-1)
            stream.append(truth[len(stream)])
            chooser.committed(stream)
            continue
        start = len(stream)
        proposal = truth[start : start + 8] if right else [99] * 8
        key = chooser.bucket("m3")
        chooser.propose_made(key, proposal, start)
        k = chooser.choose(key, len(proposal))
        chosen.append(k)
        accepted = k if right else 0
        stream += truth[start : start + accepted + 1]
        chooser.committed(stream)
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
