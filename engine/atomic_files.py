"""Files written whole or not at all: the new content goes to a temporary file beside the
target, which is then renamed over it (atomic on one file system), so a crash or a reader in
another process never sees half a file."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path


def write_atomically(path: Path, write: Callable[[Path], object], *, suffix: str = ".tmp") -> None:
    """Have `write` fill <path>.<pid><suffix>, then rename it over path. The process id keeps
    writers in parallel processes apart; on any error the temporary file is removed."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}{suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: dict, *, indent: int | None = 1) -> None:
    write_atomically(
        path, lambda tmp: tmp.write_text(json.dumps(data, indent=indent), encoding="utf-8")
    )


def read_json(path: Path) -> dict | None:
    """The JSON object in path; None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
