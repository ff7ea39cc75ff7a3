"""The app's settings and chat folders (decided in engine.paths), made on first use, and
setting damaged files aside."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from engine import paths


def config_dir() -> Path:
    """The app's settings folder ($HYFLASH_CONFIG_DIR), made on first use."""
    path = paths.config_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """The engine's data folder ($HYFLASH_DATA_DIR), made on first use: chats live beside
    installed drafters."""
    path = paths.data_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def move_aside(path: Path, label: str = "corrupt") -> Path:
    """Rename a damaged file to `<stem>.<label>-<timestamp><suffix>` beside it (never delete
    user data) and return the new path."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.stem}.{label}-{stamp}{path.suffix}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.stem}.{label}-{stamp}-{n}{path.suffix}")
        n += 1
    os.replace(path, target)
    return target
