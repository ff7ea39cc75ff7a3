"""The rooms of engine/ (engine/__init__.py): each imports only from the rooms below it, and
none loads what its docstring says it never imports. Checked from the code, lazy imports
included, so an import that climbs back up or a heavy library pulled into a light room fails
here before it reaches a user (a torch-free install, the frozen bundle, the loop's tests)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from engine.paths import REPO

ENGINE = REPO / "engine"
# lowest first; a module may import its own room and any room before it
ROOMS = (
    ("engine.options", "engine.events", "engine.units", "engine.atomic_files", "engine.paths"),
    ("engine.file_hash",),
    ("engine.decoding",),
    ("engine.llama",),
    ("engine.models",),
    ("engine.drafters",),
    ("engine.engine",),
    ("engine.server",),
    ("engine.bench",),
    ("engine.training",),
    ("engine.speedup",),
    ("engine.commands",),
)
# what importing any module of a room never loads (its docstring names each)
NEVER = {
    "engine.decoding": ("llama_cpp", "gguf", "onnxruntime", "torch", "PySide6", "fastapi"),
    "engine.llama": ("torch", "PySide6", "fastapi"),
    "engine.models": ("llama_cpp", "torch", "PySide6", "fastapi"),
    "engine.drafters": ("llama_cpp", "torch", "PySide6", "fastapi"),
    "engine.server": ("torch", "PySide6"),
    "engine.bench": ("torch", "PySide6", "fastapi"),
    "engine.training": ("PySide6", "fastapi"),
    "engine.speedup": ("PySide6", "fastapi"),
    "engine.commands": ("PySide6",),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(module: str) -> int | None:
    for i, room in enumerate(ROOMS):
        if any(module == name or module.startswith(name + ".") for name in room):
            return i
    return None


def _engine_imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every engine import in the file, at the top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        found += [(name, node.lineno) for name in names if name.split(".")[0] == "engine"]
    return found


def test_every_engine_module_belongs_to_a_room():
    lost = [_module_name(p) for p in ENGINE.rglob("*.py") if _module_name(p) != "engine"]
    assert [m for m in lost if _floor(m) is None] == []


def test_no_import_runs_back_up_to_a_higher_room():
    upward = []
    for path in sorted(ENGINE.rglob("*.py")):
        mine = _floor(_module_name(path))
        for name, line in _engine_imports(path):
            theirs = _floor(name)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{path.relative_to(ENGINE.parent)}:{line} imports {name}")
    assert upward == []


def test_the_check_sees_an_import_that_runs_back_up(tmp_path):
    """The checker itself: a lazy import of a higher room, inside a function, is found."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from engine.commands.cli import main\n", encoding="utf-8")
    assert _engine_imports(probe) == [("engine.commands.cli", 2), ("engine.commands.cli.main", 2)]
    assert _floor("engine.commands.cli") > _floor("engine.decoding.speculative")


_BLOCKED_IMPORT = """
import importlib, importlib.abc, pkgutil, sys
never = set(sys.argv[2].split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in never:
            raise ImportError(f"{name} is blocked")
sys.meta_path.insert(0, Refuse())
room = importlib.import_module(sys.argv[1])
for info in pkgutil.walk_packages(room.__path__, room.__name__ + "."):
    importlib.import_module(info.name)
print(sorted(m for m in sys.modules if m.split(".")[0] in never))
"""


@pytest.mark.parametrize("room", sorted(NEVER))
def test_a_room_imports_with_what_it_never_imports_blocked(room):
    never = NEVER[room]
    doc = __import__(room, fromlist=["_"]).__doc__ or ""
    assert "Never imports" in doc and all(name in doc for name in never), doc
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, room, ",".join(never)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"


def test_the_loops_own_tests_pass_without_llama_cpp_gguf_torch_or_qt():
    """The loop's room alone: its step tests (a fake target, a scripted drafter) pass in a
    process where the heavy libraries cannot be imported."""
    code = (
        _BLOCKED_IMPORT.split("room = ")[0]
        + "import pytest\n"
        + "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'no:pytest-qt', '-k', "
        + "'not real_model', "
        + "sys.argv[1]]))\n"
    )
    blocked = "llama_cpp,gguf,torch,PySide6,onnxruntime,fastapi"
    loop_tests = str(REPO / "tests" / "decoding" / "test_loop_step.py")
    out = subprocess.run(
        [sys.executable, "-c", code, loop_tests, blocked],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and " failed" not in out.stdout
