"""The drafter a spec names (engine.drafters.spec), made for one loaded target: the built-in
ones, a HyFlash folder's (onnxruntime loads only then), a draft model (engine.llama.draft_model),
or any of them behind n-gram lookup."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.decoding.drafter_protocol import Drafter
from engine.drafters.ngram import NgramDrafter
from engine.drafters.none import NoDrafter
from engine.drafters.spec import DrafterSpec, drafter_folder, parse_drafter_spec
from engine.events import DrafterMismatchError, EngineError
from engine.llama.backends import BackendChoice
from engine.models.resolve import resolve_target

if TYPE_CHECKING:
    from engine.llama.target import LlamaTarget  # llama.cpp: only its type here


def make_drafter(
    spec: str, model_id: str, target: LlamaTarget, backend: BackendChoice | None = None
) -> Drafter:
    """The drafter `spec` names for this target ; one that does not
    fit it, or a spec that names none, raises DrafterMismatchError."""
    parsed = parse_drafter_spec(spec)
    drafter = _drafter(parsed, model_id, target, backend)
    if parsed.hybrid:
        from engine.drafters.hybrid import HybridDrafter

        return HybridDrafter(drafter)
    return drafter


def _drafter(
    parsed: DrafterSpec, model_id: str, target: LlamaTarget, backend: BackendChoice | None
) -> Drafter:
    if parsed.name == "none":
        return NoDrafter()
    if parsed.name == "ngram":
        return NgramDrafter()
    if parsed.draft_model is not None:
        return _draft_model(parsed, target)
    from engine.drafters.hyflash import HyFlashDrafter  # onnxruntime only when used

    folder = drafter_folder(parsed, model_id, target.path)
    providers = list(backend.drafter_providers) if backend else None
    return HyFlashDrafter.load(folder, target, providers=providers, weights=parsed.weights)


def _draft_model(parsed: DrafterSpec, target: LlamaTarget) -> Drafter:
    # llama.cpp is loaded already (the target runs on it); only this import brings it here
    from engine.llama.draft_model import DraftModelDrafter

    try:
        _, path = resolve_target(parsed.draft_model)
        return DraftModelDrafter.load(path, target, parsed.name)
    except DrafterMismatchError:
        raise
    except EngineError as exc:  # missing, damaged: the engine falls back as for any drafter
        raise DrafterMismatchError(f"The draft model '{parsed.draft_model}': {exc}") from None
