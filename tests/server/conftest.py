"""The server's tests share one engine on one thread and one served app on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from server_client import serving

from engine.server.jobs import EngineThread
from engine.server.middleware import RequestLog


@pytest.fixture(scope="module")
def engine():
    """The real embedded model on one thread: the server's threads and the clients' keep the
    other core (this machine has two)."""
    from engine.engine import Engine

    eng = Engine(None, drafter="ngram", n_ctx=4096, n_threads=1)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def runner(engine) -> Iterator[EngineThread]:
    thread = EngineThread(engine)
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def served(runner) -> Iterator[tuple[str, list[RequestLog]]]:
    with serving(runner) as s:
        yield s


@pytest.fixture(scope="module")
def model_id(engine) -> str:
    return engine.model_id
