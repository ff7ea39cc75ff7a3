"""The drafter protocol: what the speculative loop needs from anything that proposes tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Draft:
    """Proposed continuation of the anchor token.

    tokens: draft ids d_1..d_n (n may be 0: nothing worth proposing); under greedy decoding
        these are verified as they are.
    logits: (n, vocab) draft logits, or None when the draft is deterministic (q_i one-hot at
        tokens[i]). Under sampling the loop warps them like the target's and draws
        d_i ~ q_i itself, which the lossless acceptance rule requires.
    bucket: a label the block-size chooser keeps separate acceptance statistics for (e.g. the
        n-gram match length), since acceptance differs a lot between kinds of proposals.
    prior: the drafter's P(slot accepted) for this bucket before the chooser has seen any
        outcome (None: know nothing): a copy of the caller's own prediction is likely right,
        and a blank prior would leave its first long proposals unverified.
    """

    tokens: np.ndarray
    logits: np.ndarray | None = None
    bucket: str = ""
    prior: float | None = None

    @staticmethod
    def empty() -> Draft:
        return Draft(np.zeros(0, dtype=np.int32))


@runtime_checkable
class Drafter(Protocol):
    name: str
    wants_features: bool  # True if observe() needs the target's hidden features
    # target layers whose inputs come with those features (LlamaTarget.set_features); () = none
    feature_layers: tuple[int, ...]
    # True if propose() time grows with max_tokens (causal-slot HyFlash runs one row per
    # draft): the loop then asks for no more than the block-size policy may verify
    pays_per_draft: bool

    def reset(self) -> None:
        """Forget all context (a new conversation or a rebuilt prompt)."""

    def observe(self, tokens: Sequence[int], features: np.ndarray | None) -> None:
        """Fold newly committed tokens (and their target features, (n, d)) into the state."""

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        """Propose up to max_tokens tokens that follow `anchor` (committed, not yet observed).
        with_logits=False (greedy decoding): the draft's logits are not needed, so a drafter
        may skip computing them."""

    def memory_bytes(self) -> int:
        """Bytes of draft-side state that grows or lives with the context (KV, recurrent state)."""
