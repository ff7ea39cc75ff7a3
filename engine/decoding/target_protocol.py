"""The target protocol: what the speculative loop (engine.decoding.speculative) needs from the model
whose tokens it commits, beside the drafter protocol (engine.decoding.drafter_protocol). LlamaTarget
(engine.llama.target) is the one the engine loads; tests drive the loop with small fakes. No
llama.cpp here, so the loop imports none.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class DecodeOutput:
    logits: np.ndarray  # (n, vocab) float32, a copy
    features: np.ndarray | None  # (n, F): the drafter's features (see Target.set_features)
    layers: dict[int, np.ndarray]  # captured layer inputs, layer id -> (n, n_embd)


@runtime_checkable
class Target(Protocol):
    n_ctx: int  # the context length in tokens
    tokens: list[int]  # the cached tokens, at positions 0..n_past-1

    @property
    def n_past(self) -> int:
        """How many positions the cache holds."""

    def decode(self, tokens: Sequence[int]) -> DecodeOutput:
        """Decode `tokens` at positions n_past.. (one batch), keep them in the cache and return
        every row's logits."""

    def prefill(
        self, tokens: Sequence[int], cancel: threading.Event | None = None
    ) -> np.ndarray | None:
        """Decode a prompt into the cache in batches; the last row's logits (None: no tokens
        or cancelled)."""

    def truncate(self, n_keep: int) -> None:
        """Drop cached positions n_keep.. (rejected drafts)."""

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest cached prefix of `tokens`, drop the rest; return its length."""

    def set_features(self, on: bool, layers: Sequence[int] = ()) -> None:
        """Output hidden-state features for a drafter that reads them (and which layers')."""

    def features(self, start: int, stop: int) -> np.ndarray | None:
        """Stored features of cached positions start..stop-1, or None where not all are known."""

    def features_known_upto(self) -> int:
        """The first cached position whose features are not stored."""

    def is_eog(self, token: int) -> bool:
        """Whether `token` ends a generation (end of text, end of turn)."""

    def token_bytes(self, token: int) -> bytes:
        """The bytes of a token's text (a UTF-8 character may span tokens)."""

    def kv_bytes_used(self) -> int: ...

    def kv_bytes_allocated(self) -> int: ...
