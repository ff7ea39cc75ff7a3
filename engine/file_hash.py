"""A file's sha256, read once per machine: models and their drafters' pins are checked by
content, and a model is gigabytes. Digests are remembered per (path, size, mtime) in-process
and on disk (cache_root()/file-hashes.json), so a later process costs nothing either."""

from __future__ import annotations

import hashlib
from pathlib import Path

from engine.atomic_files import read_json, write_json
from engine.paths import cache_root

_SHA_CACHE: dict[str, str] = {}


def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{path}|{st.st_size}|{st.st_mtime_ns}"


def _record() -> Path:
    return cache_root() / "file-hashes.json"


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 22) -> str:
    """sha256 of a (multi-GB) file read in chunks, unless this unchanged file was hashed
    before on this machine."""
    path = Path(path).resolve()
    key = _stamp(path)
    if key in _SHA_CACHE:
        return _SHA_CACHE[key]
    known = read_json(_record()) or {}
    digest = known.get(key)
    if not isinstance(digest, str):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(chunk_bytes):
                h.update(block)
        digest = h.hexdigest()
        known[key] = digest
        try:
            _record().parent.mkdir(parents=True, exist_ok=True)
            write_json(_record(), known)
        except OSError:
            pass  # a read-only cache costs a re-read next time, nothing else
    _SHA_CACHE[key] = digest
    return digest


def known_sha256(path: str | Path) -> str | None:
    """sha256 of this unchanged file if it was hashed before on this machine, else None:
    never reads the file (a listing of models must not hash gigabytes)."""
    path = Path(path).resolve()
    key = _stamp(path)
    digest = _SHA_CACHE.get(key) or (read_json(_record()) or {}).get(key)
    return digest if isinstance(digest, str) else None


def still_verified(path: Path, sha256: str, size: int, mtime_ns: int | None) -> bool:
    """Whether `path` is still the file once verified as (sha256, size, mtime_ns): its size on
    every call, its content only when its modification time moved (a copy, a restore, an
    edit in place; mtime_ns None: not known) or never when it did not."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size != size:
        return False
    return st.st_mtime_ns == mtime_ns or file_sha256(path) == sha256
