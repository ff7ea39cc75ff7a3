"""Drafting from a predicted answer (OpenAI's Predicted Outputs): the text a caller expects,
e.g. the file it asked to be edited, as a source of drafts beside the engine's own drafter.

The answer's last committed tokens and the anchor are looked up in the prediction (the
longest run of up to MAX_MATCH tokens, the occurrence nearest after where the last copy left
off), and the prediction's next tokens are proposed; where nothing matches, the inner drafter
proposes. Drafts are only proposals: the target verifies every token, so greedy output is
plain decoding's whatever the prediction says.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import numpy as np

from engine.decoding.drafter_protocol import Draft, Drafter

MAX_MATCH = 8  # tokens of the answer's end looked up in the prediction, longest first


def copy_prior(matched: int) -> float:
    """P(slot accepted) the block-size chooser starts from for a copy after a run of `matched`
    tokens (0.75 after one, 0.94 after eight): the caller says the answer is this text, so a
    copy is likely right from the first proposal, more so after a longer run; what the answer
    really does replaces it within a few proposals."""
    return 1.0 - 0.5 / (matched + 1)


class PredictionDrafter:
    def __init__(self, inner: Drafter, prediction: Sequence[int]) -> None:
        self.inner = inner
        self.prediction = [int(t) for t in prediction]
        self.name = inner.name
        self.wants_features = inner.wants_features
        self.feature_layers = inner.feature_layers
        self.pays_per_draft = inner.pays_per_draft
        # n-gram of the prediction -> positions just after each occurrence, in order
        self._after: dict[tuple[int, ...], list[int]] = {}
        p = self.prediction
        for end in range(1, len(p) + 1):
            for n in range(1, min(MAX_MATCH, end) + 1):
                self._after.setdefault(tuple(p[end - n : end]), []).append(end)
        self.reset()

    def reset(self) -> None:
        self.inner.reset()
        self._recent: list[int] = []  # the last MAX_MATCH - 1 committed tokens
        self._cursor = 0  # where in the prediction the last copy left off

    def observe(self, tokens: Sequence[int], features: np.ndarray | None) -> None:
        self.inner.observe(tokens, features)
        self._recent = [*self._recent, *(int(t) for t in tokens)][-(MAX_MATCH - 1) :]

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        if max_tokens > 0:
            tail = [*self._recent, int(anchor)]
            for n in range(min(MAX_MATCH, len(tail)), 0, -1):
                positions = self._after.get(tuple(tail[-n:]))
                if not positions:
                    continue
                start = next((q for q in positions if q >= self._cursor), positions[-1])
                copy = self.prediction[start : start + max_tokens]
                if copy:
                    self._cursor = start
                    tokens = np.asarray(copy, dtype=np.int32)
                    return Draft(tokens, bucket=f"prediction{n}", prior=copy_prior(n))
        return self.inner.propose(anchor, max_tokens, with_logits=with_logits)

    def memory_bytes(self) -> int:
        return self.inner.memory_bytes()


def prediction_usage(prediction: Sequence[int], answer: Sequence[int]) -> tuple[int, int]:
    """(accepted, rejected) prediction tokens as OpenAI reports them: those of the prediction
    that appear in the answer, in order, and the rest."""
    matcher = difflib.SequenceMatcher(None, list(prediction), list(answer), autojunk=False)
    accepted = sum(block.size for block in matcher.get_matching_blocks())
    return accepted, len(prediction) - accepted
