"""Prompt-lookup (n-gram) drafter: the standard no-training baseline.

The last n tokens (ending with the anchor) are looked up in the conversation so far; the
tokens that followed their most recent earlier occurrence are proposed. Longer n-grams are
tried first. When that continuation reaches the present (a loop shorter than the draft), the
copy runs on through its own proposal, much as a token-by-token lookup on context + draft
(llama.cpp's lookup decoding) would: a loop of period p fills the whole draft instead of
stopping after p - 1 tokens. The index (shared with HyFlash's copy path) is updated
incrementally, so observe() and propose() cost O(new tokens) and O(max n) dict look-ups.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.decoding.drafter_protocol import Draft
from engine.drafters.ngram_index import NgramIndex


class NgramDrafter:
    name = "ngram"
    wants_features = False
    feature_layers: tuple[int, ...] = ()
    pays_per_draft = False

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.index = NgramIndex(max_ngram, min_ngram)

    def reset(self) -> None:
        self.index.reset()

    def observe(self, tokens: Sequence[int], features: np.ndarray | None = None) -> None:
        self.index.observe(tokens)

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        if max_tokens <= 0:
            return Draft.empty()
        n, p = self.index.match(anchor)
        if not n:
            return Draft.empty()
        # the matched n-gram's continuation up to now; repeating it is what copying through
        # the proposal itself gives
        period = self.index.copy(p, anchor, max_tokens)
        reps = -(-max_tokens // len(period))
        return Draft(np.asarray((period * reps)[:max_tokens], dtype=np.int32), bucket=f"ngram{n}")

    def memory_bytes(self) -> int:
        return self.index.nbytes()
