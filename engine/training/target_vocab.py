"""What training needs to know of a target GGUF: its end-of-generation ids and the shape of
its token embedding."""

from __future__ import annotations

from pathlib import Path

from engine.llama.gguf_file import GGUFIndex


def embedding_shape(gguf: Path) -> tuple[int, int]:
    with GGUFIndex(gguf) as index:
        return index.embedding_shape()


def eog_ids(gguf: Path) -> list[int]:
    from engine.llama.target import LlamaTarget

    with LlamaTarget(gguf, n_ctx=64) as t:
        return [i for i in range(t.n_vocab) if t.is_eog(i)]
