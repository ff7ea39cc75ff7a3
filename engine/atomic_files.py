"""Files written whole or not at all: the new content goes to a temporary file beside the
target, flushed to the disk, then renamed over it (atomic on one file system) and the rename
itself flushed, so neither a crash, a power cut nor a reader in another process ever sees half
a file."""

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
        with open(tmp, "rb+") as f:  # the content on the disk before the name points at it
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (POSIX; Windows commits renames itself)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
