"""One answer of an engine, collected from its events, for tests that compare answers."""

from __future__ import annotations

from engine.events import ErrorEvent, Finished, GenerationSettings, TextDelta

MAX_TOKENS = 64


def run(engine, prompt, *, raw=False, block_size=1, max_tokens=MAX_TOKENS, **kw):
    settings = GenerationSettings(max_tokens=max_tokens, block_size=block_size, **kw)
    deltas, finished = [], None
    for event in engine.generate(prompt, raw=raw, settings=settings):
        assert not isinstance(event, ErrorEvent), event.message
        if isinstance(event, TextDelta):
            deltas.append(event)
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None
    assert "".join(d.text for d in deltas) == finished.text
    return finished
