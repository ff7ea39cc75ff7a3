"""The null drafter: plain autoregressive decoding through the same loop."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.decoding.drafter_protocol import Draft


class NoDrafter:
    name = "none"
    wants_features = False
    feature_layers: tuple[int, ...] = ()
    pays_per_draft = False

    def reset(self) -> None:
        pass

    def observe(self, tokens: Sequence[int], features: np.ndarray | None) -> None:
        pass

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        return Draft.empty()

    def memory_bytes(self) -> int:
        return 0
