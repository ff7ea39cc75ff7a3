"""The FastAPI application: OpenAI's endpoints in front of a JobQueue.

Handlers never touch the engine: they submit a Job and read its events from an asyncio queue
that the engine thread fills. A request learns whether it failed (prompt too long, bad
drafter) from its first engine event, so errors keep OpenAI's shape even for streams; a
client that goes away, while waiting or mid-stream, cancels its job at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.middleware import Middleware
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from fastapi.sse import EventSourceResponse, format_sse_event
from starlette.background import BackgroundTask

from engine.events import ErrorEvent, Finished, GenerationSettings, TextDelta
from engine.options import COMPLETIONS_MAX_TOKENS
from engine.server.config import ServerConfig
from engine.server.errors import EXCEPTION_HANDLERS, APIError, error_body
from engine.server.jobs import (
    Job,
    JobEvent,
    JobQueue,
    JobStarted,
    QueueClosedError,
    QueueFullError,
)
from engine.server.middleware import (
    BearerAuth,
    BodyLimit,
    HostAllowList,
    RequestLog,
    RequestLogger,
)
from engine.server.protocol import (
    FINISH_REASONS,
    ChatRequest,
    CompletionRequest,
    Reply,
    Tally,
    chat_messages,
    completion_prompt,
    engine_error,
    generation_settings,
    predicted_text,
    requested_drafter,
)

DISCONNECT_POLL_S = 0.25  # how often a request that waits for the engine checks its client
CLIENT_GONE_STATUS = 499  # nginx's "client closed request", for the log only


class ClientGone(Exception):
    pass


class _JobStream:
    """One job's events, pushed by the engine thread, read here in order."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[JobEvent] = asyncio.Queue()
        self._getter: asyncio.Future | None = None

    def sink(self, event: JobEvent) -> None:  # engine thread
        self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    async def next(self, request: Request | None) -> JobEvent:
        """The next event; with `request`, also watch for its client leaving (a streaming
        response is watched by the framework instead)."""
        while True:
            if self._getter is None:
                self._getter = asyncio.ensure_future(self._queue.get())
            # asyncio.wait (not wait_for) keeps the pending get: no event is ever dropped
            done, _ = await asyncio.wait({self._getter}, timeout=DISCONNECT_POLL_S)
            if done:
                event, self._getter = self._getter.result(), None
                return event
            if request is not None and await request.is_disconnected():
                raise ClientGone

    def close(self) -> None:
        if self._getter is not None:
            self._getter.cancel()


def create_app(
    config: ServerConfig,
    jobs: JobQueue,
    info: Callable[[], object | None],
    log: Callable[[RequestLog], None] | None = None,
) -> FastAPI:
    """`info()` returns the loaded engine's EngineInfo, or None while no model is ready."""
    app = FastAPI(
        title="HyFlash Chat local server",
        middleware=_middleware(config, log),
        exception_handlers=EXCEPTION_HANDLERS,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.server = _Server(config, jobs, info)
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/v1/models", list_models, methods=["GET"])
    app.add_api_route("/v1/models/{model_id:path}", get_model, methods=["GET"])
    app.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"])
    app.add_api_route("/v1/completions", completions, methods=["POST"])
    return app


def _middleware(config: ServerConfig, log: Callable[[RequestLog], None] | None) -> list:
    middleware = []
    if log is not None:
        middleware.append(Middleware(RequestLogger, sink=log))
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type"],
            )
        )
    names = config.host_names()
    if names is not None:
        middleware.append(Middleware(HostAllowList, names=names))
    if config.api_key:
        middleware.append(Middleware(BearerAuth, api_key=config.api_key))
    middleware.append(Middleware(BodyLimit, max_bytes=config.max_body_bytes))
    return middleware


@dataclass(frozen=True)
class _Server:
    """What the route handlers share, kept in app.state."""

    config: ServerConfig
    jobs: JobQueue
    info: Callable[[], object | None]

    def loaded(self):
        current = self.info()
        if current is None:
            raise APIError(503, "model_not_loaded", "the model is still loading; try again")
        return current

    def check_model(self, model: str):
        current = self.loaded()
        if model != current.model_id:
            raise APIError(
                404,
                "model_not_found",
                f"the model '{model}' does not exist here; this server runs "
                f"'{current.model_id}' (GET /v1/models)",
                "model",
            )
        return current


def _server(request: Request) -> _Server:
    return request.app.state.server


def _model_entry(current) -> dict:
    return {
        "id": current.model_id,
        "object": "model",
        "created": 0,
        "owned_by": "hyflash",
        "hyflash": {
            "drafter": current.drafter,
            "n_ctx": current.n_ctx,
            "backend": current.backend,
        },
    }


async def health(request: Request) -> dict:
    server = _server(request)
    current = server.loaded()
    return {
        "status": "ok",
        "model": current.model_id,
        "busy": server.jobs.running is not None,
        "waiting": server.jobs.waiting,
    }


async def list_models(request: Request) -> dict:
    current = _server(request).info()
    return {"object": "list", "data": [_model_entry(current)] if current else []}


async def get_model(model_id: str, request: Request) -> dict:
    return _model_entry(_server(request).check_model(model_id))


async def chat_completions(body: ChatRequest, request: Request) -> Response:
    server = _server(request)
    current = server.check_model(body.model)
    prompt = chat_messages(body)
    settings = generation_settings(body, current.n_ctx, server.config.block_size, current.n_ctx)
    reply = Reply(True, current.model_id)
    return await _serve(server, request, body, reply, prompt, False, settings)


async def completions(body: CompletionRequest, request: Request) -> Response:
    server = _server(request)
    current = server.check_model(body.model)
    prompt = completion_prompt(body)
    settings = generation_settings(
        body, COMPLETIONS_MAX_TOKENS, server.config.block_size, current.n_ctx
    )
    reply = Reply(False, current.model_id)
    return await _serve(server, request, body, reply, prompt, True, settings)


def _submit(
    server: _Server,
    request: Request,
    body: ChatRequest | CompletionRequest,
    prompt: str | list[dict],
    raw: bool,
    settings: GenerationSettings,
) -> tuple[Job, _JobStream]:
    """Queue the request's job; a full or closed queue answers 503."""
    stream = _JobStream()
    job = Job(
        prompt,
        settings,
        stream.sink,
        raw=raw,
        drafter=requested_drafter(body),
        prediction=predicted_text(body),
        label=f"{request.method} {request.url.path}",
    )
    try:
        server.jobs.submit(job)
    except QueueFullError as exc:
        raise APIError(
            503,
            "server_busy",
            f"the server is busy ({exc}); retry later",
            headers={"Retry-After": str(server.config.retry_after_s)},
        ) from None
    except QueueClosedError as exc:
        raise APIError(503, "server_unavailable", str(exc)) from None
    return job, stream


async def _serve(
    server: _Server,
    request: Request,
    body: ChatRequest | CompletionRequest,
    reply: Reply,
    prompt: str | list[dict],
    raw: bool,
    settings: GenerationSettings,
) -> Response:
    job, stream = _submit(server, request, body, prompt, raw, settings)
    tally = Tally(settings.block_size)

    def cleanup() -> None:
        server.jobs.discard(job)
        stream.close()

    streaming = False
    try:
        first = await stream.next(request)
        while isinstance(first, JobStarted):
            tally.add(first)
            first = await stream.next(request)
        if isinstance(first, ErrorEvent):
            raise engine_error(first)
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            streaming = True
            # the generator cleans up when it ends or is cancelled; the background task
            # covers a client gone before the generator even started
            return EventSourceResponse(
                _sse(request, cleanup, stream, reply, tally, first, usage),
                headers={"Cache-Control": "no-cache"},
                background=BackgroundTask(cleanup),
            )
        event = first
        while True:
            tally.add(event)
            if isinstance(event, Finished):
                _record(request, event, tally)
                return JSONResponse(reply.whole(event, tally))
            if isinstance(event, ErrorEvent):
                raise engine_error(event)
            event = await stream.next(request)
    except ClientGone:
        request.state.outcome = "cancelled"
        return Response(status_code=CLIENT_GONE_STATUS)
    finally:
        if not streaming:
            cleanup()


def _record(request: Request, fin: Finished, tally: Tally) -> None:
    """What the request log shows for a finished generation."""
    request.state.outcome = FINISH_REASONS.get(fin.stop_reason, "cancelled")
    request.state.completion_tokens = len(fin.token_ids)
    request.state.hyflash = tally.hyflash()


def _data(obj: dict | str) -> bytes:
    return format_sse_event(data_str=obj if isinstance(obj, str) else json.dumps(obj))


async def _sse(
    request: Request,
    cleanup: Callable[[], None],
    stream: _JobStream,
    reply: Reply,
    tally: Tally,
    event: JobEvent,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """The chunks of a streamed answer; leaving early (the client went away: the framework
    cancels this generator) cancels the job."""
    request.state.outcome = "cancelled"
    try:
        yield _data(reply.chunk(first=True))
        while True:
            tally.add(event)
            if isinstance(event, TextDelta) and event.text:
                yield _data(reply.chunk(event.text))
            elif isinstance(event, Finished):
                _record(request, event, tally)
                last = reply.chunk(fin=event)
                if include_usage:
                    yield _data(last)
                    last = reply.usage_chunk(event)
                yield _data({**last, "hyflash": tally.hyflash()})
                yield _data("[DONE]")
                return
            elif isinstance(event, ErrorEvent):
                error = engine_error(event)
                request.state.outcome = "error"
                yield _data(error_body(error.status, error.code, error.message, error.param))
                yield _data("[DONE]")
                return
            event = await stream.next(None)
    finally:
        cleanup()
