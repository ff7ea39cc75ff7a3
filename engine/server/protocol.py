"""OpenAI's request and response shapes, and their translation to and from the engine.

Requests are validated strictly (a string where a number belongs is an error, not coerced);
fields that we cannot honour and that change what the client gets back (n > 1, tools, images,
logprobs, JSON mode) are refused with a clear 400 instead of being ignored.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.drafters import DRAFTER_CHOICES
from engine.drafters.spec import DRAFT_MODEL
from engine.events import ErrorEvent, Finished, GenerationSettings, SettingError, StepStats
from engine.models.catalog import load_catalog
from engine.options import OPTION
from engine.server.errors import APIError
from engine.server.jobs import JobEvent, JobStarted

MAX_STOP_STRINGS = 4  # OpenAI's limit
MAX_STOP_CHARS = 256  # each; a stop string is a marker, not a document
RANDOM_SEED = -1  # llama-server's "pick one": the same as no seed
CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "context": "length"}


class _Strict(BaseModel):
    # extra fields pass (clients send many harmless ones: user, metadata, penalties, ...)
    model_config = ConfigDict(extra="allow", strict=True)


class ContentPart(_Strict):
    type: str
    text: str | None = None


class ChatMessage(_Strict):
    role: str
    content: str | list[ContentPart] | None = None
    tool_calls: list[Any] | None = None


class StreamOptions(_Strict):
    include_usage: bool = False


class Prediction(_Strict):
    """OpenAI's Predicted Outputs: the answer the caller expects (say, the file to edit)."""

    type: str
    content: str | list[ContentPart]


class HyflashOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    block_size: int | str | None = None
    drafter: str | None = None


class _Request(_Strict):
    # Types are checked here, ranges by GenerationSettings (generation_settings shows its
    # message); defaults and OpenAI's limits beyond the engine's are engine.options' server ones.
    model: str
    max_tokens: int | None = OPTION["max_tokens"].server
    temperature: float = Field(OPTION["temperature"].server, le=OPTION["temperature"].server_max)
    top_p: float = OPTION["top_p"].server
    seed: int | None = OPTION["seed"].server
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1)
    hyflash: HyflashOptions | None = None
    prediction: Prediction | None = None


class ChatRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None


class CompletionRequest(_Request):
    prompt: str | list[str]
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


def _unsupported(param: str, what: str) -> APIError:
    return APIError(400, "unsupported_parameter", f"{what} is not supported by this server", param)


def _check_common(req: _Request) -> None:
    if req.n != 1:
        raise _unsupported("n", "n > 1 (several choices per request)")


def chat_messages(req: ChatRequest) -> list[dict]:
    """The request's messages as the engine's chat template takes them."""
    _check_common(req)
    if req.tools or req.functions or req.tool_choice not in (None, "none"):
        raise _unsupported("tools", "Tool and function calling")
    if req.logprobs:
        raise _unsupported("logprobs", "logprobs")
    if req.response_format and req.response_format.get("type", "text") != "text":
        raise _unsupported("response_format", "A response format other than text")
    if req.audio or (req.modalities and set(req.modalities) - {"text"}):
        raise _unsupported("modalities", "Audio output")
    messages = []
    for i, m in enumerate(req.messages):
        if m.role in ("tool", "function") or m.tool_calls:
            raise _unsupported(f"messages.{i}", "Tool and function calling")
        role = CHAT_ROLES.get(m.role)
        if role is None:
            raise APIError(
                400,
                "invalid_value",
                f"messages.{i}.role: '{m.role}' is not one of system, user, assistant",
                f"messages.{i}.role",
            )
        messages.append({"role": role, "content": _text(m.content, i)})
    return messages


def _text(content: str | list[ContentPart] | None, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise _unsupported(f"messages.{i}.content", f"Content of type '{part.type}'")
        texts.append(part.text)
    return "".join(texts)


def completion_prompt(req: CompletionRequest) -> str:
    _check_common(req)
    if req.echo or req.suffix or req.logprobs is not None or (req.best_of or 1) > 1:
        raise _unsupported("echo", "echo, suffix, logprobs and best_of")
    if isinstance(req.prompt, list):
        if len(req.prompt) != 1:
            raise _unsupported("prompt", "A batch of prompts")
        return req.prompt[0]
    return req.prompt


def generation_settings(
    req: _Request, default_max_tokens: int, default_block_size: int | str, n_ctx: int
) -> GenerationSettings:
    """Sampling settings; the block size comes from `hyflash.block_size`, else the server's.
    A value no generation can use is a 400 with GenerationSettings' message, and so is an
    answer longer than the model's whole context (n_ctx), which no prompt could leave room
    for."""
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stop) > MAX_STOP_STRINGS:
        raise APIError(400, "invalid_value", f"at most {MAX_STOP_STRINGS} stop strings", "stop")
    if any(len(s) > MAX_STOP_CHARS for s in stop):
        raise APIError(
            400,
            "invalid_value",
            f"a stop string may be at most {MAX_STOP_CHARS} characters",
            "stop",
        )
    block = default_block_size
    if req.hyflash and req.hyflash.block_size is not None:
        block = req.hyflash.block_size
    max_tokens, max_tokens_param = req.max_tokens, "max_tokens"
    if getattr(req, "max_completion_tokens", None) is not None:
        max_tokens, max_tokens_param = req.max_completion_tokens, "max_completion_tokens"
    if isinstance(max_tokens, int) and max_tokens > n_ctx:
        raise APIError(
            400,
            "context_length_exceeded",
            f"{max_tokens_param}: {max_tokens} tokens do not fit in the model's context of "
            f"{n_ctx} tokens, with or without a prompt",
            max_tokens_param,
        )
    try:
        return GenerationSettings(
            max_tokens=default_max_tokens if max_tokens is None else max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=None if req.seed == RANDOM_SEED else req.seed,
            block_size=block,
            stop=[s for s in stop if s],
        )
    except SettingError as exc:
        param = {"block_size": "hyflash.block_size", "max_tokens": max_tokens_param}.get(
            exc.field, exc.field
        )
        code = "invalid_block_size" if exc.field == "block_size" else "invalid_value"
        raise APIError(400, code, f"{param}: {exc}", param) from None


def predicted_text(req: _Request) -> str | None:
    """The prediction's text, drafted from where the answer matches it; None: none given."""
    if req.prediction is None:
        return None
    if req.prediction.type != "content":
        raise APIError(
            400,
            "invalid_value",
            f"prediction.type: '{req.prediction.type}' is not 'content'",
            "prediction.type",
        )
    content = req.prediction.content
    if isinstance(content, str):
        return content
    if any(part.type != "text" or part.text is None for part in content):
        raise _unsupported("prediction.content", "A prediction part other than text")
    return "".join(part.text for part in content)


def requested_drafter(req: _Request) -> str | None:
    """A drafter by name only, or a catalog model as draft model (model:ID): a path would let
    a request make the server read files."""
    name = req.hyflash.drafter if req.hyflash else None
    if name is None or name in DRAFTER_CHOICES:
        return name
    if name.startswith(DRAFT_MODEL) and name[len(DRAFT_MODEL) :] in load_catalog():
        return name
    raise APIError(
        400,
        "invalid_drafter",
        f"hyflash.drafter: use one of {', '.join(DRAFTER_CHOICES)} or model:<catalog id>",
        "hyflash.drafter",
    )


def engine_error(event: ErrorEvent) -> APIError:
    if event.kind == "context":
        return APIError(400, "context_length_exceeded", event.message, "messages")
    if event.kind == "input":
        return APIError(400, "invalid_value", event.message)
    if event.kind == "drafter":
        return APIError(400, "invalid_drafter", event.message, "hyflash.drafter")
    if event.kind == "unavailable":
        return APIError(503, "server_unavailable", event.message)
    return APIError(500, "internal_error", event.message)


@dataclass
class Tally:
    """What the `hyflash` object reports, summed over a job's steps."""

    block_size: int | str
    drafter: str = ""
    proposed: int = 0
    accepted: int = 0
    last: StepStats | None = None

    def add(self, event: JobEvent) -> None:
        if isinstance(event, JobStarted):
            self.drafter = event.drafter
        elif isinstance(event, StepStats):
            self.proposed += event.proposed
            self.accepted += event.accepted
            self.last = event

    def hyflash(self) -> dict:
        s = self.last
        decodes = s.step if s else 0
        return {
            "tau": s.tau_mean if s else 0.0,
            "draft_tokens_proposed": self.proposed,
            "draft_tokens_accepted": self.accepted,
            "target_decodes": decodes,
            "mean_block_size": (self.proposed + decodes) / decodes if decodes else 0.0,
            "block_size": self.block_size,
            "block_size_mode": "auto" if self.block_size == "auto" else "fixed",
            "drafter": self.drafter,
            "decode_tokens_per_s": s.tokens_per_s if s else 0.0,
            "ttft_s": s.ttft_s if s else 0.0,
            "prefill_tokens": s.prefill_tokens if s else 0,
            "verify_mode": s.verify_mode if s else "",
        }


def usage(fin: Finished) -> dict:
    completion = len(fin.token_ids)
    counts = {
        "prompt_tokens": fin.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": fin.prompt_tokens + completion,
    }
    if fin.prediction_tokens is not None:
        accepted, rejected = fin.prediction_tokens
        counts["completion_tokens_details"] = {
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": rejected,
        }
    return counts


class Reply:
    """The JSON objects of one response: a chat or text completion, whole or as chunks."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat, self.model = chat, model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict]) -> dict:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def whole(self, fin: Finished, tally: Tally) -> dict:
        reason = FINISH_REASONS.get(fin.stop_reason, "stop")
        if self.chat:
            choice = {"message": {"role": "assistant", "content": fin.text}}
            body = self._envelope("chat.completion", [self._choice(choice, reason)])
        else:
            body = self._envelope("text_completion", [self._choice({"text": fin.text}, reason)])
        return {**body, "usage": usage(fin), "hyflash": tally.hyflash()}

    def chunk(self, text: str = "", *, first: bool = False, fin: Finished | None = None) -> dict:
        reason = FINISH_REASONS.get(fin.stop_reason, "stop") if fin else None
        if self.chat:
            delta = {"role": "assistant", "content": text} if first else {}
            if text and not first:
                delta = {"content": text}
            return self._envelope("chat.completion.chunk", [self._choice({"delta": delta}, reason)])
        return self._envelope("text_completion", [self._choice({"text": text}, reason)])

    def usage_chunk(self, fin: Finished) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._envelope(obj, []), "usage": usage(fin)}

    @staticmethod
    def _choice(content: dict, reason: str | None) -> dict:
        return {"index": 0, **content, "logprobs": None, "finish_reason": reason}
