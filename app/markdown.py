"""Split an answer's Markdown into prose and fenced code blocks, keeping source offsets.

Prose is rendered by Qt's own CommonMark parser (QTextDocument.setMarkdown); code blocks get
their own widget (monospace, copy button). Offsets let the view map TextDelta runs (which are
in source coordinates) onto what it shows, to tint accepted draft tokens. A fence still open
while streaming is a code block with closed=False.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$")

Run = tuple[str, bool]  # (text, drafted)


@dataclass(frozen=True)
class Block:
    kind: str  # "text" | "code"
    text: str
    start: int  # offset of text[0] in the source
    lang: str = ""
    closed: bool = True


def split_blocks(source: str) -> list[Block]:
    blocks: list[Block] = []
    pos = 0
    prose: list[str] = []
    prose_start = 0
    fence = ""
    lang = ""
    code: list[str] = []
    code_start = 0

    def flush_prose() -> None:
        text = "".join(prose)
        if text.strip():
            blocks.append(Block("text", text, prose_start))
        prose.clear()

    for line in source.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if not fence:
            m = _FENCE.match(bare)
            if m:
                flush_prose()
                fence, lang = m.group(1), m.group(2)
                code, code_start = [], pos + len(line)
            else:
                if not prose:
                    prose_start = pos
                prose.append(line)
        else:
            closing = bare.strip()
            if closing.startswith(fence) and set(closing) == {fence[0]}:
                blocks.append(Block("code", _strip_newline("".join(code)), code_start, lang))
                fence = ""
            else:
                code.append(line)
        pos += len(line)
    if fence:
        blocks.append(Block("code", _strip_newline("".join(code)), code_start, lang, False))
    else:
        flush_prose()
    return blocks


def _strip_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


def merge_runs(runs: list[Run]) -> list[Run]:
    """Join neighbouring runs with the same drafted flag."""
    out: list[Run] = []
    for text, drafted in runs:
        if not text:
            continue
        if out and out[-1][1] == drafted:
            out[-1] = (out[-1][0] + text, drafted)
        else:
            out.append((text, drafted))
    return out


def drafted_spans(runs: list[Run], start: int, end: int) -> list[tuple[int, int]]:
    """Source spans [a, b) of drafted text inside [start, end), relative to `start`."""
    spans = []
    pos = 0
    for text, drafted in runs:
        a, b = pos, pos + len(text)
        pos = b
        if drafted and b > start and a < end:
            spans.append((max(a, start) - start, min(b, end) - start))
    return spans


def run_pieces(runs: list[Run], start: int, end: int) -> list[Run]:
    """The runs clipped to the source range [start, end)."""
    pieces = []
    pos = 0
    for text, drafted in runs:
        a, b = pos, pos + len(text)
        pos = b
        if b > start and a < end:
            pieces.append((text[max(a, start) - a : min(b, end) - a], drafted))
    return pieces
