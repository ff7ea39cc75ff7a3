"""Project a bench run onto another machine's cost curve (`hyflash bench --cost-curve FILE`).

Acceptance does not depend on the machine: the same drafter proposes the same tokens and the
target accepts the same ones. What changes is the price of a B-token verify, T(B)/T(1): on
this 2-core CPU it grows almost linearly (compute-bound), on a GPU or Apple silicon it stays
near 1 for small B (memory-bound). Replaying the verify sizes each configuration used here
against another curve gives the speedup that machine would see. It is a projection, labelled
as such: `auto` chose its blocks with this machine's costs (on a flatter curve it would
choose longer ones), and chunked verifies are counted as one decode of the whole block.

A curve file is JSON, either a `speed.json` written by `hyflash bench --out` on the other
machine, or {"source": "...", "cost_ratio": {"1": 1.0, "2": ..., ...}, "t1_ms": ...,
"model": "..."}; sizes missing from the curve are interpolated (linearly, extended with the
last slope). With the absolute T(1) of the same model, the drafter's time measured here is
counted too (a drafter on this CPU beside a target on that machine); otherwise only the
target's cost is (what a drafter taking no time would give).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engine.bench.provenance import run_machine
from engine.decoding.blocksize import CostModel


@dataclass(frozen=True)
class CostCurve:
    source: str
    ratios: CostModel  # T(B)/T(1), B = 1..MAX_BLOCK_SIZE
    t1_ms: float | None  # the absolute T(1) on that machine, when known
    model: str | None  # the model the curve was measured with, when known


def load_curve(path: str | Path) -> CostCurve:
    """Read a curve file (see the module doc); a clear ValueError when it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read the cost curve {path}: {exc}") from exc
    raw = data.get("cost_ratio") if isinstance(data, dict) else None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path} has no cost_ratio table (B -> T(B)/T(1))")
    try:
        ratios = {int(b): float(r) for b, r in raw.items()}
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: cost_ratio must map block sizes to numbers") from exc
    if ratios.get(1) != 1.0 or any(r <= 0 for r in ratios.values()):
        raise ValueError(f"{path}: cost_ratio needs T(1)/T(1) = 1 and positive ratios")
    t1 = data.get("t1_ms")
    if t1 is None and isinstance(data.get("cost_curve_ms"), dict):
        t1 = data["cost_curve_ms"].get("1")  # a bench speed.json
    measured = "machine" in data or "provenance" in data  # a bench speed.json
    source = data.get("source") or (
        f"{run_machine(data)['cpu']} ({path.name})" if measured else path.name
    )
    return CostCurve(
        source=str(source),
        ratios=CostModel(ratios, ema=0.0),
        t1_ms=float(t1) if t1 is not None else None,
        model=data.get("model"),
    )


def projected_time(blocks: dict[int, int], curve: CostCurve) -> float:
    """Target time of these verifies on the curve's machine, in units of its T(1)."""
    return sum(n * curve.ratios(int(b)) for b, n in blocks.items())


def project(summary: list[dict], curve: CostCurve, model: str) -> dict:
    """Projected speedup over plain decoding of every configuration in a bench summary (each
    entry needs tokens, blocks {B: steps} and draft_ms_total; the first is plain decoding)."""
    plain = summary[0]
    plain_speed = plain["tokens"] / projected_time(plain["blocks"], curve)
    with_drafter = curve.t1_ms is not None and curve.model == model
    rows = []
    for s in summary:
        target_t = projected_time(s["blocks"], curve)
        row = {
            "key": s["key"],
            "config": s["config"],
            "tau": s["tau"],
            "measured": s["speedup"],
            "projected_drafter_free": s["tokens"] / target_t / plain_speed,
            "projected": None,
        }
        if with_drafter:
            drafter_t = s["draft_ms_total"] / curve.t1_ms
            row["projected"] = s["tokens"] / (target_t + drafter_t) / plain_speed
        rows.append(row)
    return {
        "source": curve.source,
        "model": curve.model,
        "t1_ms": curve.t1_ms,
        "drafter_counted": with_drafter,
        "cost_ratio": {b: curve.ratios(b) for b in (1, 2, 4, 8, 16)},
        "rows": rows,
    }


def projection_markdown(projection: dict) -> str:
    ratios = projection["cost_ratio"]
    curve = ", ".join(f"T({b})/T(1) {r:.2f}" for b, r in ratios.items() if b > 1)
    lines = [
        f"Projection onto {projection['source']} (not measured there: this run's verify sizes "
        f"replayed on its cost curve; {curve}):",
        "",
        "| config | tau | measured here | projected, drafter free | projected, drafter as here |",
        "|---|---|---|---|---|",
    ]
    for r in projection["rows"]:
        counted = f"{r['projected']:.2f}x" if r["projected"] is not None else "-"
        lines.append(
            f"| {r['config']} | {r['tau']:.2f} | {r['measured']:.2f}x | "
            f"{r['projected_drafter_free']:.2f}x | {counted} |"
        )
    if not projection["drafter_counted"]:
        lines.append(
            "\nThe curve has no absolute T(1) for this model, so the drafter's own time is not "
            "counted (an upper bound). Block size auto chose its blocks with this machine's "
            "costs; on a flatter curve it would verify longer ones."
        )
    return "\n".join(lines)
