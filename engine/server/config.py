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
    # Host names a request may address besides loopback's and the bound address: a web page
    # that rebinds its own name to 127.0.0.1 sends its name, and is refused
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 4 * 2**20
    block_size: int | str = OPTION["block_size"].server  # for requests without hyflash.block_size
    retry_after_s: int = 2

    def host_names(self) -> frozenset[str] | None:
        """The Host header names served, lower case without a port; None: any (bound to every
        address, where the API key that requires is what keeps pages out)."""
        if self.host in WILDCARDS:
            return None
        return frozenset(
            name.lower().strip("[]") for name in (*LOOPBACK_NAMES, self.host, *self.allowed_hosts)
        )


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")
