"""Entry point of the desktop app: `hyflash-chat` or `python main.py`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from app import APP_DISPLAY_NAME, app_version
from engine.paths import APP_NAME


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hyflash-chat",
        description=f"{APP_DISPLAY_NAME}: offline chat with a local model and speculative decoding",
    )
    parser.add_argument("--model", help="catalog id or .gguf path (saved in the settings)")
    parser.add_argument(
        "--drafter", choices=("hyflash", "ngram", "none"), help="drafter (saved in the settings)"
    )
    parser.add_argument(
        "--theme", choices=("system", "light", "dark"), help="theme (saved in the settings)"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {app_version()}")
    return parser.parse_args(argv)


def startup_overrides(args: argparse.Namespace, *, first_launch: bool) -> dict[str, str]:
    """The settings the command line sets and, the first time the app starts, the catalog's
    first-launch assistant (a real one with its HyFlash drafter, where installed) instead of
    the small embedded model."""
    overrides = {
        k: v
        for k, v in (("model", args.model), ("drafter", args.drafter), ("theme", args.theme))
        if v
    }
    if first_launch and "model" not in overrides:
        from engine.models.resolve import first_launch_target

        model = first_launch_target()
        if model:
            overrides["model"] = model
    return overrides


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.settings import SettingsStore
    from engine.paths import resources_dir

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName(APP_NAME)
    app.setApplicationDisplayName(APP_DISPLAY_NAME)
    app.setApplicationVersion(app_version())
    icon = resources_dir() / "icons" / "hyflash.svg"
    if icon.exists():
        app.setWindowIcon(QIcon(str(icon)))

    store = SettingsStore()
    overrides = startup_overrides(args, first_launch=not store.path.exists())
    if overrides:  # command-line choices become the saved settings, as if picked in the dialog
        settings, _message = store.load()
        store.save(replace(settings, **overrides))
    window = MainWindow(settings_store=store)
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
