"""The chat card's incremental rendering (app.chat_view, offscreen): whatever the stream did,
the card ends exactly as a full render of the same answer, finished blocks are never rendered
again, and a fast stream re-renders the open prose tail at a bounded rate.

Real answers come from docs/bench/app-render/answers.jsonl: answers of the embedded model
recorded with the worker's update cadence by scripts/profile_app_render.py record.
"""

from __future__ import annotations

import json
import time

import pytest

from app import chat_view
from app.chat_view import CodeBlockWidget, MarkdownBlock, MessageWidget
from app.markdown import resume_at, split_blocks
from engine.paths import REPO

ANSWERS = REPO / "docs/bench/app-render/answers.jsonl"

NESTED = (
    "Intro with **bold** and *italic* text.\n\n"
    "- first item\n- second item\n  - nested item\n    1. deep one\n    2. deep two\n"
    "- third item\n\n"
    "A paragraph after the list, `inline code` here.\n\n"
    "## A heading\n\n"
    "1. one\n2. two\n\n"
    "Interlude paragraph.\n\n"
    "3. three, a list that starts at 3\n\n"
    "> a quote\n> over two lines\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    "Closing words."
)
CODE = (
    "Here is the first:\n\n```python\ndef f(x):\n    return x * 2\n```\n\n"
    "Then some prose between blocks.\n\n"
    "```js\nconst a = 1;\nconst b = a + 1;\n```\n"
    "And a third, with a tilde fence:\n\n~~~\nplain text block\n  indented line\n~~~\n\n"
    "Done."
)


def test_a_resumed_split_equals_a_full_split_at_every_length():
    """The stream re-splits only from the open block: at every prefix of an answer (fences
    half typed included) that gives the blocks a full split gives."""
    source = NESTED + "\n\n" + CODE + "\nLast:\n````py\nx = 1\n```\nstill code\n"
    previous, blocks = "", []
    for end in range(1, len(source) + 1):
        text = source[:end]
        first = resume_at(previous, blocks)
        head = blocks[first].head if first < len(blocks) else 0
        blocks = [*blocks[:first], *split_blocks(text, head)]
        assert blocks == split_blocks(text), text
        previous = text


def stream_runs(text: str) -> list[tuple[str, bool]]:
    """`text` cut into 1-6 character runs, every third one drafted (as a decode emits)."""
    runs, pos, k = [], 0, 0
    while pos < len(text):
        n = 1 + (k * 7) % 6
        runs.append((text[pos : pos + n], k % 3 == 0))
        pos, k = pos + n, k + 1
    return runs


def shown(card: MessageWidget) -> list[tuple]:
    """What each block widget shows: kind, (language,) and its whole document as HTML."""
    out = []
    for _block, _pieces, widget in card._blocks:
        if isinstance(widget, MarkdownBlock):
            out.append(("text", widget.document().toHtml(), widget.toPlainText()))
        else:
            out.append(("code", widget.lang.text(), widget.view.document().toHtml()))
    return out


def full_render(qtbot, text: str, runs) -> MessageWidget:
    card = MessageWidget("assistant", 10)
    qtbot.addWidget(card)
    card.resize(700, 500)
    card.set_text(text, runs)
    return card


def streamed(qtbot, updates: list[list[tuple[str, bool]]], final: str | None = None):
    """A card that got `updates` (lists of new runs) by stream_text, then set_text as the
    window does at the end (`final`: the finished text, the streamed text by default)."""
    card = MessageWidget("assistant", 10)
    qtbot.addWidget(card)
    card.resize(700, 500)
    card.show()
    text, runs = "", []
    for new in updates:
        runs.extend(new)
        text += "".join(t for t, _d in new)
        card.stream_text(text, runs)
    card.set_text(text if final is None else final, runs)
    return card, text, runs


@pytest.fixture()
def every_update(monkeypatch):
    """The open tail rendered on every update (no coalescing), to exercise its layout."""
    monkeypatch.setattr(chat_view, "TAIL_INTERVAL_S", 0.0)


@pytest.mark.parametrize(
    "source", [NESTED, CODE, NESTED + "\n\n" + CODE], ids=["nested", "code", "both"]
)
def test_streamed_card_ends_as_a_full_render(qtbot, every_update, source):
    updates = [[run] for run in stream_runs(source)]
    card, text, runs = streamed(qtbot, updates)
    assert text == source
    ref = full_render(qtbot, text, runs)
    assert shown(card) == shown(ref)
    assert card.rendered_text() == ref.rendered_text()
    assert [w.code for w in card.code_blocks()] == [w.code for w in ref.code_blocks()]


def test_the_stream_layout_settles_paragraphs(qtbot, every_update):
    """The nested sample streams through the settled-paragraphs layout (else the tests
    above would only check the plain tail)."""
    card = MessageWidget("assistant", 10)
    qtbot.addWidget(card)
    text, partial_seen = "", False
    for run in stream_runs(NESTED):
        text += run[0]
        card.stream_text(text, None)
        partial_seen |= any(getattr(w, "partial", False) for _b, _p, w in card._blocks)
    assert partial_seen
    card.set_text(text, None)
    assert not any(w.partial for _b, _p, w in card._blocks)


@pytest.mark.parametrize("cut", [0.3, 0.55, 0.8, 0.97])
def test_a_block_still_open_when_the_answer_stops(qtbot, every_update, cut):
    """Stopped (or cancelled) mid-answer: an open fence, a half list, a half paragraph."""
    runs = stream_runs(NESTED + "\n\n" + CODE)
    keep = runs[: int(len(runs) * cut)]
    card, text, runs = streamed(qtbot, [[r] for r in keep])
    ref = full_render(qtbot, text, runs)
    assert shown(card) == shown(ref)
    assert card.rendered_text() == ref.rendered_text()


def real_answers() -> list[dict]:
    return [json.loads(line) for line in ANSWERS.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("answer", real_answers(), ids=lambda a: a["kind"])
def test_a_real_answer_replayed_ends_identical(qtbot, every_update, answer):
    updates = [[(t, bool(d)) for t, d in u["runs"]] for u in answer["updates"]]
    card, text, runs = streamed(qtbot, updates, final=answer["text"])
    assert text == answer["text"]
    ref = full_render(qtbot, answer["text"], runs)
    assert shown(card) == shown(ref)
    assert card.rendered_text() == ref.rendered_text()


def count_renders(monkeypatch) -> dict[object, list[str]]:
    """Every render of a block widget, by widget (kept alive, so keys stay unique): 'full' or
    'stream'."""
    calls: dict[object, list[str]] = {}
    for cls in (MarkdownBlock, CodeBlockWidget):
        for name, what in (("set_content", "full"), ("stream_content", "stream")):
            original = getattr(cls, name)

            def counted(self, *args, _original=original, _what=what):
                calls.setdefault(self, []).append(_what)
                return _original(self, *args)

            monkeypatch.setattr(cls, name, counted)
    return calls


@pytest.mark.parametrize("answer", real_answers(), ids=lambda a: a["kind"])
def test_finished_blocks_are_never_rendered_again(qtbot, monkeypatch, answer):
    """A block widget gets at most one full render (a prose block's catch-up when it is no
    longer the last one, or a block created finished), and once it is finished none at all,
    to the end of the answer."""
    calls = count_renders(monkeypatch)
    card = MessageWidget("assistant", 10)
    qtbot.addWidget(card)
    text, runs, finished_at = "", [], {}
    for update in answer["updates"]:
        runs.extend((t, bool(d)) for t, d in update["runs"])
        text += "".join(t for t, _d in update["runs"])
        card.stream_text(text, runs)
        qtbot.wait(1)
        for _block, _pieces, widget in card._blocks[:-1]:
            finished_at.setdefault(widget, len(calls.get(widget, [])))
    card.set_text(answer["text"], runs)
    if answer["kind"] == "mixed":  # prose and code blocks: some finish while it streams
        assert finished_at
    for widget, count_then in finished_at.items():
        assert calls.get(widget, [])[count_then:] == []
    for widget, made in calls.items():
        assert made.count("full") <= 1, (type(widget).__name__, made)


def test_a_fast_stream_coalesces_tail_renders(qtbot, monkeypatch):
    """30 updates a second for ~1.2 s re-render the open prose tail at most ~10 times a
    second; the end renders what is left at once."""
    calls = count_renders(monkeypatch)
    card = MessageWidget("assistant", 10)
    qtbot.addWidget(card)
    card.show()
    words = ("word " * 400).split(" ")
    text, start = "", time.monotonic()
    for i in range(36):
        text += " ".join(words[i * 8 : i * 8 + 8]) + (".\n\n" if i % 9 == 8 else " ")
        card.stream_text(text, None)
        qtbot.wait(33)
    elapsed = time.monotonic() - start
    tail = card._blocks[-1][2]
    stream_renders = calls[tail].count("stream")
    assert stream_renders <= elapsed / chat_view.TAIL_INTERVAL_S + 2, (stream_renders, elapsed)
    assert stream_renders >= 3  # it does show progress while streaming
    card.set_text(text, None)
    assert card.rendered_text() == full_render(qtbot, text, None).rendered_text()


def test_a_burst_of_updates_renders_the_tail_once_then_catches_up(qtbot, monkeypatch):
    calls = count_renders(monkeypatch)
    card = MessageWidget("assistant", 10)
    qtbot.addWidget(card)
    text = ""
    for i in range(200):
        text += f"token{i} "
        card.stream_text(text, None)
    tail = card._blocks[-1][2]
    assert calls[tail].count("stream") == 1  # the first; the rest waits for the timer
    qtbot.waitUntil(lambda: calls[tail].count("stream") == 2, timeout=2000)
    assert tail.toPlainText() == text.strip()
