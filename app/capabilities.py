"""What this machine and model can do: for greying out choices in the settings dialog."""

from __future__ import annotations

from pathlib import Path

from app.settings import BACKENDS
from engine.drafters.spec import DRAFT_MODEL
from engine.drafters.spec import hyflash_status as engine_hyflash_status
from engine.events import EngineError
from engine.llama.backends import DISPLAY, choose, probe
from engine.models.catalog import CatalogEntry, default_target_id


def hyflash_status(model_id: str | None) -> tuple[bool, str]:
    """(available, why not) for the HyFlash drafter of `model_id` (None = default model)."""
    try:
        return engine_hyflash_status(model_id or default_target_id())
    except (OSError, ValueError, KeyError) as exc:
        return False, f"The model catalog could not be read: {exc}"


def _drafting_for(target: Path, target_id: str | None) -> list[CatalogEntry]:
    """The installed catalog models that can draft for the GGUF `target` (none where its
    header cannot be read)."""
    from engine.models.draft_models import draft_model_choices

    try:
        return draft_model_choices(target, target_id)
    except (EngineError, OSError):
        return []


def draft_models(model_id: str | None) -> list[tuple[str, str]]:
    """(drafter spec, label) for each installed catalog model that can draft for `model_id`
    (smaller, same vocabulary: engine.models.draft_models); none where it cannot be found."""
    from engine.models.resolve import resolve_target

    try:
        target_id, path = resolve_target(model_id)
    except (EngineError, OSError):
        return []
    return [
        (f"{DRAFT_MODEL}{e.id}", f"Draft model: {e.name}") for e in _drafting_for(path, target_id)
    ]


def draft_model_note(target: Path | None, target_id: str | None) -> tuple[str, str] | None:
    """("Draft model", tooltip) when an installed catalog model can draft for the GGUF
    `target`, for the model manager's drafter column; None where none can (or no file)."""
    entries = _drafting_for(target, target_id) if target is not None else []
    if not entries:
        return None
    names = ", ".join(e.name for e in entries)
    return "Draft model", f"No HyFlash drafter; a draft model can draft for it: {names} (Settings)"


def backend_status() -> dict[str, tuple[bool, str]]:
    """name -> (available, reason) per backend the settings offer, from the engine's probe."""
    try:
        machine = probe()
    except Exception as exc:  # noqa: BLE001 - a failed probe leaves only Auto and CPU
        return {b: (b in ("auto", "cpu"), f"probe failed: {exc}") for b in BACKENDS}
    out: dict[str, tuple[bool, str]] = {}
    for name in BACKENDS:
        if name == "auto":
            out[name] = (True, choose(machine, "auto").reason)
        elif name == "cpu":
            out[name] = (True, "Always available")
        else:
            choice = choose(machine, name)
            ok = not choice.fell_back
            why = (
                choice.reason
                if ok
                else f"{DISPLAY[name]} is not available on this machine: " + choice.reason
            )
            out[name] = (ok, why)
    return out
