"""Events yielded by `Engine.generate`: the one narrow API shared by CLI, GUI and benchmarks."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from numbers import Integral, Real


class EngineError(Exception):
    """A user-facing problem (bad model, bad input): the message is meant to be shown as is."""


class ModelLoadError(EngineError):
    pass


class ModelFileError(ModelLoadError):
    """The model file itself cannot load (damaged, cut short, an unsupported architecture),
    whatever the machine or its kernels."""


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
MAX_BLOCK_SIZE = 32  # the largest block (anchor + drafts) one target decode verifies


class SettingError(ValueError):
    """A generation setting no generation can use; `field` names it (GenerationSettings'
    attribute), the message says the allowed range in one line."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _is_int(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def validate_block_size(block_size: object) -> int | None:
    """None for auto; otherwise the fixed block size. Raises SettingError (a ValueError) with
    a clear message; a number written as text ("4") is refused, not read."""
    if block_size == "auto" and isinstance(block_size, str):
        return None
    if not _is_int(block_size) or not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise SettingError(
            "block_size", f"block size must be 'auto' or 1..{MAX_BLOCK_SIZE}, not {block_size!r}"
        )
    return int(block_size)


def _check_sampling(settings: GenerationSettings) -> None:
    """Temperature, top-p and top-k: what no sampler can honour raises SettingError."""
    temperature, top_p, top_k = settings.temperature, settings.top_p, settings.top_k
    if not (_is_number(temperature) and temperature >= 0):  # also refuses NaN
        raise SettingError(
            "temperature", f"temperature must be 0 (greedy) or more, not {temperature!r}"
        )
    if math.isinf(temperature):
        raise SettingError("temperature", f"temperature must be finite, not {temperature!r}")
    if not (_is_number(top_p) and 0 < top_p <= 1):
        raise SettingError("top_p", f"top-p must be above 0 and at most 1, not {top_p!r}")
    if not (_is_int(top_k) and top_k >= 0):
        raise SettingError("top_k", f"top-k must be 0 (off) or more, not {top_k!r}")


@dataclass
class GenerationSettings:
    """What one generation does. Checked when made: a value no generation can use raises
    SettingError (a ValueError) whose one-line message names the field and its range, so
    every surface (CLI, server, app, the loop) shows the same words and none checks again."""

    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int | None = None  # None = a fresh random seed per generation
    block_size: int | str = "auto"  # "auto" or 1..MAX_BLOCK_SIZE (1 = plain decoding)
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False  # keep going past end-of-generation tokens (benchmarks, tests)

    def __post_init__(self) -> None:
        validate_block_size(self.block_size)
        _check_sampling(self)
        if not (_is_int(self.max_tokens) and self.max_tokens >= 1):
            raise SettingError(
                "max_tokens", f"max tokens must be at least 1, not {self.max_tokens!r}"
            )
        if self.seed is not None and not _is_int(self.seed):
            raise SettingError("seed", f"seed must be a whole number or None, not {self.seed!r}")
        if not (isinstance(self.stop, list | tuple) and all(isinstance(s, str) for s in self.stop)):
            raise SettingError("stop", f"stop must be a list of strings, not {self.stop!r}")
        self.stop = list(self.stop)

    @property
    def fixed_block(self) -> int | None:
        """The fixed block size, or None for auto (the value is known to be valid)."""
        return None if self.block_size == "auto" else int(self.block_size)


Event = TextDelta | StepStats | Finished | ErrorEvent
