"""What HyFlash training and the run-time drafter share, torch-free (numpy + gguf).

Training (engine/hyflash) imports this module; the run time never imports engine/hyflash.
  - the drafter folder's format: file names, card version, DrafterConfig and the draft-side
    memory accounting, the target identity a card records;
  - the target's token-embedding rows, read from its GGUF (a minimal header parse: gguf's
    GGUFReader takes seconds on a large vocabulary, since it decodes every metadata array);
  - the n-gram index over committed tokens: the HyFlash copy path's lookup candidates (the
    same tables in training and at run time) and the n-gram drafter's proposals.
"""

from __future__ import annotations

import json
import math
import mmap
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from engine.file_hash import file_sha256

# ----- the drafter folder -----------------------------------------------------------------

CARD = "card.json"
CARD_FORMAT = "hyflash-drafter"
CARD_VERSION = 3  # 3: fused feature_layers; 2: the propose graph takes `slots`; 1, 2 still read
PROPOSE_ONNX = "model_propose.onnx"
OBSERVE_ONNX = "model_observe.onnx"
DRAFT_VOCAB = "draft_vocab.npy"

# ----- the drafter's configuration and memory accounting ----------------------------------

ATTENTION_KINDS = ("local", "full")
MEMORY_KINDS = ("mamba2", "gdn", "none")
HISTORY_KINDS = ("all", "last512", "last1")


@dataclass
class DrafterConfig:
    # --- target interface ---
    hidden_size: int = 576  # target n_embd: width of its token embedding and LM head
    feature_dim: int = 576  # width of the target features fed to the drafter (k * n_embd if fused)
    # target layers whose inputs are fed beside the final state (fused features: low, middle,
    # high as EAGLE-3 / DFlash); empty = the final normed state only (every card before v4)
    feature_layers: tuple[int, ...] = field(default_factory=tuple)
    vocab_size: int = 49152  # target vocabulary
    # --- backbone ---
    d_model: int = 384
    n_layers: int = 1
    n_heads: int = 6
    ffn_mult: int = 2
    rope_base: float = 10000.0
    # --- HyFlash knobs (the paper's ablations) ---
    window: int = 64  # W: most recent committed features the slots attend to ("local")
    block_size: int = 8  # B: anchor + B-1 mask slots
    attention: str = "local"  # "local" (HyFlash / SWA) or "full" (DFlash-style)
    memory: str = "mamba2"  # "mamba2" | "gdn" | "none" (SWA-only baseline)
    history: str = "all"  # which committed history the recurrent memory sees
    cross_slot: bool = True  # slots attend to each other (bidirectional inside the block)
    # with cross_slot: each slot sees the anchor and the slots before it only, so a block of B
    # is the first B rows of the trained block and the run time computes just those
    causal_slots: bool = False
    mem_heads: int = 4
    mem_key_dim: int = 32  # Dk (Mamba-2: d_state N)
    mem_value_dim: int = 64  # Dv (Mamba-2: head dim P)
    # --- output ---
    draft_vocab_size: int = 8192  # 0 = full target vocabulary
    copy: bool = True  # pointer over window tokens + n-gram lookup candidates, gated
    ptr_dim: int = 64
    max_ngram: int = 3  # longest n-gram the lookup candidates use
    # --- training / export ---
    gamma: float = 0.8  # loss weight of slot k is gamma**(k-1)
    scan_chunk: int = 64  # chunk length of the training scan
    observe_chunk: int = 16  # most new tokens one exported observe() call takes (gdn: <= 16)

    def __post_init__(self) -> None:
        self.feature_layers = tuple(int(x) for x in self.feature_layers)  # JSON gives a list
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"DrafterConfig: {msg}")

        need(self.attention in ATTENTION_KINDS, f"attention must be one of {ATTENTION_KINDS}")
        need(self.memory in MEMORY_KINDS, f"memory must be one of {MEMORY_KINDS}")
        need(self.history in HISTORY_KINDS, f"history must be one of {HISTORY_KINDS}")
        need(self.d_model % self.n_heads == 0, "d_model must be divisible by n_heads")
        need((self.d_model // self.n_heads) % 2 == 0, "head dim must be even (RoPE)")
        need(self.ptr_dim % 2 == 0, "ptr_dim must be even (RoPE)")
        need(self.block_size >= 2, "block_size must be >= 2 (anchor + at least one mask slot)")
        need(self.window >= 1, "window must be >= 1")
        need(0 <= self.draft_vocab_size <= self.vocab_size, "draft_vocab_size out of range")
        need(self.observe_chunk >= 1 and self.scan_chunk >= 1, "chunk sizes must be >= 1")
        need(
            len(set(self.feature_layers)) == len(self.feature_layers)
            and all(x >= 0 for x in self.feature_layers),
            "feature_layers must be distinct layer ids >= 0",
        )
        need(
            not self.feature_layers
            or self.feature_dim == (len(self.feature_layers) + 1) * self.hidden_size,
            "feature_dim must be (len(feature_layers) + 1) * hidden_size",
        )
        # the exported GDN chunk inverts (I + A) by repeated squaring: exact in fp32 up to 16
        need(
            self.memory != "gdn" or self.observe_chunk <= 16,
            "observe_chunk must be <= 16 with the gdn memory",
        )

    # --- derived ---
    @property
    def n_draft_vocab(self) -> int:
        return self.draft_vocab_size or self.vocab_size

    @property
    def n_slots(self) -> int:
        """Slots that predict tokens (B - 1; slot 0 holds the anchor)."""
        return self.block_size - 1

    @property
    def history_len(self) -> int | None:
        """How many most recent committed features the memory sees (None: all of them)."""
        return {"all": None, "last512": 512, "last1": 1}[self.history]

    @property
    def short_blocks(self) -> bool:
        """Whether a block's first rows do not depend on its later ones (no slot sees a later
        slot), so a propose for S drafts can run S + 1 rows instead of block_size."""
        return self.causal_slots or not self.cross_slot

    @property
    def variant(self) -> str:
        if self.attention == "full":
            return "full-attention"
        return "swa" if self.memory == "none" else f"hyflash-{self.memory}"

    # --- JSON ---
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DrafterConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"DrafterConfig: unknown keys {sorted(unknown)}")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DrafterConfig:
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> DrafterConfig:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


def state_bytes(cfg: DrafterConfig, dtype_bytes: int = 4) -> int:
    """Recurrent state: (heads, Dk, Dv), independent of context length."""
    if cfg.memory == "none":
        return 0
    return cfg.mem_heads * cfg.mem_key_dim * cfg.mem_value_dim * dtype_bytes


def entry_bytes(cfg: DrafterConfig, dtype_bytes: int = 4) -> int:
    """Bytes one cached context entry takes: per-layer K and V, the pointer key, its token ids
    (int64 token + int64 next token)."""
    per = cfg.n_layers * 2 * cfg.d_model * dtype_bytes
    if cfg.copy:
        per += cfg.ptr_dim * dtype_bytes
    return per + 16


def history_buffer_bytes(cfg: DrafterConfig, dtype_bytes: int = 4) -> int:
    """ "last512": the memory is recomputed from the last L inputs, which must be kept."""
    n = cfg.history_len
    if cfg.memory == "none" or n is None or n <= 1:
        return 0
    return n * (cfg.feature_dim + cfg.hidden_size) * dtype_bytes


def draft_memory_bytes(cfg: DrafterConfig, n_context: int, dtype_bytes: int = 4) -> int:
    """Draft-side bytes that live with a context of n_context committed tokens.

    local (HyFlash / SWA): a fixed window of W entries + the recurrent state: constant.
    full (DFlash-style): K/V of every committed feature: linear in n_context."""
    if cfg.attention == "full":
        entries = n_context
    else:
        entries = cfg.window
    return (
        entries * entry_bytes(cfg, dtype_bytes)
        + state_bytes(cfg, dtype_bytes)
        + history_buffer_bytes(cfg, dtype_bytes)
    )


# ----- the target: identity and token-embedding rows from its GGUF -----------------------

EMBED_NAME = "token_embd.weight"
HEAD_NAME = "output.weight"


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


# ----- n-gram index over committed tokens ---------------------------------------------------


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
