"""`hyflash doctor`: what this machine has, and which backend the app will use and why."""

from __future__ import annotations

import argparse
import json

from engine.backends import BACKEND_NAMES, choose, describe, probe


def doctor_report(as_json: bool = False, backend: str | None = None) -> str:
    """The probe, the choice for `backend` (None = auto) and the reason, as text or JSON."""
    p = probe()
    choice = choose(p, backend)
    cache = _model_cache()
    if as_json:
        report = {"probe": p.to_dict(), "choice": choice.to_dict(), "model_cache": cache}
        return json.dumps(report, indent=2)
    rows = describe(p)
    n, size = len(cache["installed"]), sum(m["size_bytes"] for m in cache["installed"])
    rows.append(("Model cache", f"{cache['dir']} ({n} downloaded, {size / 1e9:.2f} GB)"))
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
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def _model_cache() -> dict:
    from engine.downloads import list_installed, models_dir

    return {"dir": str(models_dir()), "installed": [m.to_dict() for m in list_installed()]}


def add_doctor_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
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
    parser.set_defaults(func=run_doctor)
    return parser


def run_doctor(args: argparse.Namespace) -> int:
    print(doctor_report(as_json=args.json, backend=getattr(args, "backend", None)))
    return 0
