"""The catalog of target models (resources/catalog.json): what each id is and where it comes
from. Plain data: resolving an id to a file (engine.models.resolve) and downloading one
(engine.models.downloads) both build on it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from engine.paths import resources_dir


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    name: str
    source: dict
    size_bytes: int = 0
    license: str = ""
    context_length: int = 0
    ram_gb: float = 0.0
    drafter: str | None = None
    extra: dict = field(default_factory=dict)


def load_catalog(path: Path | None = None) -> dict[str, CatalogEntry]:
    data = json.loads((path or resources_dir() / "catalog.json").read_text(encoding="utf-8"))
    known = set(CatalogEntry.__dataclass_fields__) - {"extra"}
    entries = {}
    for raw in data["targets"]:
        fields = {k: v for k, v in raw.items() if k in known}
        extra = {k: v for k, v in raw.items() if k not in known}
        entries[raw["id"]] = CatalogEntry(**fields, extra=extra)
    return entries


def _catalog_field(name: str) -> str | None:
    return json.loads((resources_dir() / "catalog.json").read_text(encoding="utf-8")).get(name)


def default_target_id() -> str:
    """The embedded model: the engine's when none is named (the tests' small model)."""
    return _catalog_field("default_target")


def first_launch_id() -> str | None:
    """The assistant the app opens on the first time, where it is installed (see
    engine.models.resolve.first_launch_target)."""
    return _catalog_field("first_launch")
