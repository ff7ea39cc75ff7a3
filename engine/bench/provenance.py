"""Where and how a result was measured: the one block every raw result file carries.

`provenance()` returns it: CPU model, the flags that decide llama.cpp's kernels and core
counts, OS, Python, llama-cpp-python with its llama.cpp build line, onnxruntime / torch /
transformers / numpy (installed versions, read from package metadata: nothing is imported for
them), the target GGUF (catalog id, sha256) and drafters (name, card sha256), the git commit
and whether tracked files differed from it, the UTC date and the exact command line. A reader
can then tell an AVX2 EPYC from an AVX-512 one, and which drafter files gave a number.

Light to import: llama_cpp loads only when provenance() runs (through the backend probe,
cached, which every engine run has made already).
"""

from __future__ import annotations

import hashlib
import json
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from engine.llama.machine_probe import CpuInfo
from engine.paths import REPO

# package metadata names per library (the first installed counts): onnxruntime ships as
# several wheels with one import name
_LIBRARIES = {
    "llama_cpp": ("llama-cpp-python",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-qnn"),
    "torch": ("torch",),
    "transformers": ("transformers",),
    "numpy": ("numpy",),
}
_NO_DRAFT = ("none", "ngram")
# The command line of an `engine.commands.cli.main(argv)` call made inside another program (a test,
# speedup's validate stage): that call's own argv, not the host process's sys.argv.
_cli_command: list[str] | None = None


def set_cli_command(argv: Sequence[str] | None) -> None:
    global _cli_command
    _cli_command = None if argv is None else list(argv)


def provenance(
    argv: Sequence[str] | None = None,
    *,
    target: str | Path | None = None,
    drafter: str | Path | Sequence[str | Path] | None = None,
    extra: dict | None = None,
) -> dict:
    """The block for one result file. argv: the command line (default sys.argv); target: a
    catalog id or GGUF path; drafter: a spec (ngram, hyflash, hybrid:FOLDER, FOLDER@int8...)
    or several; extra: run settings merged in (threads, backend...)."""
    from engine.llama.backends import probe

    p = probe()
    block = {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(argv if argv is not None else _cli_command or sys.argv),
        "cwd": str(Path.cwd()),
        "cpu": cpu_block(p.cpu),
        "ram_bytes": p.ram_bytes,
        "gpus": [{"name": g.name, "backend": g.backend} for g in p.gpus],
        "os": {"system": p.os, "release": p.os_version, "platform": platform.platform()},
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
        },
        "llama_cpp": {"system_info": p.llama.system_info or None, "error": p.llama.error},
        "onnxruntime_providers": list(p.ort.providers),
        "libraries": library_versions(),
        "git": git_state(),
        "target": target_block(target) if target is not None else None,
        "drafters": drafter_blocks(drafter, target) if drafter is not None else None,
    }
    return block | (extra or {})


def cpu_block(cpu: CpuInfo) -> dict:
    return {
        "model": cpu.model,
        "arch": cpu.arch,
        "flags": list(cpu.flags),
        "physical_cores": cpu.physical_cores,
        "logical_cores": cpu.logical_cores,
    }


def library_versions() -> dict:
    """{library: {"version": installed version or None, "loaded": imported in this run}}."""
    out = {}
    for name, dists in _LIBRARIES.items():
        version = None
        for dist in dists:
            try:
                version = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
        out[name] = {"version": version, "loaded": name in sys.modules}
    return out


def git_state(repo: Path = REPO) -> dict | None:
    """{"commit": full hash, "dirty": tracked files differ from it}, or None where `repo` is
    not a git checkout (an installed app) or git is absent. Untracked files do not count: a
    run writing its own output folder must not call its tree dirty."""
    if not (repo / ".git").exists():  # a file in a worktree, a folder otherwise
        return None
    try:
        head = _git(repo, "rev-parse", "HEAD")
        status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0 or status.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30, check=False
    )


def target_block(target: str | Path) -> dict:
    """{"id", "file", "path", "size_bytes", "sha256"} of a catalog id or a GGUF path. The
    sha256 is the one the kernel check remembers per (path, size, mtime), so a multi-GB file
    is hashed once per machine."""
    from engine.events import EngineError
    from engine.file_hash import file_sha256

    try:
        model_id, path = _resolve(target)
        sha = file_sha256(path)
    except (EngineError, OSError, ValueError) as exc:
        return {"id": str(target), "error": str(exc)}
    return {
        "id": model_id,
        "file": path.name,
        "path": str(path),
        "size_bytes": path.stat().st_size,
        "sha256": sha,
    }


def _resolve(target: str | Path) -> tuple[str, Path]:
    """(model id, path) as the engine resolves it; a path to a catalog model's file gets the
    catalog's id (the engine names a path by its stem)."""
    from engine.models.catalog import load_catalog
    from engine.models.resolve import resolve_target

    model_id, path = resolve_target(target)
    if model_id == path.stem:
        by_file = {Path(e.source.get("file", "")).name: e.id for e in load_catalog().values()}
        model_id = by_file.get(path.name, model_id)
    return model_id, path


def drafter_blocks(
    drafter: str | Path | Sequence[str | Path], target: str | Path | None = None
) -> list[dict]:
    """Per drafter spec: {"spec", "name", "folder", "card_sha256"}; a learned drafter is known
    by its card, which pins its weight files by sha256. "hyflash" is found for `target`."""
    specs = [drafter] if isinstance(drafter, str | Path) else list(drafter)
    return [_drafter_block(str(s), target) for s in dict.fromkeys(str(s) for s in specs)]


def _drafter_block(spec: str, target: str | Path | None) -> dict:
    base = spec
    while base.startswith("hybrid:"):
        base = base.split(":", 1)[1]
    base = base.partition("@")[0]
    if base in _NO_DRAFT:
        return {"spec": spec, "name": base, "folder": None, "card_sha256": None}
    folder = _hyflash_folder(target) if base == "hyflash" else Path(base)
    card = folder / "card.json" if folder is not None else None
    if card is None or not card.is_file():
        return {"spec": spec, "name": base, "folder": None, "card_sha256": None}
    raw = card.read_bytes()
    try:
        name = json.loads(raw).get("name") or folder.name
    except (ValueError, AttributeError):
        name = folder.name
    return {
        "spec": spec,
        "name": name,
        "folder": str(folder.resolve()),
        "card_sha256": hashlib.sha256(raw).hexdigest(),
    }


def _hyflash_folder(target: str | Path | None) -> Path | None:
    """The folder "hyflash" means for this target, as the engine finds it; None if none."""
    if target is None:
        return None
    from engine.drafters.spec import hyflash_drafter_dir
    from engine.events import EngineError

    try:
        return hyflash_drafter_dir(*_resolve(target))
    except (EngineError, OSError, ValueError):
        return None


def run_machine(result: dict) -> dict:
    """{"cpu", "threads", "git"} (short commit, "+dirty" when so) of a result file, from its
    provenance block or from the "machine" fields files had before it."""
    block = result.get("provenance")
    if block is None:
        old = result.get("machine") or {}
        return {"cpu": old.get("cpu", "?"), "threads": old.get("threads"), "git": old.get("git")}
    git = block.get("git")
    rev = f"{git['commit'][:7]}{'+dirty' if git['dirty'] else ''}" if git else None
    return {"cpu": block["cpu"]["model"], "threads": block.get("threads"), "git": rev}
