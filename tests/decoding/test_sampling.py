"""Exactness of the speculative sampler on small vocabularies where p and q are known."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from engine.decoding.sampling import Warp, accept_greedy, accept_sampling, sample, warp_probs

V = 6


def _counts_to_chi2(counts: np.ndarray, p: np.ndarray) -> float:
    n = counts.sum()
    mask = p > 0
    assert counts[~mask].sum() == 0, "sampled a token with zero target probability"
    return chisquare(counts[mask], n * p[mask]).pvalue


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_token_distribution_matches_target_with_probabilistic_draft(seed):
    rng = np.random.default_rng(seed)
    p = np.array([0.05, 0.4, 0.1, 0.2, 0.25, 0.0])
    q = np.array([0.3, 0.1, 0.3, 0.1, 0.1, 0.1])  # deliberately unlike p
    counts = np.zeros(V, dtype=np.int64)
    for _ in range(20000):
        d = sample(q, rng)
        a, nxt = accept_sampling(np.stack([p, p]), np.array([d]), q[None, :], [rng, rng])
        counts[d if a == 1 else nxt] += 1
    assert _counts_to_chi2(counts, p) > 1e-3


@pytest.mark.parametrize("seed", [3, 4])
def test_first_token_distribution_matches_target_with_deterministic_draft(seed):
    rng = np.random.default_rng(seed)
    p = np.array([0.1, 0.3, 0.2, 0.15, 0.25, 0.0])
    counts = np.zeros(V, dtype=np.int64)
    for i in range(20000):
        d = i % 3  # a fixed guess, q one-hot at d
        a, nxt = accept_sampling(np.stack([p, p]), np.array([d]), None, [rng, rng])
        counts[d if a == 1 else nxt] += 1
    assert _counts_to_chi2(counts, p) > 1e-3


def test_joint_distribution_of_two_tokens_matches_a_context_dependent_target():
    """A toy target whose next-token distribution depends on the previous token; drafts of
    two tokens from a context-free q. The pair (t1, t2) must follow p(t1) p(t2 | t1)."""
    rng = np.random.default_rng(7)
    base = rng.dirichlet(np.ones(4), size=4)  # p(next | prev), vocab 4
    q = np.array([0.25, 0.25, 0.25, 0.25])
    anchor = 2
    counts = np.zeros((4, 4), dtype=np.int64)
    for _ in range(30000):
        d = np.array([sample(q, rng), sample(q, rng)])
        rows = np.stack([base[anchor], base[d[0]], base[d[1]]])
        a, nxt = accept_sampling(rows, d, np.stack([q, q]), [rng] * 3)
        seq = [*d[:a].tolist(), nxt]
        if len(seq) < 2:  # continue with plain sampling for the second token
            seq.append(sample(base[seq[0]], rng))
        counts[seq[0], seq[1]] += 1
    expected = base[anchor][:, None] * base
    assert chisquare(counts.ravel(), counts.sum() * expected.ravel()).pvalue > 1e-3


def test_a_broken_rule_is_detected():
    """The check above can fail: accepting every draft gives q's distribution, not p's."""
    rng = np.random.default_rng(0)
    p = np.array([0.05, 0.4, 0.1, 0.2, 0.25, 0.0])
    q = np.array([0.3, 0.1, 0.3, 0.1, 0.1, 0.1])
    counts = np.bincount([sample(q, rng) for _ in range(20000)], minlength=V)
    assert counts[5] > 0 or chisquare(counts[:5], counts.sum() * p[:5]).pvalue < 1e-6


def test_warp_top_k_top_p_and_temperature():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05]))
    p = warp_probs(logits, Warp(1.0, top_k=2))
    np.testing.assert_allclose(p, [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0])
    p = warp_probs(logits, Warp(1.0, top_p=0.8))  # 0.5+0.2 < 0.8 <= 0.85: keep three
    np.testing.assert_allclose(p, np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85)
    cold = warp_probs(logits, Warp(0.5))
    assert cold[0] > 0.5 and abs(cold.sum() - 1) < 1e-12


def test_greedy_acceptance():
    logits = np.zeros((4, 5))
    logits[0, 3] = logits[1, 1] = logits[2, 4] = logits[3, 0] = 1.0
    assert accept_greedy(logits, np.array([3, 1, 4])) == (3, 0)  # all pass, bonus 0
    assert accept_greedy(logits, np.array([3, 2, 4])) == (1, 1)  # second fails -> correction
    assert accept_greedy(logits[:1], np.array([], dtype=int)) == (0, 3)


def test_sampling_is_deterministic_under_a_seed():
    p = np.array([0.2, 0.3, 0.5])
    a = [sample(p, np.random.default_rng(5)) for _ in range(3)]
    b = [sample(p, np.random.default_rng(5)) for _ in range(3)]
    assert a == b


def _nucleus_by_full_sort(p, top_p):
    order = np.argsort(-p, kind="stable")
    return order[: int(np.searchsorted(np.cumsum(p[order]), top_p) + 1)]


def test_nucleus_equals_a_full_stable_sort():
    """The partial search must keep exactly the tokens a full sort keeps, in the same order,
    including ties at the cut and flat distributions that need the whole vocabulary."""
    from engine.decoding.sampling import nucleus

    rng = np.random.default_rng(0)
    rows = []
    for scale in (0.3, 3.0, 30.0):  # flat (reaches the full sort), mixed, peaked
        for _ in range(20):
            z = rng.standard_normal(5000) * scale
            p = np.exp(z - z.max())
            rows.append(p / p.sum())
    tied = np.full(5000, 1.0)
    tied[:10] = 50.0  # ten equal leaders, then a long tie
    rows.append(tied / tied.sum())
    coarse = np.round(rng.random(5000), 1) ** 8  # many exact ties everywhere
    rows.append(coarse / coarse.sum())
    for p in rows:
        for top_p in (0.1, 0.5, 0.9, 0.99, 0.999999):
            got, want = nucleus(p, top_p, first=8), _nucleus_by_full_sort(p, top_p)
            assert np.array_equal(got, want), (top_p, len(got), len(want))
    warp = Warp(temperature=0.7, top_p=0.9)
    logits = rng.standard_normal(5000) * 4
    z = logits / 0.7
    p = np.exp(z - z.max())
    p /= p.sum()
    keep = _nucleus_by_full_sort(p, 0.9)
    expected = np.zeros_like(p)
    expected[keep] = p[keep]
    assert np.array_equal(warp_probs(logits, warp), expected / expected.sum())


def test_check_sampling_refuses_what_no_sampler_can_honour() -> None:
    from engine.decoding.sampling import check_sampling

    check_sampling(0.0, 1.0, 0)
    check_sampling(0.7, 0.9, 40)
    for bad in (
        (-1.0, 1.0, 0),
        (float("nan"), 1.0, 0),
        (0.7, 5.0, 0),
        (0.7, 0.0, 0),
        (0.7, 1.0, -1),
    ):
        with pytest.raises(ValueError, match="temperature|top-p|top-k"):
            check_sampling(*bad)
