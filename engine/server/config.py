"""The server's settings, apart from the app so that `hyflash serve` takes its option defaults
from here without loading FastAPI."""

from __future__ import annotations

from dataclasses import dataclass

from engine.options import OPTION


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 4 * 2**20
    block_size: int | str = OPTION["block_size"].server  # for requests without hyflash.block_size
    retry_after_s: int = 2
