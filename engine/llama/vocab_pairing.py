"""Whether one model's token ids mean what another's do, read from the two GGUF headers alone
(no llama.cpp): a draft model's ids are verified as the target's, so each id must be the same
token text in both vocabularies."""

from __future__ import annotations

from pathlib import Path

from engine.events import DrafterMismatchError
from engine.llama.gguf_file import GGUFIndex

TOKENS_KEY = "tokenizer.ggml.tokens"
TOKENIZER_KEY = "tokenizer.ggml.model"


def _vocabulary(path: Path) -> tuple[str | None, list[str]]:
    try:
        with GGUFIndex(path, arrays=(TOKENS_KEY,)) as index:
            return index.meta.get(TOKENIZER_KEY), index.arrays.get(TOKENS_KEY, [])
    except (OSError, ValueError) as exc:
        raise DrafterMismatchError(f"cannot read the vocabulary of {path.name}: {exc}") from None


def pairing_problem(target: Path, draft: Path) -> str | None:
    """None when every token id of `draft` means what it means to `target`; else one line
    naming the first difference (token counts, tokenizer kind, or a token's text)."""
    kind_t, tokens_t = _vocabulary(target)
    kind_d, tokens_d = _vocabulary(draft)
    lead = f"{draft.name} cannot draft for {target.name}:"
    if not tokens_t or not tokens_d:
        missing = draft.name if not tokens_d else target.name
        return f"{lead} {missing} has no vocabulary in its header"
    if kind_t != kind_d or len(tokens_t) != len(tokens_d):
        return (
            f"{lead} its vocabulary has {len(tokens_d):,} tokens ({kind_d}), the target's "
            f"{len(tokens_t):,} ({kind_t})"
        )
    for i, (a, b) in enumerate(zip(tokens_d, tokens_t, strict=True)):
        if a != b:
            return f"{lead} token {i} is {a!r} in its vocabulary and {b!r} in the target's"
    return None
