"""The HyFlash drafter folder, torch-free: what training writes and the run time reads.

File names and the card's version, DrafterConfig (the drafter's shape, checked on load), the
draft-side memory accounting, and the target identity a card records. Training
(engine/training) imports this module; the run time never imports engine/training.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from engine.file_hash import file_sha256
from engine.llama.gguf_file import GGUFIndex

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


# ----- the target a card records --------------------------------------------------------


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
