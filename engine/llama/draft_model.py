"""A small GGUF of the target's vocabulary as a drafter (LM Studio's "Draft Model", llama.cpp's
draft-simple): it decodes its own guess token by token in its own llama.cpp context, in the
same process as the target, and stops a block early where its own confidence falls below
p_min. Its cache follows the committed tokens by prefix, so rejected drafts roll back with
the target's. It loads only for a target of the same vocabulary (engine.llama.vocab_pairing):
its ids are verified as the target's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.decoding.drafter_protocol import Draft
from engine.events import DrafterMismatchError
from engine.llama.target import LlamaTarget
from engine.llama.vocab_pairing import pairing_problem

# llama.cpp's default --draft-p-min: below it a greedy draft token is more likely wrong than
# worth its decode
DEFAULT_P_MIN = 0.75


class DraftModelDrafter:
    wants_features = False
    feature_layers: tuple[int, ...] = ()
    pays_per_draft = True  # one draft-model decode per drafted token

    def __init__(self, model: LlamaTarget, name: str, p_min: float = DEFAULT_P_MIN) -> None:
        self.model, self.name, self.p_min = model, name, p_min
        self.context: list[int] = []  # committed tokens observed, the anchor excluded

    @classmethod
    def load(cls, path: Path, target: LlamaTarget, name: str) -> DraftModelDrafter:
        """The draft model at `path` for `target`, in a context as long as the target's, on
        its backend and with its kernels' configuration; DrafterMismatchError when the two do
        not pair."""
        problem = pairing_problem(target.path, path)
        if problem:
            raise DrafterMismatchError(problem)
        model = LlamaTarget(
            path,
            n_ctx=target.n_ctx,
            n_threads=target.n_threads,
            n_gpu_layers=target.n_gpu_layers,
            kernels=target.kernels,
        )
        return cls(model, name)

    def reset(self) -> None:
        self.context.clear()  # the cache keeps what the next context shares with it

    def observe(self, tokens: Sequence[int], features: np.ndarray | None = None) -> None:
        self.context.extend(int(t) for t in tokens)

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        model = self.model
        max_tokens = min(max_tokens, model.n_ctx - len(self.context) - 1)
        if max_tokens <= 0:
            return Draft.empty()
        wanted = [*self.context, int(anchor)]
        kept = model.reuse_prefix(wanted[:-1])  # at least the anchor is decoded: its logits
        row = model.prefill(wanted[kept:])
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        while True:
            token = int(np.argmax(row))
            if self.p_min > 0 and _top_probability(row, token) < self.p_min:
                break
            tokens.append(token)
            if with_logits:
                rows.append(row)
            if len(tokens) == max_tokens:
                break
            row = model.decode([token], all_logits=False).logits[-1]
        if not tokens:
            return Draft.empty()
        logits = np.stack(rows) if with_logits else None
        return Draft(np.asarray(tokens, dtype=np.int32), logits, bucket="model")

    def memory_bytes(self) -> int:
        """Its weights and the KV its context holds: both live only for drafting."""
        return self.model.model_size_bytes() + self.model.kv_bytes_used()

    def close(self) -> None:
        self.model.close()


def _top_probability(row: np.ndarray, token: int) -> float:
    shifted = np.exp(row - row[token])  # row[token] is the maximum
    return float(1.0 / shifted.sum())
