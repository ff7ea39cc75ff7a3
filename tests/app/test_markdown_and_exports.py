"""Markdown splitting into blocks and drafted runs (app.markdown), and chat exports."""

from __future__ import annotations

import json

import pytest

from app.export import to_json, to_markdown, write_export
from app.format import footer_line
from app.markdown import drafted_spans, merge_runs, run_pieces, split_blocks
from app.storage import Storage, compact_runs, expand_runs


def test_split_blocks_prose_and_code_with_offsets():
    src = "Intro **bold**\n\n```python\nprint(1)\nx = 2\n```\nAfter.\n"
    blocks = split_blocks(src)
    assert [b.kind for b in blocks] == ["text", "code", "text"]
    code = blocks[1]
    assert code.lang == "python" and code.text == "print(1)\nx = 2" and code.closed
    assert src[code.start : code.start + len(code.text)] == code.text
    streaming = split_blocks("Look:\n```js\nlet a")
    assert streaming[-1].kind == "code" and not streaming[-1].closed
    assert streaming[-1].text == "let a"


def test_runs_map_onto_blocks():
    runs = merge_runs([("ab", True), ("c", True), ("", False), ("de", False), ("f", True)])
    assert runs == [("abc", True), ("de", False), ("f", True)]
    assert drafted_spans(runs, 1, 6) == [(0, 2), (4, 5)]
    assert run_pieces(runs, 2, 5) == [("c", True), ("de", False)]
    text = "abcdef"
    assert expand_runs(text, compact_runs(runs)) == runs
    assert expand_runs("short", compact_runs(runs)) is None  # lengths disagree: no tint


def test_export_markdown_and_json(tmp_path):
    db = Storage(tmp_path / "chats.sqlite3")
    conv_id = db.create_conversation("Export me", "You are terse.")
    db.add_message(conv_id, "user", "Hi")
    stats = {
        "tokens": 5,
        "tokens_per_s": 12.5,
        "tau_mean": 1.8,
        "ttft_s": 0.2,
        "stop_reason": "eos",
    }
    db.add_message(conv_id, "assistant", "```py\nprint('hi')\n```", stats)
    conv, msgs = db.conversation(conv_id), db.messages(conv_id)
    md = to_markdown(conv, msgs)
    assert md.startswith("# Export me") and "> You are terse." in md
    assert "```py\nprint('hi')\n```" in md and footer_line(stats) in md
    data = to_json(conv, msgs)
    assert data["messages"][1]["stats"]["tau_mean"] == 1.8
    out = write_export(tmp_path / "c.json", conv, msgs)
    assert json.loads(out.read_text())["title"] == "Export me"
    db.close()


def test_footer_line_has_tokens_speed_tau_ttft():
    line = footer_line(
        {
            "tokens": 40,
            "tokens_per_s": 31.24,
            "tau_mean": 2.5,
            "ttft_s": 0.123,
            "stop_reason": "cancelled",
        }
    )
    assert line == "40 tokens  ·  31.2 tok/s  ·  τ 2.50  ·  TTFT 123 ms  ·  stopped"


@pytest.mark.parametrize("source", ["", "no code at all", "```\n```"])
def test_split_blocks_edge_cases(source):
    blocks = split_blocks(source)
    for b in blocks:
        assert b.kind in ("text", "code")
        assert source[b.start : b.start + len(b.text)] == b.text
