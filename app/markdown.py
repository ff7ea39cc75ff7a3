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
    head: int = 0  # offset of the block's first source line (a code block's fence line)


def split_blocks(source: str, start: int = 0) -> list[Block]:
    """The blocks of source[start:] (offsets stay source offsets); `start` must be a line
    start outside any fence, as `resume_at` gives."""
    blocks: list[Block] = []
    pos = start
    prose: list[str] = []
    prose_start = 0
    fence = ""
    lang = ""
    code: list[str] = []
    code_start = 0

    def flush_prose() -> None:
        text = "".join(prose)
        if text.strip():
            blocks.append(Block("text", text, prose_start, head=prose_start))
        prose.clear()

    fence_at = 0
    for line in source[start:].splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if not fence:
            m = _FENCE.match(bare)
            if m:
                flush_prose()
                fence, lang = m.group(1), m.group(2)
                code, code_start, fence_at = [], pos + len(line), pos
            else:
                if not prose:
                    prose_start = pos
                prose.append(line)
        else:
            closing = bare.strip()
            if closing.startswith(fence) and set(closing) == {fence[0]}:
                text = _strip_newline("".join(code))
                blocks.append(Block("code", text, code_start, lang, head=fence_at))
                fence = ""
            else:
                code.append(line)
        pos += len(line)
    if fence:
        text = _strip_newline("".join(code))
        blocks.append(Block("code", text, code_start, lang, False, fence_at))
    else:
        flush_prose()
    return blocks


def resume_at(source: str, blocks: list[Block]) -> int:
    """Index of the first block that a longer source (this one plus appended text) may
    change: the last one, or the one before it while the last one's first line is still
    incomplete (that line may yet turn out not to be a fence, or to be one)."""
    if not blocks:
        return 0
    last = blocks[-1]
    line_done = any(c in source[last.head :] for c in "\n\r")
    return len(blocks) - 1 if line_done or len(blocks) == 1 else len(blocks) - 2


# After a blank line, a line that starts one of these may still belong to what came before
# (list item, quote, indented code, table, HTML, link definition) or is not known yet.
_NOT_A_NEW_START = re.compile(r"[\s\-+*>|<\[`~]|\d+[.)]|\d*$")


def settled_end(text: str, start: int = 0) -> int:
    """The last offset >= start in an open prose block before which its Markdown renders the
    same whatever follows: the start of a line that begins a new top-level paragraph or
    heading right after a blank line (a blank line ends every other construct there). Link
    reference definitions arriving later are the exception; a full render at the end covers
    it."""
    end = start
    pos = start
    blank_before = False
    while True:
        nl = text.find("\n", pos)
        if nl < 0:
            break  # the last line is incomplete: it may still change
        line = text[pos:nl]
        if blank_before and pos > start and not _NOT_A_NEW_START.match(line):
            end = pos
        blank_before = not line.strip()
        pos = nl + 1
    return end


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
