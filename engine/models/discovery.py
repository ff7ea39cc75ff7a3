"""GGUF files already on this computer, found where they lie and never copied: the model
folders of LM Studio, Ollama, the Hugging Face hub cache and llama.cpp's cache, the folders a
person lists and the files they added. Each becomes an engine.models.local_model row; a file
that cannot be read is a row with its error, so one bad file never stops a scan.

The places are computed from a home folder and an environment (default_roots), so tests and
other machines' layouts are plain arguments.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from engine.llama.backends import choose, probe
from engine.llama.kernels import KernelVerdict, cached_verdict
from engine.models.local_model import (
    ADDED,
    FOLDER,
    HUGGING_FACE,
    LLAMA_CPP,
    LM_STUDIO,
    OLLAMA,
    LocalModel,
    read_local_model,
)

MAX_DEPTH = 6  # folders below a root a scan descends into
MAX_FILES = 2000  # .gguf files taken from one root
MAX_FOLDERS = 20000  # folders visited under one root: a home folder listed by mistake stays quick
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
# split models: llama.cpp loads every part from the first
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class Roots:
    """Where each application keeps its models (folders that may not exist)."""

    lm_studio: tuple[Path, ...] = ()
    ollama: tuple[Path, ...] = ()
    hugging_face: tuple[Path, ...] = ()
    llama_cpp: tuple[Path, ...] = ()


def default_roots(
    home: Path | None = None, env: Mapping[str, str] | None = None, system: str | None = None
) -> Roots:
    """The applications' folders for `home`, `env` and `system` (platform.system()'s names;
    by default this machine's)."""
    home = Path.home() if home is None else home
    env = os.environ if env is None else env
    system = system or platform.system()
    ollama = [Path(env["OLLAMA_MODELS"])] if env.get("OLLAMA_MODELS") else [home / ".ollama/models"]
    if system == "Linux" and not env.get("OLLAMA_MODELS"):
        ollama.append(Path("/usr/share/ollama/.ollama/models"))  # the Linux installer's service
    xdg_cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    if env.get("HF_HUB_CACHE"):
        hub = Path(env["HF_HUB_CACHE"])
    else:
        hub = Path(env["HF_HOME"]) / "hub" if env.get("HF_HOME") else xdg_cache / "huggingface/hub"
    if env.get("LLAMA_CACHE"):
        llama = Path(env["LLAMA_CACHE"])
    elif system == "Darwin":
        llama = home / "Library/Caches/llama.cpp"
    elif system == "Windows":
        local = env.get("LOCALAPPDATA")
        llama = Path(local) / "llama.cpp" if local else home / "AppData/Local/llama.cpp"
    else:
        llama = xdg_cache / "llama.cpp"
    return Roots(
        lm_studio=(home / ".lmstudio/models", home / ".cache/lm-studio/models"),
        ollama=tuple(ollama),
        hugging_face=(hub,),
        llama_cpp=(llama,),
    )


def scan(
    roots: Roots | None = None,
    folders: Sequence[str | Path] = (),
    files: Sequence[str | Path] = (),
) -> list[LocalModel]:
    """Every GGUF model in the applications' folders, then in `folders` (recursively, within
    MAX_DEPTH and MAX_FILES), then `files` themselves; a file found twice (a folder that holds
    LM Studio's, a symlink) is listed once, first where found. Vision projectors and the
    later parts of split models are left out."""
    roots = default_roots() if roots is None else roots
    found = [
        *(_row(p, LM_STUDIO) for r in roots.lm_studio for p in gguf_files(r)),
        *(row for r in roots.ollama for row in ollama_models(r)),
        *(row for r in roots.hugging_face for row in hugging_face_models(r)),
        *(_row(p, LLAMA_CPP) for r in roots.llama_cpp for p in gguf_files(r)),
        *(_row(p, FOLDER) for r in folders for p in gguf_files(Path(r).expanduser())),
        *(_row(Path(f).expanduser(), ADDED) for f in files),
    ]
    rows, seen = [], set()
    for row in found:
        if row is None or row.projector:
            continue
        key = os.path.realpath(row.path)
        if key not in seen:
            seen.add(key)
            rows.append(row)
    return rows


def gguf_files(root: Path) -> Iterator[Path]:
    """The .gguf files under `root` (none when it is missing), hidden folders skipped, at
    most MAX_DEPTH deep and MAX_FILES of them, sorted within each folder."""
    if not root.is_dir():
        return
    taken = visited = 0
    for folder, subdirs, names in os.walk(root, onerror=lambda _exc: None):
        visited += 1
        depth = len(Path(folder).relative_to(root).parts)
        subdirs[:] = [] if depth >= MAX_DEPTH else sorted(d for d in subdirs if d[0] != ".")
        for name in sorted(names):
            if name.lower().endswith(".gguf"):
                yield Path(folder) / name
                taken += 1
                if taken >= MAX_FILES:
                    return
        if visited >= MAX_FOLDERS:
            return


def _row(path: Path, source: str, name: str | None = None) -> LocalModel | None:
    """The file's row; None for a split model's later part (its first part stands for it)."""
    shard = _SHARD.search(path.name)
    if shard is None:
        return read_local_model(path, source, name)
    if int(shard.group(1)) != 1:
        return None
    count = int(shard.group(2))
    stem = path.name[: shard.start()]
    parts = [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    size = sum(p.stat().st_size for p in parts if p.is_file())
    row = read_local_model(path, source, name, size_bytes=size)
    return replace(row, name=stem) if row.name == path.stem else row  # no header name


def ollama_models(root: Path) -> Iterator[LocalModel | None]:
    """Ollama's models: each manifest (manifests/<registry>/<namespace>/<model>/<tag>, JSON)
    names its GGUF layer by digest, kept as blobs/sha256-<hex>. The model is called
    <model>:<tag> as `ollama list` says it (registry.ollama.ai/library/ left out)."""
    manifests = root / "manifests"
    if not manifests.is_dir():
        return
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
        *repo, tag = manifest.relative_to(manifests).parts
        name = "/".join(repo).removeprefix("registry.ollama.ai/").removeprefix("library/")
        name = f"{name}:{tag}"
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            digest = next(
                layer["digest"]
                for layer in data["layers"]
                if layer.get("mediaType") == OLLAMA_MODEL_LAYER
            )
        except StopIteration:
            continue  # a manifest without a model layer (an adapter, a template)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            why = f"Ollama's manifest of {name} cannot be read ({type(exc).__name__}: {exc})"
            yield LocalModel(str(manifest), OLLAMA, name, error=why)
            continue
        yield _row(root / "blobs" / str(digest).replace(":", "-", 1), OLLAMA, name)


def hugging_face_models(root: Path) -> Iterator[LocalModel | None]:
    """The hub cache's GGUF files: models--<org>--<name>/snapshots/<revision>/**.gguf, links
    into the repository's blobs/ (resolved to read them; the snapshot's name is kept, it
    names the file). One blob in several revisions is listed once."""
    if not root.is_dir():
        return
    for repo in sorted(root.glob("models--*")):
        for snapshot in sorted((repo / "snapshots").glob("*")):
            for path in gguf_files(snapshot):
                yield _row(path, HUGGING_FACE)


def kernel_verdict(
    path: str | Path, *, n_threads: int, backend: str = "auto"
) -> KernelVerdict | None:
    """The kernel check's verdict remembered for this file, keyed as the engine would load it
    here (threads, the backend's offload), or None when it was never checked. Reads caches
    only: never hashes the file nor runs a check."""
    try:  # probe() is cached: the engine has looked at this machine already
        layers = choose(probe(), backend, model_bytes=Path(path).stat().st_size).n_gpu_layers
        return cached_verdict(path, n_threads=n_threads, n_gpu_layers=layers)
    except (OSError, ImportError):
        return None  # gone, or no llama.cpp here: nothing was checked
