"""The n-gram index over committed tokens: the n-gram drafter's proposals and the HyFlash
copy path's lookup candidates (the same tables in training and at run time). numpy only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class NgramIndex:
    """The committed tokens and, for every n-gram of them (min_ngram <= n <= max_ngram), where
    its most recent occurrence was followed; O(max n) dict updates per token."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.sizes = range(max_ngram, min_ngram - 1, -1)  # longest first
        self.reset()

    def reset(self) -> None:
        self.history: list[int] = []
        # n-gram -> position of the token that followed its most recent occurrence (entered
        # once that token is committed)
        self.follower: dict[tuple[int, ...], int] = {}

    def observe(self, tokens: Sequence[int]) -> None:
        hist = self.history
        for token in tokens:
            j = len(hist)
            hist.append(int(token))
            for n in self.sizes:
                if j >= n:
                    self.follower[tuple(hist[j - n : j])] = j

    def match(self, anchor: int, *, latest: bool = False) -> tuple[int, int]:
        """(n, p) for the longest n-gram ending with the anchor (at position len(history)) seen
        before: p is the position of the token that followed its most recent occurrence, and
        p == len(history) means the anchor itself. latest: that occurrence may end at the last
        committed token (the HyFlash candidates do; the n-gram drafter looks further back).
        (0, -1) when no n-gram matches."""
        hist = self.history
        a = len(hist)
        for n in self.sizes:
            if a < n - 1:
                continue
            key = (*hist[a - n + 1 :], int(anchor))
            if latest and a >= n and tuple(hist[a - n : a]) == key:
                return n, a
            p = self.follower.get(key)
            if p is not None:
                return n, p
        return 0, -1

    def copy(self, p: int, anchor: int, length: int) -> list[int]:
        """The tokens from position p up to the present (the anchor), at most length of them."""
        return [*self.history[p : p + length], int(anchor)][:length]

    def candidates(self, anchor: int, n_slots: int) -> tuple[np.ndarray, np.ndarray]:
        """HyFlash's lookup candidates: the tokens that followed the longest matching n-gram
        (up to the anchor, which is the last they may reach), with the matched length per slot
        (0 = no candidate)."""
        ids = np.zeros(n_slots, dtype=np.int64)
        match = np.zeros(n_slots, dtype=np.int64)
        n, p = self.match(anchor, latest=True)
        if n:
            found = self.copy(p, anchor, n_slots)
            ids[: len(found)] = found
            match[: len(found)] = n
        return ids, match

    def nbytes(self) -> int:
        """What a compact implementation holds: int32 token ids plus (key hash, position)."""
        return 4 * len(self.history) + 16 * len(self.follower)


def ngram_candidates(
    tokens: Sequence[int], n_slots: int, max_ngram: int = 3
) -> tuple[np.ndarray, np.ndarray]:
    """Lookup candidates for every anchor position of a sequence (training tables):
    (T, n_slots) ids and match lengths, row a = NgramIndex over tokens[:a], anchor tokens[a]."""
    ids = np.zeros((len(tokens), n_slots), dtype=np.int64)
    match = np.zeros((len(tokens), n_slots), dtype=np.int64)
    index = NgramIndex(max_ngram)
    for a, token in enumerate(tokens):
        ids[a], match[a] = index.candidates(int(token), n_slots)
        index.observe([token])
    return ids, match
