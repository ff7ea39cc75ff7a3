"""Prompt-lookup (n-gram) drafter: the standard no-training baseline.

The last n tokens (ending with the anchor) are looked up in the conversation so far; the
tokens that followed their most recent earlier occurrence are proposed. Longer n-grams are
tried first. When that continuation reaches the present (a loop shorter than the draft), the
copy runs on through its own proposal, much as a token-by-token lookup on context + draft
(llama.cpp's lookup decoding) would: a loop of period p fills the whole draft instead of
stopping after p - 1 tokens. The index is updated incrementally, so observe() and propose()
cost O(new tokens) and O(max n) dict look-ups.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.drafters.base import Draft


class NgramDrafter:
    name = "ngram"
    wants_features = False

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.sizes = list(range(max_ngram, min_ngram - 1, -1))
        self.reset()

    def reset(self) -> None:
        self.history: list[int] = []
        # n -> {n-gram: index of the token that followed its most recent occurrence}
        self.index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}

    def observe(self, tokens: Sequence[int], features: np.ndarray | None = None) -> None:
        history = self.history
        for token in tokens:
            j = len(history)
            history.append(int(token))
            for n in self.sizes:
                if j >= n:
                    self.index[n][tuple(history[j - n : j])] = j

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        if max_tokens <= 0:
            return Draft.empty()
        history = self.history
        for n in self.sizes:
            if len(history) < n - 1:
                continue
            key = (*history[len(history) - (n - 1) :], int(anchor)) if n > 1 else (int(anchor),)
            start = self.index[n].get(key)
            if start is not None:
                # history[start:] + anchor is the matched n-gram's continuation up to now;
                # repeating it is what copying through the proposal itself gives.
                period = [*history[start : start + max_tokens], int(anchor)]
                reps = -(-max_tokens // len(period))
                continuation = (period * reps)[:max_tokens]
                return Draft(np.asarray(continuation, dtype=np.int32), bucket=f"ngram{n}")
        return Draft.empty()

    def memory_bytes(self) -> int:
        # What a compact implementation holds: int32 token ids plus (key hash, position) entries.
        entries = sum(len(table) for table in self.index.values())
        return 4 * len(self.history) + 16 * entries
