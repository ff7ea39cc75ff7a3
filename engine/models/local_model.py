"""One GGUF file a person has on this computer, as a row of the model list: what its header
says (name, architecture, quantization, context length) and its size, or why it cannot be
used. Headers are read without llama.cpp (engine.llama.gguf_file) and remembered per path,
size and modification time, so a repeated scan reads only files that changed."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import gguf

from engine.events import EngineError
from engine.llama.gguf_file import check_gguf, checked_meta

# where a file was found (LocalModel.source)
LM_STUDIO = "LM Studio"
OLLAMA = "Ollama"
HUGGING_FACE = "Hugging Face"
LLAMA_CPP = "llama.cpp"
FOLDER = "folder"
ADDED = "added"

_GUESSED = 1024  # llama.cpp ORs LLAMA_FTYPE_GUESSED into file types it inferred


@dataclass(frozen=True)
class LocalModel:
    path: str  # the model's id everywhere: `--model PATH`, the server, the app's settings
    source: str  # one of the names above
    name: str  # general.name from the header, else the file's stem (Ollama: model:tag)
    architecture: str = ""  # general.architecture
    quantization: str = ""  # from general.file_type: Q4_K_M, Q8_0, F16, ...
    size_bytes: int = 0  # every part of a split model
    context_length: int = 0  # <architecture>.context_length; 0 = not in the header
    error: str | None = None  # why it cannot be used: missing, unreadable, damaged
    projector: bool = False  # a vision projector (mmproj), not a model to chat with

    @property
    def usable(self) -> bool:
        return self.error is None


def quantization_name(file_type: object) -> str:
    """The llama.cpp file type's usual name (3 -> Q4_1, 15 -> Q4_K_M); gguf's table of
    LLAMA_FTYPE follows llama.cpp's, a number it does not know is shown as a number."""
    if not isinstance(file_type, int):
        return ""
    try:
        name = gguf.LlamaFileType(file_type & ~_GUESSED).name
    except ValueError:
        return f"type {file_type}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


_HEADERS: dict[tuple[str, int, int], LocalModel] = {}


def read_local_model(
    path: Path, source: str, name: str | None = None, size_bytes: int | None = None
) -> LocalModel:
    """The row of the file at `path`; a missing, unreadable or damaged file is a row with its
    error, never an exception. `name` replaces the header's (Ollama names its models);
    `size_bytes` the file's own size (a split model's parts together)."""
    try:
        st = path.stat()
    except OSError as exc:
        return LocalModel(str(path), source, name or path.stem, error=_os_error(path, exc))
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    row = _HEADERS.get(key)
    if row is None:
        row = _HEADERS[key] = _read_header(path, st.st_size)
    return replace(
        row,
        path=str(path),
        source=source,
        name=name or row.name,
        size_bytes=st.st_size if size_bytes is None else size_bytes,
    )


def _read_header(path: Path, size: int) -> LocalModel:
    try:
        check_gguf(path)  # the magic first: a file that is no GGUF is named as such
        meta = checked_meta(path)
    except EngineError as exc:
        return LocalModel(str(path), "", path.stem, size_bytes=size, error=str(exc))
    except OSError as exc:
        return LocalModel(str(path), "", path.stem, size_bytes=size, error=_os_error(path, exc))
    arch = str(meta.get("general.architecture", ""))
    context = meta.get(f"{arch}.context_length", 0)
    return LocalModel(
        str(path),
        "",
        str(meta.get("general.name") or path.stem),
        architecture=arch,
        quantization=quantization_name(meta.get("general.file_type")),
        size_bytes=size,
        context_length=context if isinstance(context, int) else 0,
        projector=arch == "clip" or meta.get("general.type") == "mmproj",
    )


def _os_error(path: Path, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{path.name} is not there any more (moved or deleted?)"
    return f"{path.name} cannot be read: {exc.strerror or exc}"
