"""Shared fixtures: the real embedded GGUF target, loaded once per session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(scope="session")
def model_path():
    from engine.models.resolve import resolve_target

    return resolve_target(None)[1]


@pytest.fixture(scope="session")
def engine():
    """One Engine on the real model; tests switch drafters with set_drafter."""
    from engine.engine import Engine

    eng = Engine(None, drafter="ngram", n_ctx=4096)
    yield eng
    eng.close()


@pytest.fixture()
def ngram_engine(engine):
    engine.set_drafter("ngram")
    return engine


@pytest.fixture(scope="session")
def gemma_path():
    """Gemma-3-270M Q4_K_M (the catalog's gemma-3-270m: PyPI chunk packages, installed by
    bootstrap.py dev, unpacked into the model cache): a K-quant target, whose CPU kernels are
    not batch-invariant at every row count."""
    from engine.models.resolve import resolve_target

    return resolve_target("gemma-3-270m")[1]


@pytest.fixture(scope="module")
def host(qapp):
    """The app's engine host (worker thread + Engine) on the real model, one per test module:
    n-gram drafter, n_ctx 2048, one CPU thread so the UI thread keeps a core on 2 cores."""
    from qt_helpers import loaded_host

    from app.worker import EngineConfig

    config = EngineConfig(model=None, drafter="ngram", n_ctx=2048, n_threads=1, backend="auto")
    h = loaded_host(config)
    yield h
    h.shutdown()
