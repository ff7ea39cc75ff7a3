"""Events yielded by `Engine.generate`, what an engine reports about itself (EngineInfo) and
the settings of one generation: the one narrow API shared by CLI, server, GUI and benchmarks.
Light (no llama.cpp): the app imports it on its UI thread."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, get_args

from engine.options import OPTIONS, defaults


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
    verify_mode: str = (
        "exact"  # "exact" (rows equal single decodes) or "fast" (engine.llama.kernels)
    )
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
    # with a predicted answer: (accepted, rejected) prediction tokens, as OpenAI counts them
    prediction_tokens: tuple[int, int] | None = None


# What an ErrorEvent (and the app worker's error signal) reports, so a surface can answer in
# kind: the server's status code (engine.server.protocol.engine_error), the app's hint.
ErrorKind = Literal[
    "input",  # what was asked cannot be generated (an empty prompt, a bad message list): 400
    "context",  # the prompt does not fit the context: 400, and the app suggests a new chat
    "drafter",  # a server request's drafter does not fit the model: 400
    "unavailable",  # the server is shutting down or cannot take the job: 503
    "internal",  # an unexpected exception in a server job: 500
    "error",  # the engine failed while generating (llama.cpp refused a decode): 500
    "model",  # the app's worker: no model is loaded to answer with
]
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)


@dataclass(frozen=True)
class ErrorEvent:
    message: str
    kind: ErrorKind = "error"


@dataclass(frozen=True)
class EngineInfo:
    """A loaded engine, as the app, the server and the benchmarks show it (Engine.info)."""

    model_id: str
    model_path: str
    n_ctx: int
    n_threads: int
    backend: str
    backend_reason: str
    drafter: str
    model_bytes: int
    kv_bytes_per_token: int
    kernels: tuple[str, ...]  # what the kernel check found, one line per configuration
    verify_mode: str  # "exact" | "fast"
    verify_chunk: int  # most rows per verify decode; 0 = whole blocks
    verify_reason: str


DEFAULT_N_CTX = 4096  # context length in tokens when the caller does not choose one


class SettingError(ValueError):
    """A generation setting no generation can use; `field` names it (GenerationSettings'
    attribute), the message says the allowed range in one line."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


_DEFAULT = defaults("engine")


@dataclass
class GenerationSettings:
    """What one generation does; the fields, their ranges and defaults are engine.options'
    rows. Checked when made: a value no generation can use raises SettingError (a ValueError)
    whose one-line message names the field and its range, so every surface (CLI, server, app,
    the loop) shows the same words and none checks again."""

    max_tokens: int = _DEFAULT["max_tokens"]
    temperature: float = _DEFAULT["temperature"]
    top_p: float = _DEFAULT["top_p"]
    top_k: int = _DEFAULT["top_k"]  # 0 = off
    seed: int | None = _DEFAULT["seed"]  # None = a fresh random seed per generation
    block_size: int | str = _DEFAULT["block_size"]  # "auto" or 1..MAX_BLOCK_SIZE (1 = plain)
    stop: list[str] = field(default_factory=lambda: list(_DEFAULT["stop"]))
    ignore_eos: bool = False  # keep going past end-of-generation tokens (benchmarks, tests)

    def __post_init__(self) -> None:
        for option in OPTIONS:
            why = option.problem(getattr(self, option.name))
            if why is not None:
                raise SettingError(option.name, why)
        self.stop = list(self.stop)

    @property
    def fixed_block(self) -> int | None:
        """The fixed block size, or None for auto (the value is known to be valid)."""
        return None if self.block_size == "auto" else int(self.block_size)


Event = TextDelta | StepStats | Finished | ErrorEvent
