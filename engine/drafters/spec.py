"""Drafter specs: how the CLI, the app, the server and the benchmarks name a drafter, and the
folder a learned one's files are in. No llama.cpp and no onnxruntime here: the app asks
whether a model has a HyFlash drafter without loading either.

    none | ngram     the built-in drafters
    hyflash          the model's HyFlash drafter: the one shipped for a catalog model, else
                     one `hyflash speedup` installed for its GGUF
    PATH             a HyFlash drafter folder
    SPEC@WEIGHTS     a learned drafter's weights (hyflash@int8; fp32 | int8 | int4; default:
                     its card's)
    hybrid:SPEC      n-gram lookup on a 3-token match, else SPEC's drafter
    model:ID|PATH    a draft model: a catalog model or GGUF of the target's vocabulary
                     (engine.llama.draft_model)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.drafters import DRAFTER_CHOICES
from engine.drafters.installed import find_drafter
from engine.events import DrafterMismatchError
from engine.models.catalog import load_catalog
from engine.paths import resources_dir

HYBRID = "hybrid:"
DRAFT_MODEL = "model:"


@dataclass(frozen=True)
class DrafterSpec:
    name: str  # "none", "ngram", "hyflash", or a folder's path as written
    weights: str | None = None  # a learned drafter's weights; None: its card's
    hybrid: bool = False  # n-gram lookup first, this drafter where it finds nothing

    @property
    def draft_model(self) -> str | None:
        """The catalog id or GGUF path of a draft model's spec, else None."""
        return self.name[len(DRAFT_MODEL) :] if self.name.startswith(DRAFT_MODEL) else None

    @property
    def learned(self) -> bool:
        return self.name not in ("none", "ngram") and self.draft_model is None


def parse_drafter_spec(spec: str) -> DrafterSpec:
    """The parts of a spec; one that names nothing sensible raises DrafterMismatchError (a
    user-facing one-line message). Whether a named folder exists is drafter_folder's job."""
    text = spec.strip()
    hybrid = text.startswith(HYBRID)
    if hybrid:
        text = text[len(HYBRID) :]
        if text.startswith(HYBRID):
            raise DrafterMismatchError(f"'{spec}': hybrid: takes one drafter, not another hybrid")
    name, at, weights = text.rpartition("@")
    if not at or "/" in weights or "\\" in weights:  # an @ inside a folder's path
        name, weights = text, ""
    elif not weights:
        raise DrafterMismatchError(f"'{spec}': name the weights after @ (fp32, int8 or int4)")
    if not name:
        raise DrafterMismatchError(
            f"'{spec}' names no drafter: use one of {', '.join(DRAFTER_CHOICES)} or a folder"
        )
    parsed = DrafterSpec(name, weights or None, hybrid)
    if parsed.draft_model == "":
        raise DrafterMismatchError(f"'{spec}': name the draft model after model: (an id or a path)")
    if weights and not parsed.learned:
        raise DrafterMismatchError(f"'{spec}': the {name} drafter has no weights to choose")
    return parsed


def hyflash_drafter_dir(model_id: str, model_path: Path | None = None) -> Path:
    """The folder of a model's HyFlash drafter: the one shipped for a catalog model, else one
    `hyflash speedup` installed for its GGUF (found by the catalog's pinned sha256 or by the
    file at model_path), or a clear error."""
    entry = load_catalog().get(model_id)
    if entry is not None and entry.drafter:
        folder = resources_dir() / "drafters" / entry.drafter
        if (folder / "card.json").exists():
            return folder
    pinned = entry.source.get("sha256") if entry is not None else None
    if pinned or model_path is not None:
        user = find_drafter(sha256=pinned, gguf=model_path)
        if user is not None:
            return user
    if entry is None or not entry.drafter:
        raise DrafterMismatchError(
            f"No HyFlash drafter exists for the model '{model_id}' (`hyflash speedup --model "
            f"{model_path or model_id}` trains one)."
        )
    raise DrafterMismatchError(
        f"The HyFlash drafter '{entry.drafter}' for '{model_id}' is not installed. "
        "Choose the n-gram drafter or none."
    )


def hyflash_status(model_id: str, model_path: Path | None = None) -> tuple[bool, str]:
    """(available, why not) for the HyFlash drafter of a model, without loading it."""
    try:
        hyflash_drafter_dir(model_id, model_path)
    except DrafterMismatchError as exc:
        return False, str(exc)
    return True, ""


def drafter_folder(spec: DrafterSpec, model_id: str, model_path: Path | None) -> Path:
    """The folder of a learned drafter's spec, or DrafterMismatchError when there is none."""
    if spec.name == "hyflash":
        return hyflash_drafter_dir(model_id, model_path)
    path = Path(spec.name)
    if not path.exists():
        raise DrafterMismatchError(
            f"Unknown drafter '{spec.name}': use one of {', '.join(DRAFTER_CHOICES)} or a "
            "drafter folder"
        )
    return path
