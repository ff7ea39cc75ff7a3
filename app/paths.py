"""Where the app keeps its settings and chats; env overrides let tests use temporary dirs."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import platformdirs

from app import APP_NAME
from engine import user_drafters

CONFIG_ENV = "HYFLASH_CONFIG_DIR"


def config_dir() -> Path:
    env = os.environ.get(CONFIG_ENV)
    path = Path(env).expanduser() if env else Path(platformdirs.user_config_dir(APP_NAME, False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """The engine's data folder ($HYFLASH_DATA_DIR): chats live beside installed drafters."""
    path = user_drafters.data_dir()
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
