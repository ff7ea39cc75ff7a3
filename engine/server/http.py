"""uvicorn serving the app on a socket bound up front, so a taken port or a bad address fails
at once, with a clear message, in the caller's thread."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Only loopback is served without a key: anything else is reachable by other machines."""
    if not is_loopback(host) and not api_key:
        raise ValueError(
            f"serving on {host} makes the model reachable from other machines: "
            "set an API key (--api-key-file FILE, $HYFLASH_API_KEY or --api-key) or bind 127.0.0.1"
        )


def bind(host: str, port: int) -> socket.socket:
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    return socket.create_server(address[:2], family=family)


class LocalServer:
    def __init__(self, app: FastAPI, host: str, port: int, *, quiet: bool = True) -> None:
        self.host = host
        self.socket = bind(host, port)
        self.port = self.socket.getsockname()[1]  # the real one when port was 0
        config = uvicorn.Config(
            app,
            log_level="warning" if quiet else "info",
            access_log=not quiet,
            log_config=None if quiet else uvicorn.config.LOGGING_CONFIG,
            lifespan="off",
            timeout_graceful_shutdown=2,  # a stream still open at stop is cut after this
        )
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def serve_forever(self) -> None:
        """In the calling (main) thread, with uvicorn's Ctrl-C handling."""
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self.socket.close()

    def start(self, timeout_s: float = 10.0) -> None:
        """In a background thread; returns once it accepts connections."""
        self._thread = threading.Thread(
            target=self.server.run,
            kwargs={"sockets": [self.socket]},
            name="hyflash-server",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the server did not start in time")
            time.sleep(0.01)
        if not self.server.started:
            self.socket.close()
            raise RuntimeError("the server stopped while starting")

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.socket.close()
