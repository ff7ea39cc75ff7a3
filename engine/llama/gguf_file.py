"""Reading a GGUF file without llama.cpp: a minimal header parse (gguf's GGUFReader takes
seconds on a large vocabulary, since it decodes every metadata array), its tensors' rows as
numpy views, the token-embedding rows a drafter needs, and the checks that turn a missing,
foreign or damaged file into a readable error before llama.cpp sees it."""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from engine.events import ModelFileError, ModelLoadError
from engine.units import format_size

GGUF_MAGIC = b"GGUF"
EMBED_NAME = "token_embd.weight"
HEAD_NAME = "output.weight"


def check_gguf(path: Path) -> None:
    """Fail early with a readable message instead of letting llama.cpp abort on bad files."""
    if not path.exists():
        raise ModelLoadError(f"Model file not found: {path}")
    if not path.is_file():
        raise ModelLoadError(f"Model path is not a file: {path}")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"Not a GGUF model file (bad header): {path}")


def check_gguf_data(path: Path) -> None:
    """A file whose GGUF header reads and whose tensor data fits in it, else ModelFileError
    naming it as damaged, in one line: run before llama.cpp's kernel check tries the file,
    whose failure would otherwise blame the machine."""
    checked_meta(path)


def checked_meta(path: Path) -> dict[str, object]:
    """The scalar metadata of a file check_gguf_data accepts (the header is read once), else
    its ModelFileError."""
    size = path.stat().st_size
    again = "a truncated download? Download or copy it again."
    try:
        with GGUFIndex(path) as index:
            end = index.data_end()
            meta = index.meta
    except (struct.error, IndexError, OverflowError, MemoryError):
        raise ModelFileError(
            f"{path.name} is a damaged model file: its GGUF header is cut short or corrupt; {again}"
        ) from None
    except ValueError as exc:
        raise ModelFileError(f"{path.name} is a damaged or unsupported model file: {exc}") from None
    if end > size:
        raise ModelFileError(
            f"{path.name} is a damaged model file: it is cut short ({format_size(size)} of at "
            f"least {format_size(end)}); {again}"
        )
    return meta


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
    """Tensor directory and scalar metadata of a GGUF file; arrays are skipped, not decoded,
    except those named in `arrays` (e.g. the vocabulary's token texts), kept in .arrays."""

    def __init__(self, path: str | Path, arrays: tuple[str, ...] = ()) -> None:
        self.path = Path(path)
        self._file = self.path.open("rb")
        self.meta: dict[str, object] = {}
        self.arrays: dict[str, list] = {}
        self.tensors: dict[str, TensorInfo] = {}
        try:
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            self._parse(arrays)
        except BaseException:
            self.close()  # a scan of many damaged files must not keep each one open
            raise

    def close(self) -> None:
        # The memory map stays valid for arrays still viewing it; only the file handle closes.
        self._file.close()

    def __enter__(self) -> GGUFIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _parse(self, wanted_arrays: tuple[str, ...]) -> None:
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

        def read_array(p: int) -> tuple[list, int]:
            itype, count = struct.unpack_from("<IQ", buf, p)
            p += 12
            items = []
            for _ in range(count):
                item, p = skip_value(itype, p)
                items.append(item)
            return items, p

        for _ in range(n_kv):
            key, pos = read_str(pos)
            (vtype,) = struct.unpack_from("<I", buf, pos)
            if key in wanted_arrays and vtype == _ARRAY:
                self.arrays[key], pos = read_array(pos + 4)
                continue
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

    def data_end(self) -> int:
        """The byte just past the last tensor's data: a whole file is at least this long.
        ValueError for a tensor of a type this gguf package does not know."""
        end = 0
        for t in self.tensors.values():
            try:
                block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t.qtype)]
            except (ValueError, KeyError):
                raise ValueError(f"tensor {t.name} has an unknown type {t.qtype}") from None
            end = max(end, t.offset + math.prod(t.dims) // block * type_size)
        return end

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
