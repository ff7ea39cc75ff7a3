"""A file's sha256, read once per process: models and their drafters' pins are checked by
content, and a model is gigabytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def _stamp(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path), st.st_size, st.st_mtime_ns


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 22) -> str:
    """sha256 of a (multi-GB) file read in chunks; cached per (path, size, mtime) in-process."""
    key = _stamp(Path(path).resolve())
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(key[0], "rb") as f:
            while block := f.read(chunk_bytes):
                h.update(block)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


def remember_sha256(path: str | Path, digest: str) -> None:
    """Record a digest known from elsewhere (a record kept on disk), so file_sha256 of the
    same unchanged file costs nothing."""
    _SHA_CACHE[_stamp(Path(path).resolve())] = digest
