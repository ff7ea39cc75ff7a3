"""Bad input gets a clear error or defined behaviour, never a crash or a hang."""

from __future__ import annotations

import threading

import pytest

from engine.engine import Engine
from engine.events import (
    ErrorEvent,
    Finished,
    GenerationSettings,
    ModelLoadError,
    StepStats,
)
from engine.models.resolve import resolve_target


def events(engine, prompt, **kw):
    raw = kw.pop("raw", False)
    cancel = kw.pop("cancel", None)
    return list(engine.generate(prompt, raw=raw, settings=GenerationSettings(**kw), cancel=cancel))


def test_missing_model_path(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        Engine(tmp_path / "nope.gguf")


def test_unknown_model_id():
    with pytest.raises(ModelLoadError, match="Unknown model"):
        resolve_target("no-such-model")


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a model" * 100)
    with pytest.raises(ModelLoadError, match="bad header"):
        Engine(bad)


def test_truncated_gguf(tmp_path, model_path):
    cut = tmp_path / "truncated.gguf"
    with open(model_path, "rb") as src:
        cut.write_bytes(src.read(3_000_000))
    with pytest.raises(ModelLoadError, match="truncated.gguf is a damaged model file: it is cut"):
        Engine(cut)


def test_corrupt_gguf_header(tmp_path, model_path):
    bad = tmp_path / "corrupt.gguf"
    with open(model_path, "rb") as src:
        data = bytearray(src.read(5_000_000))
    data[8:24] = b"\xff" * 16  # absurd tensor/kv counts right after magic+version
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError):
        Engine(bad)


def test_empty_prompt(ngram_engine):
    for prompt in ("", "   "):
        evs = events(ngram_engine, prompt)
        assert len(evs) == 1 and isinstance(evs[0], ErrorEvent) and "empty" in evs[0].message


def test_raw_completion_of_a_message_list_is_refused(ngram_engine):
    evs = events(ngram_engine, [{"role": "user", "content": "Hello"}], raw=True)
    assert len(evs) == 1 and isinstance(evs[0], ErrorEvent) and evs[0].kind == "input"
    assert "message list" in evs[0].message


def test_prompt_longer_than_context(ngram_engine):
    long_prompt = "word " * 5000
    evs = events(ngram_engine, long_prompt, raw=True)
    assert isinstance(evs[-1], ErrorEvent) and evs[-1].kind == "context"
    assert "context" in evs[-1].message
    # the engine stays usable
    evs = events(ngram_engine, "Say hi.", max_tokens=4)
    assert isinstance(evs[-1], Finished) and evs[-1].token_ids


@pytest.mark.parametrize("block_size", [0, 1000, -3, "big"])
def test_bad_block_size(block_size):
    # refused when the settings are made, before any engine sees them
    with pytest.raises(ValueError, match="block size must be 'auto' or 1..32"):
        GenerationSettings(block_size=block_size)


def test_generation_fills_the_context_then_stops(model_path):
    eng = Engine(model_path, drafter="ngram", n_ctx=256, profile=False)
    try:
        evs = events(
            eng, "Count: 1 2 3 4", raw=True, max_tokens=1000, block_size=4, ignore_eos=True
        )
        fin = evs[-1]
        assert isinstance(fin, Finished) and fin.stop_reason == "context"
        assert eng.target.n_past <= eng.target.n_ctx
    finally:
        eng.close()


def test_cancel_mid_generation_leaves_a_consistent_engine(ngram_engine):
    cancel = threading.Event()
    settings = GenerationSettings(max_tokens=300, block_size=4, ignore_eos=True)
    steps = 0
    finished = None
    for event in ngram_engine.generate(
        "Write a long story about a dragon.", settings=settings, cancel=cancel
    ):
        if isinstance(event, StepStats):
            steps += 1
            if steps == 5:
                cancel.set()
        if isinstance(event, Finished):
            finished = event
    assert finished.stop_reason == "cancelled" and 0 < len(finished.token_ids) < 300
    # a fresh generation after the cancelled one equals one on a reset cache
    after = events(ngram_engine, "Name a colour.", max_tokens=12)[-1]
    ngram_engine.target.reset()
    fresh = events(ngram_engine, "Name a colour.", max_tokens=12)[-1]
    assert after.token_ids == fresh.token_ids


def test_cancel_before_start(ngram_engine):
    cancel = threading.Event()
    cancel.set()
    evs = events(ngram_engine, "Hello there", cancel=cancel)
    assert isinstance(evs[-1], Finished) and evs[-1].stop_reason == "cancelled"
    assert evs[-1].token_ids == ()
