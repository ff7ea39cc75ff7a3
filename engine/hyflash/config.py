"""DrafterConfig: every knob of the HyFlash drafter and its baselines, plus memory accounting.

Torch-free on purpose: the run-time drafter reads the same config from card.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

ATTENTION_KINDS = ("local", "full")
MEMORY_KINDS = ("mamba2", "gdn", "none")
HISTORY_KINDS = ("all", "last512", "last1")


@dataclass
class DrafterConfig:
    # --- target interface ---
    hidden_size: int = 576  # target n_embd: width of its token embedding and LM head
    feature_dim: int = 576  # width of the target features fed to the drafter (k * n_embd if fused)
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


def select_draft_vocab(
    token_ids: Iterable[int] | np.ndarray, size: int, vocab_size: int, always: Iterable[int] = ()
) -> np.ndarray:
    """The draft vocabulary: `always` (e.g. end-of-generation ids) then the most frequent ids
    of a corpus (ties: lower id), padded with the lowest unused ids; sorted, int64."""
    if size > vocab_size:
        raise ValueError(f"a draft vocabulary of {size} exceeds the vocabulary {vocab_size}")
    ids = (
        np.fromiter(token_ids, dtype=np.int64)
        if not isinstance(token_ids, np.ndarray)
        else (token_ids.astype(np.int64).ravel())
    )
    counts = np.bincount(ids, minlength=vocab_size)[:vocab_size]
    order = np.lexsort((np.arange(vocab_size), -counts))  # count descending, then id
    chosen = list(dict.fromkeys([*(int(t) for t in always), *order.tolist()]))[:size]
    return np.sort(np.asarray(chosen, dtype=np.int64))
