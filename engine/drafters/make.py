"""The drafter a spec names (engine.drafters.spec), made for one loaded target: the built-in
ones, a HyFlash folder's (onnxruntime loads only then), or either behind n-gram lookup."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.decoding.drafter_protocol import Drafter
from engine.drafters.ngram import NgramDrafter
from engine.drafters.none import NoDrafter
from engine.drafters.spec import DrafterSpec, drafter_folder, parse_drafter_spec
from engine.llama.backends import BackendChoice

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
    from engine.drafters.hyflash import HyFlashDrafter  # onnxruntime only when used

    folder = drafter_folder(parsed, model_id, target.path)
    providers = list(backend.drafter_providers) if backend else None
    return HyFlashDrafter.load(folder, target, providers=providers, weights=parsed.weights)
