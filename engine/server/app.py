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

from engine.events import ErrorEvent, Finished, TextDelta
from engine.server.errors import EXCEPTION_HANDLERS, APIError, error_body
from engine.server.jobs import (
    Job,
    JobEvent,
    JobQueue,
    JobStarted,
    QueueClosedError,
    QueueFullError,
)
from engine.server.middleware import BearerAuth, BodyLimit, RequestLog, RequestLogger
from engine.server.protocol import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    FINISH_REASONS,
    ChatRequest,
    CompletionRequest,
    Reply,
    Tally,
    chat_messages,
    completion_prompt,
    engine_error,
    generation_settings,
    requested_drafter,
)

DISCONNECT_POLL_S = 0.25  # how often a request that waits for the engine checks its client
CLIENT_GONE_STATUS = 499  # nginx's "client closed request", for the log only


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 4 * 2**20
    block_size: int | str = "auto"  # for requests that do not set hyflash.block_size
    retry_after_s: int = 2


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
    if config.api_key:
        middleware.append(Middleware(BearerAuth, api_key=config.api_key))
    middleware.append(Middleware(BodyLimit, max_bytes=config.max_body_bytes))
    app = FastAPI(
        title="HyFlash Chat local server",
        middleware=middleware,
        exception_handlers=EXCEPTION_HANDLERS,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    def loaded():
        current = info()
        if current is None:
            raise APIError(503, "model_not_loaded", "the model is still loading; try again")
        return current

    def model_entry(current) -> dict:
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

    def check_model(model: str):
        current = loaded()
        if model != current.model_id:
            raise APIError(
                404,
                "model_not_found",
                f"the model '{model}' does not exist here; this server runs "
                f"'{current.model_id}' (GET /v1/models)",
                "model",
            )
        return current

    @app.get("/health")
    async def health() -> dict:
        current = loaded()
        return {
            "status": "ok",
            "model": current.model_id,
            "busy": jobs.running is not None,
            "waiting": jobs.waiting,
        }

    @app.get("/v1/models")
    async def models() -> dict:
        current = info()
        return {"object": "list", "data": [model_entry(current)] if current else []}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict:
        return model_entry(check_model(model_id))

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request) -> Response:
        current = check_model(body.model)
        prompt = chat_messages(body)
        settings = generation_settings(body, current.n_ctx, config.block_size)
        return await serve(request, body, Reply(True, current.model_id), prompt, False, settings)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        current = check_model(body.model)
        prompt = completion_prompt(body)
        settings = generation_settings(body, COMPLETIONS_DEFAULT_MAX_TOKENS, config.block_size)
        return await serve(request, body, Reply(False, current.model_id), prompt, True, settings)

    async def serve(request: Request, body, reply: Reply, prompt, raw: bool, settings) -> Response:
        stream = _JobStream()
        job = Job(
            prompt,
            settings,
            stream.sink,
            raw=raw,
            drafter=requested_drafter(body),
            label=f"{request.method} {request.url.path}",
        )
        try:
            jobs.submit(job)
        except QueueFullError as exc:
            raise APIError(
                503,
                "server_busy",
                f"the server is busy ({exc}); retry later",
                headers={"Retry-After": str(config.retry_after_s)},
            ) from None
        except QueueClosedError as exc:
            raise APIError(503, "server_unavailable", str(exc)) from None
        tally = Tally(settings.block_size)

        def cleanup() -> None:
            jobs.discard(job)
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

    return app


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
