"""Which installed catalog models can draft for a target: smaller than it and of the same
vocabulary (engine.llama.vocab_pairing), found from files already on disk: nothing is
downloaded or unpacked to ask."""

from __future__ import annotations

import functools
from pathlib import Path

from engine.events import EngineError
from engine.llama.vocab_pairing import pairing_problem
from engine.models.catalog import CatalogEntry, load_catalog
from engine.models.downloads import cached_model_path, is_installed
from engine.models.pypi_parts import assembled_path, distribution_file, part_files
from engine.paths import models_dir


def header_file(entry: CatalogEntry) -> Path | None:
    """A file on disk that starts with the model's GGUF header (a model in chunk packages not
    yet unpacked: its first part), or None where the model is not installed."""
    source = entry.source
    try:
        if source["kind"] == "pypi":
            return distribution_file(source["package"], source["file"], source["package"])
        if source["kind"] == "pypi-parts":
            final = assembled_path(source, models_dir())
            return final if final.is_file() else part_files(source)[0]
        if source["kind"] == "hub" and is_installed(entry):
            return cached_model_path(entry)
    except EngineError:
        return None
    return None


def draft_model_choices(target: Path, target_id: str | None = None) -> list[CatalogEntry]:
    """The installed catalog models that can draft for the GGUF `target` (a catalog model's
    header_file, or any GGUF), smallest first."""
    catalog = load_catalog()
    st = target.stat()
    entry = catalog.get(target_id) if target_id else None
    # a catalog model's own size: its header file may be the first of its parts
    size = entry.size_bytes if entry is not None and entry.size_bytes else st.st_size
    return [catalog[i] for i in _choices(target.resolve(), size, st.st_mtime_ns, target_id)]


@functools.lru_cache(maxsize=16)
def _choices(target: Path, size: int, mtime_ns: int, target_id: str | None) -> tuple[str, ...]:
    # keyed by the target file's mtime: its vocabulary is read once per file version
    found = []
    for entry in sorted(load_catalog().values(), key=lambda e: e.size_bytes):
        if entry.id == target_id or not 0 < entry.size_bytes < size:
            continue
        path = header_file(entry)
        if path is None or path.resolve() == target:
            continue
        try:
            if pairing_problem(target, path) is None:
                found.append(entry.id)
        except EngineError:  # an unreadable header: not offered
            continue
    return tuple(found)
