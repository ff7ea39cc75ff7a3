"""N-gram / learned-drafter hybrid: n-gram lookup when a long match exists, else the learned
drafter. A long n-gram match is near-certain to be copied verbatim (lists, code, repeated
names), where a learned drafter's compressed view of the context is weakest."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.decoding.drafter_protocol import Draft, Drafter
from engine.drafters.ngram import NgramDrafter


class HybridDrafter:
    def __init__(self, learned: Drafter, min_match: int = 3) -> None:
        self.learned = learned
        self.ngram = NgramDrafter(max_ngram=max(3, min_match), min_ngram=min_match)
        self.name = f"{learned.name}+ngram"
        self.wants_features = learned.wants_features
        self.feature_layers = learned.feature_layers
        self.pays_per_draft = learned.pays_per_draft

    def reset(self) -> None:
        self.learned.reset()
        self.ngram.reset()

    def observe(self, tokens: Sequence[int], features: np.ndarray | None) -> None:
        self.learned.observe(tokens, features)
        self.ngram.observe(tokens)

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        draft = self.ngram.propose(anchor, max_tokens)
        if len(draft.tokens):
            return draft
        return self.learned.propose(anchor, max_tokens, with_logits=with_logits)

    def memory_bytes(self) -> int:
        return self.learned.memory_bytes() + self.ngram.memory_bytes()
