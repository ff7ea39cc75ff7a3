"""Events yielded by `Engine.generate`: the one narrow API shared by CLI, GUI and benchmarks."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


class EngineError(Exception):
    """A user-facing problem (bad model, bad input): the message is meant to be shown as is."""


class ModelLoadError(EngineError):
    pass


class DrafterMismatchError(EngineError):
    pass


class ContextOverflowError(EngineError):
    pass


@dataclass(frozen=True)
class TextDelta:
    """New answer text. `drafted` is True when every token behind it came from accepted drafts
    (the GUI can tint those); the target's own correction/bonus tokens come as drafted=False."""

    text: str
    token_ids: tuple[int, ...]
    drafted: bool


@dataclass
class StepStats:
    step: int
    block_size: int  # tokens verified in this step's target decode (1 = plain decoding)
    proposed: int  # draft tokens verified this step
    accepted: int  # draft tokens accepted this step
    committed: int  # tokens committed this step (accepted + 1)
    tau_mean: float  # mean committed tokens per target decode so far (acceptance length)
    slot_accept_counts: list[int]  # [k] = times draft slot k+1 was accepted
    slot_propose_counts: list[int]  # [k] = times draft slot k+1 was verified
    tokens_generated: int
    tokens_per_s: float  # decode speed since the first token
    ttft_s: float
    prefill_tokens: int
    prefill_tokens_per_s: float
    target_kv_bytes: int  # KV cache in use
    target_kv_alloc_bytes: int  # KV cache allocated
    draft_memory_bytes: int
    draft_ms: float
    verify_ms: float
    block_size_mode: str  # "auto" or "fixed"
    verify_mode: str = "exact"  # "exact" (rows equal single decodes) or "fast" (engine.kernels)
    verify_chunk: int = 0  # most rows per target decode when verifying; 0 = whole blocks

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Finished:
    text: str
    token_ids: tuple[int, ...]
    stop_reason: str  # "eos" | "stop" | "length" | "context" | "cancelled"
    stats: StepStats | None
    prompt_tokens: int = 0
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class ErrorEvent:
    message: str
    kind: str = "error"  # "context" | "input" | "error"


DEFAULT_N_CTX = 4096  # context length in tokens when the caller does not choose one


@dataclass
class GenerationSettings:
    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    block_size: int | str = "auto"  # "auto" or 1..MAX_BLOCK_SIZE
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False  # keep going past end-of-generation tokens (benchmarks, tests)


Event = TextDelta | StepStats | Finished | ErrorEvent
