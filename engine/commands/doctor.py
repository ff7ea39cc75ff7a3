"""`hyflash doctor`: what this machine has, and which backend the app will use and why."""

from __future__ import annotations

import argparse
import json

from engine.bench.provenance import provenance
from engine.llama.backends import BACKEND_NAMES, choose, describe, probe
from engine.units import format_size


def doctor_report(
    as_json: bool = False, backend: str | None = None, model: str | None = None
) -> str:
    """The probe, the choice for `backend` (None = auto) and the reason, and what the kernel
    check found for `model` (None = the default model), as text or JSON."""
    p = probe()
    choice = choose(p, backend)
    cache = _model_cache()
    drafters = _user_drafters()
    kernels = kernel_report(model, choice.n_gpu_layers)
    if as_json:
        report = {
            "probe": p.to_dict(),
            "choice": choice.to_dict(),
            "model_cache": cache,
            "drafters": drafters,
            "kernels": kernels,
            "provenance": provenance(target=kernels.get("model", model)),
        }
        return json.dumps(report, indent=2)
    rows = describe(p)
    n, size = len(cache["installed"]), sum(m["size_bytes"] for m in cache["installed"])
    rows.append(("Model cache", f"{cache['dir']} ({n} downloaded, {format_size(size)})"))
    rows.append(("Drafters", f"{drafters['dir']} ({len(drafters['installed'])} installed)"))
    rows += [("Installed drafter", _drafter_line(d)) for d in drafters["installed"]]
    rows += [
        (
            "Backend",
            f"{choice.name}"
            + (f" (asked for {choice.requested})" if choice.requested != "auto" else " (auto)"),
        ),
        ("Target", f"{choice.target_backend}, n_gpu_layers={choice.n_gpu_layers}"),
        ("Drafter", " -> ".join(choice.drafter_providers)),
        ("Why", choice.reason),
    ]
    if "error" in kernels:
        rows.append(("Kernels", kernels["error"]))
    else:
        rows.append(("Kernels for", f"{kernels['model']} ({kernels['threads']} threads)"))
        rows += [("Kernels", line) for line in kernels["lines"]]
        rows.append(("Verify", f"{kernels['verify_mode']}: {kernels['verify_reason']}"))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def kernel_report(model: str | None, n_gpu_layers: int = 0) -> dict:
    """The kernel verdict for a model on this machine (checked now if not remembered) and the
    verify mode the engine would use."""
    from engine.events import EngineError
    from engine.llama.kernels import decide, requested_verify_mode
    from engine.llama.target import default_threads
    from engine.models.resolve import resolve_target

    try:
        model_id, path = resolve_target(model)
        threads = default_threads()
        verdict = decide(path, n_threads=threads, n_gpu_layers=n_gpu_layers)
        plan = verdict.verify_plan(requested_verify_mode())
    except (EngineError, ValueError, OSError) as exc:
        return {"error": str(exc)}
    return {
        "model": model_id,
        "threads": threads,
        "lines": verdict.summary(),
        "verdict": verdict.to_dict(),
        "verify_mode": plan.mode,
        "verify_chunk": plan.chunk or 0,
        "verify_reason": plan.reason,
    }


def _model_cache() -> dict:
    from engine.models.downloads import list_installed
    from engine.paths import models_dir

    return {"dir": str(models_dir()), "installed": [m.to_dict() for m in list_installed()]}


def _user_drafters() -> dict:
    from engine.drafters.installed import installed_drafters
    from engine.paths import drafters_dir

    return {"dir": str(drafters_dir()), "installed": [d.to_dict() for d in installed_drafters()]}


def _drafter_line(d: dict) -> str:
    """One installed drafter: its name, the GGUF its card pins, its held-out acceptance."""
    line = f"{d['name']} for {d['target_name'] or '?'} (sha256 {d['target_sha256'][:12]}...)"
    if d["tau"] is not None and d["ngram_tau"] is not None:
        line += f", tau {d['tau']:.2f} vs n-gram {d['ngram_tau']:.2f} at B=16"
    return line


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "doctor", help="show this machine's backends and which one HyFlash Chat will use"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--backend",
        choices=BACKEND_NAMES,
        default="auto",
        type=str.lower,
        help="show the choice as if this backend were forced (default: auto)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="catalog id or .gguf path for the kernel check (default: the embedded model)",
    )
    parser.set_defaults(func=run_doctor)
    return parser


def run_doctor(args: argparse.Namespace) -> int:
    print(
        doctor_report(
            as_json=args.json,
            backend=getattr(args, "backend", None),
            model=getattr(args, "model", None),
        )
    )
    return 0
