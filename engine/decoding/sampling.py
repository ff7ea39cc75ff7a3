"""Token selection and the lossless acceptance rule.

Greedy: accept draft d_i while d_i == argmax p_{i-1}; the first mismatch is replaced by the
argmax. Sampling (Leviathan et al. 2023, Chen et al. 2023): accept d_i with probability
min(1, p(d_i)/q(d_i)); on rejection sample from norm(max(0, p - q)); if every draft passes,
sample a bonus token from the last row. p and q get the same temperature/top-k/top-p warping,
so the output distribution is exactly that of sampling the warped target alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.events import GenerationSettings


@dataclass(frozen=True)
class Warp:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def check_sampling(temperature: float, top_p: float, top_k: int) -> None:
    """Raise ValueError with GenerationSettings' message for settings no sampler can honour
    (for callers that check options before they build settings, e.g. engine/bench)."""
    GenerationSettings(temperature=temperature, top_p=top_p, top_k=top_k)


def warp_probs(logits: np.ndarray, warp: Warp) -> np.ndarray:
    """Temperature, then top-k, then top-p (nucleus) on one row of logits -> float64 probs."""
    z = logits.astype(np.float64) / warp.temperature
    if 0 < warp.top_k < z.shape[-1]:
        kth = np.partition(z, -warp.top_k)[-warp.top_k]
        z = np.where(z >= kth, z, -np.inf)
    z -= z.max()
    p = np.exp(z)
    p /= p.sum()
    if warp.top_p < 1.0:
        mask = np.zeros_like(p, dtype=bool)
        mask[nucleus(p, warp.top_p)] = True
        p = np.where(mask, p, 0.0)
        p /= p.sum()
    return p


def nucleus(p: np.ndarray, top_p: float, first: int = 64) -> np.ndarray:
    """The tokens top-p keeps: the smallest set of most likely tokens whose mass reaches top_p
    (the token crossing it included; ties in index order, as a stable sort of the whole
    vocabulary gives). A full sort of 49K probabilities costs milliseconds per row, so the
    `first` most likely are looked at first, then 8x more, and the whole vocabulary only when
    they do not reach top_p or a tie straddles the cut; the result is the full sort's."""
    n = p.size
    m = min(first, n)
    while m < n:
        top = np.argpartition(-p, m - 1)[:m]  # the m largest, in no order, ties arbitrary
        order = top[np.lexsort((top, -p[top]))]  # by probability, then index
        n_keep = int(np.searchsorted(np.cumsum(p[order]), top_p) + 1)
        if n_keep <= m and np.count_nonzero(p >= p[order[n_keep - 1]]) == n_keep:
            return order[:n_keep]  # exactly these reach the cut: the full sort's prefix
        m *= 8
    order = np.argsort(-p, kind="stable")
    return order[: int(np.searchsorted(np.cumsum(p[order]), top_p) + 1)]


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    # Inverse CDF with one uniform draw: deterministic for a given generator state.
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def accept_greedy(target_logits: np.ndarray, draft_tokens: np.ndarray) -> tuple[int, int | None]:
    """Return (accepted count a, next token) for rows p_0..p_k and drafts d_1..d_k. Given as
    many rows as drafts (a chunk of a longer block), the token is None when all pass."""
    choices = np.argmax(target_logits, axis=-1)
    a = 0
    for d in draft_tokens:
        if int(d) != int(choices[a]):
            break
        a += 1
    return a, int(choices[a]) if a < len(choices) else None


def accept_sampling(
    target_probs: np.ndarray,
    draft_tokens: np.ndarray,
    draft_probs: np.ndarray | None,
    rngs: list[np.random.Generator],
) -> tuple[int, int]:
    """Speculative sampling over warped target rows (k+1, V) and drafts (k,).

    draft_probs: warped q rows (k, V), or None for deterministic drafts (q one-hot at d).
    rngs: one generator per row, seeded by output position, so a token's randomness does not
    depend on how many drafts were verified. With one-hot drafts the rule "sample x ~ p, accept
    iff x == d" is exactly the rejection rule (accept w.p. p(d), else a sample of p without d),
    so seeded output is then identical to plain sampling, token for token. With as many rows
    as drafts (a chunk of a longer block) the token is None when all pass."""
    for i, d in enumerate(int(t) for t in draft_tokens):
        p = target_probs[i]
        if draft_probs is None:
            x = sample(p, rngs[i])
            if x == d:
                continue
            return i, x
        q_d = float(draft_probs[i, d])
        if q_d > 0.0 and rngs[i].random() < min(1.0, p[d] / q_d):
            continue
        residual = np.maximum(p - draft_probs[i], 0.0)
        total = residual.sum()
        # total == 0 only when p == q exactly, where rejection has probability 0; guard anyway
        return i, sample(residual / total if total > 0 else p, rngs[i])
    k = len(draft_tokens)
    if k == len(target_probs):  # a chunk without the block's last row: no bonus yet
        return k, None
    return k, sample(target_probs[k], rngs[k])
