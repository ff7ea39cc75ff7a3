"""HyFlash Chat desktop app (PySide6).

The GUI talks to the engine only through `engine.engine.Engine` (load, `generate` events,
`set_drafter`, `info`), always from the worker thread in `app.worker`.
"""

from __future__ import annotations

import importlib.metadata

APP_DISPLAY_NAME = "HyFlash Chat"


def app_version() -> str:
    try:
        return importlib.metadata.version("hyflash-chat")
    except importlib.metadata.PackageNotFoundError:
        return "0.1.0"
