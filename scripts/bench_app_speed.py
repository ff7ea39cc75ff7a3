"""Window vs command line: decode speed of answers streamed in the real app window (offscreen,
engine on its worker thread) against the same engine driven directly as `hyflash generate`
does, on the same prompts, per thread count; and how long the window's event loop stalled.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_app_speed.py --out DIR

Every configuration answers every prompt back to back, in alternating order. The window runs
at the app's settings (HyFlash drafter, block size auto, temperature 0.2, top-p 0.9 unless
told otherwise); a 10 ms QTimer records the event loop's gaps while an answer streams. A
benchmark (numbers printed and written), not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def spin(predicate, timeout: float) -> bool:
    """Run the Qt event loop as the app does (exec, idle between events) until predicate()
    holds or the timeout passes; a 50 ms timer checks. A polling loop would keep the UI
    thread busy and steal the CPU and the GIL from the engine thread being measured."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    end = time.monotonic() + timeout

    def check() -> None:
        if predicate() or time.monotonic() > end:
            loop.quit()

    timer = QTimer()
    timer.setInterval(50)
    timer.timeout.connect(check)
    timer.start()
    if not predicate():
        loop.exec()
    timer.stop()
    return bool(predicate())


def window_answer(window, prompt: str, gaps_timer: bool) -> tuple[int, float, list[float]]:
    """(tokens, decode seconds, event-loop gaps in ms: none without the timer) of one answer
    in a fresh chat."""
    from PySide6.QtCore import QElapsedTimer, QTimer

    window.new_conversation()
    gaps: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    last = [clock.elapsed()]

    def tick() -> None:
        now = clock.elapsed()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    if gaps_timer:
        timer.start()
    if not window.send_message(prompt):
        raise RuntimeError("the window did not accept the prompt")
    if not spin(lambda: window.active is None, 600):
        raise RuntimeError("the answer did not finish")
    timer.stop()
    stats = window.last_finished.stats
    return stats.tokens_generated, stats.tokens_generated / stats.tokens_per_s, gaps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="", help="window thread counts (default: 1..cores)")
    p.add_argument("--prompts", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.2)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--drafter", default="hyflash")
    p.add_argument(
        "--switch-intervals",
        default="",
        help="GIL switch intervals (s) to try in the window, e.g. 0.005,0.001 (default: the "
        "app's own)",
    )
    p.add_argument(
        "--update-rates",
        default="",
        help="text/stats updates per second to try in the window, e.g. 30,10 (default: the "
        "app's own)",
    )
    p.add_argument(
        "--no-gap-timer",
        action="store_true",
        help="do not run the 10 ms timer that measures the event loop's gaps",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    default_interval = sys.getswitchinterval()
    intervals = (
        [float(x) for x in args.switch_intervals.split(",")] if args.switch_intervals else []
    )
    rates = [float(x) for x in args.update_rates.split(",") if x]

    cores = os.cpu_count() or 2
    counts = [int(t) for t in args.threads.split(",")] if args.threads else [*range(1, cores + 1)]
    home = Path(tempfile.mkdtemp(prefix="hyflash-app-bench-"))
    os.environ["HYFLASH_CONFIG_DIR"] = str(home / "config")
    os.environ["HYFLASH_DATA_DIR"] = str(home / "data")
    settings = {
        "drafter": args.drafter,
        "block_size": "auto",
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_tokens": args.max_tokens,
    }
    (home / "config").mkdir()
    (home / "data").mkdir()
    (home / "config" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")

    from PySide6.QtWidgets import QApplication

    from app import worker
    from app.main_window import MainWindow
    from app.worker import EngineConfig, EngineHost
    from engine.bench.prompts import CHAT_PROMPTS
    from engine.bench.speed import machine_info, run_once
    from engine.engine import Engine
    from engine.target import default_threads

    default_emit = worker.EMIT_INTERVAL_S
    qapp = QApplication.instance() or QApplication([])
    windows, hosts = {}, []
    for t in counts:
        host = EngineHost()
        host.load(EngineConfig(model=None, drafter=args.drafter, n_threads=t))
        hosts.append(host)
        if not spin(lambda h=host: h.state in ("ready", "failed"), 300) or host.state != "ready":
            raise RuntimeError(f"the window's engine did not load: {host.state_message}")
        window = MainWindow(host=host)
        window.show()
        spin(lambda w=window: w.engine_info is not None, 60)
        name = f"window, {t} thread{'s' * (t > 1)}"
        for interval in intervals or [None]:
            for rate in rates or [None]:
                label = name
                if interval is not None:
                    label += f", GIL switch {interval * 1000:g} ms"
                if rate is not None:
                    label += f", {rate:g} updates/s"
                windows[label] = (window, interval, rate)
    cli_threads = default_threads()
    cli = Engine(None, drafter=args.drafter, n_threads=cli_threads)
    cli_name = f"command line, {cli_threads} threads"
    names = [cli_name, *windows]
    totals = {n: {"tokens": 0, "decode_s": 0.0, "gaps": []} for n in names}
    prompts = CHAT_PROMPTS[: args.prompts]
    for i, prompt in enumerate(prompts):
        for name in names if i % 2 == 0 else names[::-1]:
            if name == cli_name:
                run = run_once(cli, prompt, "auto", args.max_tokens, args.temperature, args.top_p)
                tokens, decode_s, gaps = len(run.tokens), run.decode_s, []
            else:
                window, interval, rate = windows[name]
                sys.setswitchinterval(interval or default_interval)
                worker.EMIT_INTERVAL_S = 1 / rate if rate else default_emit
                tokens, decode_s, gaps = window_answer(window, prompt, not args.no_gap_timer)
                sys.setswitchinterval(default_interval)
                worker.EMIT_INTERVAL_S = default_emit
            totals[name]["tokens"] += tokens
            totals[name]["decode_s"] += decode_s
            totals[name]["gaps"] += gaps
        print(f"prompt {i + 1}/{len(prompts)} done", file=sys.stderr)

    cli_speed = totals[cli_name]["tokens"] / totals[cli_name]["decode_s"]
    rows = []
    for name in names:
        t = totals[name]
        gaps = t["gaps"]
        rows.append(
            {
                "config": name,
                "tokens": t["tokens"],
                "tok_s": t["tokens"] / t["decode_s"],
                "vs_cli": t["tokens"] / t["decode_s"] / cli_speed,
                "max_gap_ms": max(gaps) if gaps else None,
                "p99_gap_ms": float(np.percentile(gaps, 99)) if gaps else None,
            }
        )
    lines = [
        f"{len(prompts)} chat prompts, {args.max_tokens} tokens max, drafter {args.drafter}, "
        f"block size auto, temperature {args.temperature:g}, top-p {args.top_p:g}; "
        f"{machine_info(cli_threads)['cpu']}, {cores} cores; GIL switch interval "
        f"{default_interval * 1000:g} ms unless named.",
        "",
        "| config | tokens | decode tok/s | vs command line | event loop max gap (ms) | p99 |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        gap = "-" if r["max_gap_ms"] is None else f"{r['max_gap_ms']:.0f}"
        p99 = "-" if r["p99_gap_ms"] is None else f"{r['p99_gap_ms']:.0f}"
        lines.append(
            f"| {r['config']} | {r['tokens']} | {r['tok_s']:.1f} | {r['vs_cli']:.2f}x | "
            f"{gap} | {p99} |"
        )
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        result = {
            "machine": machine_info(cli_threads),
            "settings": settings,
            "switch_interval_s": default_interval,
            "rows": rows,
        }
        (out / "app-speed.json").write_text(json.dumps(result, indent=2))
        (out / "app-speed.md").write_text("\n".join(lines) + "\n")
    for window in {w for w, _interval, _rate in windows.values()}:
        window.close()
    for host in hosts:
        host.shutdown()
    cli.close()
    qapp.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
