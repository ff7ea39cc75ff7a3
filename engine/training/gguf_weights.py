"""The target's frozen token embedding and LM head as whole matrices, read from its GGUF
(training: dequantized once), and a stand-in GGUF writer for tests.

Torch-free; the header index and the run time's on-demand embedding rows are in
engine/drafters/hyflash_card.py. Dequantization is always the gguf package's.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from engine.llama.gguf_file import EMBED_NAME, HEAD_NAME, GGUFIndex


@dataclass
class TargetWeights:
    embedding: np.ndarray  # (vocab, hidden) float32
    lm_head: np.ndarray  # (vocab, hidden) float32; the same array when tied
    tied: bool


def _dequantize_rows(raw: np.ndarray, qtype: int, n_rows: int) -> np.ndarray:
    data = gguf.quants.dequantize(np.asarray(raw), gguf.GGMLQuantizationType(int(qtype)))
    return np.ascontiguousarray(data.reshape(n_rows, -1), dtype=np.float32)


def load_target_weights(path: str | Path, *, reader: str = "index") -> TargetWeights:
    """Dequantize token_embd (and output.weight, or tie it to token_embd when absent).

    reader="gguf" goes through gguf.GGUFReader (seconds to open: it decodes every metadata
    array); "index" (default) locates the tensors with GGUFIndex; both dequantize with
    gguf.quants.dequantize and give identical arrays."""
    with ExitStack() as opened:  # the index's file handle closes once the matrices are read
        if reader == "gguf":
            tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}

            def get(name: str) -> np.ndarray:
                t = tensors[name]  # GGUF lists dims fastest first: [hidden, vocab]
                return _dequantize_rows(t.data, t.tensor_type, int(t.shape[-1]))

            names = set(tensors)
        elif reader == "index":
            index = opened.enter_context(GGUFIndex(path))

            def get(name: str) -> np.ndarray:
                raw = index.rows_view(name)
                return _dequantize_rows(raw, index.tensors[name].qtype, raw.shape[0])

            names = set(index.tensors)
        else:
            raise ValueError(f"unknown reader {reader!r}")
        if EMBED_NAME not in names:
            raise ValueError(f"{Path(path).name} has no {EMBED_NAME}")
        embedding = get(EMBED_NAME)
        if HEAD_NAME in names:
            return TargetWeights(embedding, get(HEAD_NAME), tied=False)
    return TargetWeights(embedding, embedding, tied=True)


def write_stand_in_gguf(
    path: str | Path, embedding: np.ndarray, lm_head: np.ndarray | None = None, arch: str = "llama"
) -> Path:
    """A minimal GGUF holding only token_embd (and output) in f32: a stand-in target for
    tests of the weight reader and of the drafter's identity check."""
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_name("stand-in")
    writer.add_vocab_size(int(embedding.shape[0]))
    writer.add_embedding_length(int(embedding.shape[1]))
    writer.add_tensor(EMBED_NAME, np.ascontiguousarray(embedding, dtype=np.float32))
    if lm_head is not None:
        writer.add_tensor(HEAD_NAME, np.ascontiguousarray(lm_head, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
