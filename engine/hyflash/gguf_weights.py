"""The target's frozen token embedding and LM head, read from its GGUF; the target identity.

Torch-free (numpy + gguf) so the run-time drafter can use it too. gguf.GGUFReader takes
seconds to open a file with a large vocabulary (it decodes every metadata array), so
`GGUFIndex` locates tensors with a minimal header parse; dequantization is always the gguf
package's. Training dequantizes whole matrices once (`load_target_weights`); the run time
dequantizes a few embedding rows per call from a memory map (`EmbeddingRows`).
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import gguf
import numpy as np

EMBED_NAME = "token_embd.weight"
HEAD_NAME = "output.weight"


# ----- identity ---------------------------------------------------------------------------

_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 22) -> str:
    """sha256 of a (multi-GB) file read in chunks; cached per (path, size, mtime) in-process."""
    path = Path(path).resolve()
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with path.open("rb") as f:
            while block := f.read(chunk_bytes):
                h.update(block)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


@dataclass(frozen=True)
class TargetIdentity:
    """What a drafter was trained against; stored in card.json and checked at load time."""

    gguf_sha256: str
    vocab_size: int
    hidden_size: int
    file_size: int = 0
    architecture: str = ""
    name: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def target_identity(path: str | Path) -> TargetIdentity:
    path = Path(path)
    with GGUFIndex(path) as index:
        vocab, hidden = index.embedding_shape()
        arch = str(index.meta.get("general.architecture", ""))
        name = str(index.meta.get("general.name", ""))
    return TargetIdentity(
        gguf_sha256=file_sha256(path),
        vocab_size=vocab,
        hidden_size=hidden,
        file_size=path.stat().st_size,
        architecture=arch,
        name=name,
    )


# ----- full matrices (training) -------------------------------------------------------------


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


# ----- minimal header index + on-demand rows (run time) ---------------------------------------

_SCALAR = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # GGUF order: fastest-varying first
    qtype: int
    offset: int  # absolute byte offset in the file


class GGUFIndex:
    """Tensor directory and scalar metadata of a GGUF file (arrays are skipped, not decoded)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = self.path.open("rb")
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self.meta: dict[str, object] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._parse()

    def close(self) -> None:
        # The memory map stays valid for arrays still viewing it; only the file handle closes.
        self._file.close()

    def __enter__(self) -> GGUFIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _parse(self) -> None:
        buf = self._map
        if buf[:4] != b"GGUF":
            raise ValueError(f"{self.path.name} is not a GGUF file")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version < 2 or version > 1000:  # a big-endian file reads as a huge version
            raise ValueError(f"unsupported GGUF version {version} in {self.path.name}")
        pos = 24

        def read_str(p: int) -> tuple[str, int]:
            (n,) = struct.unpack_from("<Q", buf, p)
            return bytes(buf[p + 8 : p + 8 + n]).decode("utf-8", errors="replace"), p + 8 + n

        def skip_value(vtype: int, p: int) -> tuple[object, int]:
            if vtype in _SCALAR:
                fmt = _SCALAR[vtype]
                return struct.unpack_from(fmt, buf, p)[0], p + struct.calcsize(fmt)
            if vtype == _STRING:
                return read_str(p)
            if vtype == _ARRAY:
                itype, count = struct.unpack_from("<IQ", buf, p)
                p += 12
                if itype in _SCALAR:
                    return None, p + count * struct.calcsize(_SCALAR[itype])
                for _ in range(count):
                    _, p = skip_value(itype, p)
                return None, p
            raise ValueError(f"bad GGUF value type {vtype} in {self.path.name}")

        for _ in range(n_kv):
            key, pos = read_str(pos)
            (vtype,) = struct.unpack_from("<I", buf, pos)
            value, pos = skip_value(vtype, pos + 4)
            if value is not None:
                self.meta[key] = value
        infos = []
        for _ in range(n_tensors):
            name, pos = read_str(pos)
            (n_dims,) = struct.unpack_from("<I", buf, pos)
            dims = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
            qtype, offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * n_dims)
            pos += 4 + 8 * n_dims + 12
            infos.append((name, tuple(int(d) for d in dims), int(qtype), int(offset)))
        align = int(self.meta.get("general.alignment", 32))
        data_start = (pos + align - 1) // align * align
        for name, dims, qtype, offset in infos:
            self.tensors[name] = TensorInfo(name, dims, qtype, data_start + offset)

    def embedding_shape(self) -> tuple[int, int]:
        info = self.tensors.get(EMBED_NAME)
        if info is None:
            raise ValueError(f"{self.path.name} has no {EMBED_NAME}")
        return info.dims[1], info.dims[0]

    def rows_view(self, name: str) -> np.ndarray:
        """The raw bytes of a 2-D tensor as (rows, bytes_per_row) uint8, memory-mapped."""
        info = self.tensors[name]
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(info.qtype)]
        row_bytes = info.dims[0] // block * type_size
        n_rows = int(np.prod(info.dims[1:]))
        return np.frombuffer(self._map, np.uint8, n_rows * row_bytes, info.offset).reshape(
            n_rows, row_bytes
        )


class EmbeddingRows:
    """Target token-embedding rows on demand: dequantized from the memory-mapped GGUF, cached
    (a conversation uses a few thousand distinct tokens at most)."""

    def __init__(self, path: str | Path, cache_limit: int = 65536) -> None:
        with GGUFIndex(path) as index:
            self.vocab_size, self.hidden_size = index.embedding_shape()
            self._raw = index.rows_view(EMBED_NAME)
            self._qtype = gguf.GGMLQuantizationType(index.tensors[EMBED_NAME].qtype)
        self._cache: dict[int, np.ndarray] = {}
        self._cache_limit = cache_limit

    def __call__(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"token id out of range 0..{self.vocab_size - 1}")
        missing = sorted({int(i) for i in ids if int(i) not in self._cache})
        if missing:
            if len(self._cache) + len(missing) > self._cache_limit:
                self._cache.clear()
            rows = gguf.quants.dequantize(self._raw[missing], self._qtype)
            rows = rows.reshape(len(missing), self.hidden_size).astype(np.float32)
            for i, row in zip(missing, rows, strict=True):
                self._cache[i] = row
        out = np.empty((ids.size, self.hidden_size), dtype=np.float32)
        for j, i in enumerate(ids):
            out[j] = self._cache[int(i)]
        return out

    def cached_bytes(self) -> int:
        return len(self._cache) * self.hidden_size * 4


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
