"""Export one conversation to Markdown (for reading) or JSON (for tools), stats included."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from app import app_version
from app.format import footer_line
from app.storage import Conversation, Message


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).isoformat(timespec="seconds")


def to_markdown(conv: Conversation, messages: list[Message]) -> str:
    lines = [f"# {conv.title}", "", f"_Exported from HyFlash Chat on {_when(conv.updated_at)}_"]
    lines.append("")
    if conv.system_prompt.strip():
        quoted = [f"> {s}" for s in conv.system_prompt.splitlines()]
        lines += ["**System prompt:**", "", *quoted, ""]
    for m in messages:
        lines += [f"## {'You' if m.role == 'user' else 'Assistant'}", "", m.content.rstrip(), ""]
        if m.role == "assistant" and m.stats:
            lines += [f"_{footer_line(m.stats)}_", ""]
    return "\n".join(lines).rstrip() + "\n"


def to_json(conv: Conversation, messages: list[Message]) -> dict:
    return {
        "format": "hyflash-chat-conversation",
        "version": 1,
        "app_version": app_version(),
        "id": conv.id,
        "title": conv.title,
        "system_prompt": conv.system_prompt,
        "created_at": _when(conv.created_at),
        "updated_at": _when(conv.updated_at),
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "created_at": _when(m.created_at),
                "stats": m.stats,
            }
            for m in messages
        ],
    }


def write_export(path: Path, conv: Conversation, messages: list[Message]) -> Path:
    """Write Markdown or JSON depending on the suffix (.json, anything else is Markdown)."""
    if path.suffix.lower() == ".json":
        text = json.dumps(to_json(conv, messages), indent=2, ensure_ascii=False)
    else:
        text = to_markdown(conv, messages)
    path.write_text(text, encoding="utf-8")
    return path
