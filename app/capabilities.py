"""What this machine and model can do: for greying out choices in the settings dialog."""

from __future__ import annotations

from app.settings import BACKENDS
from engine.drafters.spec import hyflash_status as engine_hyflash_status
from engine.llama.backends import DISPLAY, choose, probe
from engine.models.catalog import default_target_id


def hyflash_status(model_id: str | None) -> tuple[bool, str]:
    """(available, why not) for the HyFlash drafter of `model_id` (None = default model)."""
    try:
        return engine_hyflash_status(model_id or default_target_id())
    except (OSError, ValueError, KeyError) as exc:
        return False, f"The model catalog could not be read: {exc}"


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
