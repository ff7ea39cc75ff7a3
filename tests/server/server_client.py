"""Talking to the server in tests: a served app on a free loopback port, the official client,
raw HTTP requests and a chat request body."""

from __future__ import annotations

import contextlib
import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

from openai import OpenAI

from engine.server.app import create_app
from engine.server.config import ServerConfig
from engine.server.http import LocalServer
from engine.server.jobs import EngineThread
from engine.server.middleware import RequestLog

MAX_TOKENS = 24


@contextlib.contextmanager
def serving(runner: EngineThread, **config) -> Iterator[tuple[str, list[RequestLog]]]:
    """An app on the runner's queue, on a free loopback port: (base URL, its request log)."""
    logs: list[RequestLog] = []
    info = runner.engine.info()
    app = create_app(ServerConfig(**config), runner.jobs, lambda: info, logs.append)
    server = LocalServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield server.url, logs
    finally:
        server.stop()


def client(url: str, key: str = "unused") -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def request(
    url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def post_json(url: str, path: str, obj, headers: dict | None = None):
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    status, head, data = request(
        url, "POST", path, body, {"content-type": "application/json", **(headers or {})}
    )
    return status, head, json.loads(data) if data else None


def chat(model: str, **extra) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 8,
        **extra,
    }
