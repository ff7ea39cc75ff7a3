"""ASGI middleware of the server: Host allow-list, API key, body size limit, request log.
Plain ASGI (not route dependencies) so that they run before any body is read and cover unknown
paths too."""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.server.errors import error_body


async def _send_error(send: Send, status: int, code: str, message: str, headers=()) -> None:
    body = json.dumps(error_body(status, code, message)).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": raw + list(headers)})
    await send({"type": "http.response.body", "body": body})


def host_name(header: bytes) -> str:
    """The name of a Host header, lower case, without its port or IPv6 brackets."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):  # [::1]:8000
        return text[1:].split("]", 1)[0]
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


class HostAllowList:
    """Only requests addressed to a served name get through (DNS rebinding: a page whose own
    name now points at 127.0.0.1 still sends that name); others get 403."""

    def __init__(self, app: ASGIApp, names: frozenset[str]) -> None:
        self.app = app
        self.names = names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            name = host_name(dict(scope["headers"]).get(b"host", b""))
            if name not in self.names:
                await _send_error(
                    send,
                    403,
                    "host_not_allowed",
                    f"this server does not answer requests for the host '{name}' (allowed: "
                    f"{', '.join(sorted(self.names))}; `hyflash serve --allow-host NAME`)",
                )
                return
        await self.app(scope, receive, send)


class BearerAuth:
    """Every request needs `Authorization: Bearer <key>` (compared in constant time)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await _send_error(
                    send,
                    401,
                    "invalid_api_key",
                    "a valid API key is required: send 'Authorization: Bearer <key>'",
                    [(b"www-authenticate", b"Bearer")],
                )
                return
        await self.app(scope, receive, send)


class _TooLarge(HTTPException):
    """Raised while reading: FastAPI's body parsing lets HTTP exceptions through (others
    become a 400), and the app's handler answers it in OpenAI's shape."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the request body is larger than {max_bytes} bytes")


class BodyLimit:
    """Refuse request bodies over `max_bytes`: by Content-Length at once, else while reading."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"the request body is larger than {self.max_bytes} bytes"
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.max_bytes:
            await _send_error(send, 413, "request_too_large", message)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return msg

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if started:
                raise
            await _send_error(send, 413, "request_too_large", message)


@dataclass(frozen=True)
class RequestLog:
    method: str
    path: str
    status: int
    seconds: float
    outcome: str = ""  # finish_reason, "cancelled" (client left), or "" (not a generation)
    completion_tokens: int = 0
    hyflash: dict | None = None


class RequestLogger:
    """Reports each finished request to `sink` (after a stream's last byte), with what the
    generation endpoints left in the request state."""

    def __init__(self, app: ASGIApp, sink: Callable[[RequestLog], None]) -> None:
        self.app = app
        self.sink = sink

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.monotonic()
        status = 500

        async def tracking_send(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, tracking_send)
        finally:
            state = scope.get("state") or {}
            self.sink(
                RequestLog(
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    seconds=time.monotonic() - start,
                    outcome=state.get("outcome", ""),
                    completion_tokens=state.get("completion_tokens", 0),
                    hyflash=state.get("hyflash"),
                )
            )
