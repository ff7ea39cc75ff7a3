"""Where benchmark results go: printed Markdown, and with an output folder its JSON + Markdown."""

from __future__ import annotations

import json
from pathlib import Path


def publish(result: dict, markdown: str, out: str | None, stem: str) -> Path | None:
    """Print the table; with `out`, write <stem>.json (every raw number) and <stem>.md there
    and return the folder (for the plots)."""
    print(markdown)
    if not out:
        return None
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(result, indent=2))
    (folder / f"{stem}.md").write_text(markdown + "\n")
    return folder


def markdown_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """Markdown table lines: a header row, its rule, the rows."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]
