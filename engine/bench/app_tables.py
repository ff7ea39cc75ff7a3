"""The tables of the app's two benchmarks, scripts/bench_app_speed.py (the window against the
command line) and scripts/profile_app_render.py (the card's UI CPU per streamed token).

The scripts need Qt and the app; these functions only format their JSON, so the scripts and
`hyflash results render` share one copy."""

from __future__ import annotations

from engine.bench.report import markdown_table

# what the UI thread was doing, as profile_app_render.py times it (plus "other")
RENDER_CATEGORIES = ("split", "convert", "tint", "fit", "layout_events", "paint_events")


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def app_speed_table(runs: list[tuple[str | None, list[dict]]]) -> list[str]:
    """bench_app_speed.py's rows, one run or several side by side as (label, rows): grouped by
    answer kind, each window row against its own run's command line. The kind, run and UI CPU
    columns appear only when the rows have them (the first version of the script had none)."""
    every = [r for _, rows in runs for r in rows]
    with_kind = any("kind" in r for r in every)
    with_run = any(label is not None for label, _ in runs)
    with_ui = any("ui_cpu_ms_per_token" in r for r in every)
    with_differ = any("differ" in r for r in every)
    head = [
        *(["kind"] if with_kind else []),
        *(["run"] if with_run else []),
        "config",
        *(["answers", "differ"] if with_differ else []),
        "tokens",
        "decode tok/s",
        "vs command line",
        *(["UI CPU ms/token"] if with_ui else []),
        "event loop max gap (ms)",
        "p99",
    ]
    body = []
    for kind in dict.fromkeys(r.get("kind") for r in every):
        for label, rows in runs:
            for r in rows:
                if r.get("kind") != kind:
                    continue
                body.append(
                    [
                        *([kind] if with_kind else []),
                        *([label or ""] if with_run else []),
                        r["config"],
                        *([str(r["answers"]), str(r["differ"])] if with_differ else []),
                        str(r["tokens"]),
                        f"{r['tok_s']:.1f}",
                        f"{r['vs_cli']:.2f}x",
                        *([_cell(r.get("ui_cpu_ms_per_token"), ".2f")] if with_ui else []),
                        _cell(r["max_gap_ms"], ".0f"),
                        _cell(r["p99_gap_ms"], ".0f"),
                    ]
                )
    return markdown_table(head, body)


def pooled_app_speed_rows(results: list[dict]) -> list[dict]:
    """Several runs of bench_app_speed.py as one: per answer kind and configuration, tokens
    over decode seconds summed over every answer of every run, against the command line's
    pooled the same way; the event loop's gaps are the worst run's."""
    totals: dict[tuple[str, str], dict] = {}
    for result in results:
        for a in result["answers"]:
            t = totals.setdefault(
                (a["kind"], a["config"]),
                {"answers": 0, "differ": 0, "tokens": 0, "decode_s": 0.0, "ui_cpu_s": None},
            )
            t["answers"] += 1
            t["differ"] += not a["same_tokens_as_command_line"]
            t["tokens"] += a["tokens"]
            t["decode_s"] += a["decode_s"]
            if a["ui_cpu_s"] is not None:
                t["ui_cpu_s"] = (t["ui_cpu_s"] or 0.0) + a["ui_cpu_s"]
    worst: dict[tuple[str, str, str], float] = {}  # (kind, config, gap) -> worst run's
    for row in (r for result in results for r in result["rows"]):
        for gap in ("max_gap_ms", "p99_gap_ms"):
            if row[gap] is not None:
                key = (row["kind"], row["config"], gap)
                worst[key] = max(worst.get(key, 0.0), row[gap])
    cli = {
        kind: t["tokens"] / t["decode_s"]
        for (kind, config), t in totals.items()
        if config.startswith("command line")
    }
    return [
        {
            "kind": kind,
            "config": config,
            "answers": t["answers"],
            "differ": t["differ"],
            "tokens": t["tokens"],
            "tok_s": t["tokens"] / t["decode_s"],
            "vs_cli": t["tokens"] / t["decode_s"] / cli[kind],
            "ui_cpu_ms_per_token": None
            if t["ui_cpu_s"] is None
            else t["ui_cpu_s"] * 1000 / t["tokens"],
            "max_gap_ms": worst.get((kind, config, "max_gap_ms")),
            "p99_gap_ms": worst.get((kind, config, "p99_gap_ms")),
        }
        for (kind, config), t in totals.items()
    ]


def render_cost_table(results: list[dict]) -> list[str]:
    """profile_app_render.py's replays side by side (e.g. before and after a change): UI CPU
    ms per streamed token, split by what the UI thread was doing."""
    parts = [*RENDER_CATEGORIES, "other"]
    head = ["run", "kind", "tokens", "updates", "UI CPU ms/token", *parts]
    body = [
        [
            result["label"],
            row["kind"],
            str(row["tokens"]),
            str(row["updates"]),
            f"{row['ui_cpu_ms_per_token']:.2f}",
            *(f"{row['ms_per_token'][c]:.3f}" for c in parts),
        ]
        for result in results
        for row in result["rows"]
    ]
    return markdown_table(head, body)
