"""Window vs command line: decode speed of answers streamed in the real app window (offscreen,
engine on its worker thread) against the same engine driven directly as `hyflash generate`
does, on the same prompts, per answer kind and thread count; how much CPU the window's UI
thread spent per streamed token; and how long the window's event loop stalled.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_app_speed.py --out DIR

Answer kinds (--kinds): chat (short chat answers), code (code-heavy answers with long fenced
blocks) and long (800+ token answers, prose and code mixed); each has its own prompts and
token limit. Every configuration answers every prompt back to back, in alternating order. The
window runs at the app's settings (HyFlash drafter, block size auto, temperature 0.2, top-p
0.9 unless told otherwise); a 10 ms QTimer records the event loop's gaps while an answer
streams, and the UI thread's CPU time (time.thread_time in the UI thread) is read around each
answer. With --temperature 0 both sides decode greedily, so every configuration must write
the same tokens for a prompt: the answers whose token ids differ from the command line's are
counted (column "differ") and listed in the JSON. A benchmark (numbers printed and written),
not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

CODE_PROMPTS = [
    "Write a Python class for a stack with push, pop and peek, then an example.",
    "Write a Python function that reads a CSV file into a list of dictionaries, with error "
    "handling, type hints and a docstring, then show how to call it.",
    "Write a JavaScript debounce function with comments, and an example of using it.",
    "Write a Python script that counts the words in a text file and prints the ten most "
    "common ones, using argparse and collections.Counter.",
    "Write a Python function for binary search on a sorted list, with tests using pytest.",
    "Write an HTML page with a form and a JavaScript function that validates its email field.",
]
LONG_PROMPTS = [
    "Write a long tutorial on Python decorators. For each of these six topics write a "
    "paragraph of explanation followed by a complete code example: a simple decorator, "
    "decorators with arguments, functools.wraps, class decorators, stacking decorators, and "
    "a caching decorator.",
    "Explain in detail how the Internet works: write many paragraphs about packets, routing, "
    "DNS, TCP and HTTP, with a few bulleted lists and nested lists.",
    "Write a detailed guide to sorting algorithms: for bubble sort, insertion sort, merge sort "
    "and quicksort, explain how each works in a few paragraphs, give its complexity in a "
    "bulleted list, and show a complete Python implementation.",
]
KIND_MAX_TOKENS = {"chat": 200, "code": 400, "long": 900}


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


def window_answer(
    window, prompt: str, gaps_timer: bool
) -> tuple[tuple[int, ...], float, list[float], float]:
    """(token ids, decode seconds, event-loop gaps in ms: none without the timer, UI-thread CPU
    seconds) of one answer in a fresh chat."""
    from app.loop_gaps import LoopGaps

    window.new_conversation()
    loop = LoopGaps()
    if gaps_timer:
        loop.start()
    cpu0 = time.thread_time()  # this is the UI thread: it runs the window's event loop
    if not window.send_message(prompt):
        raise RuntimeError("the window did not accept the prompt")
    if not spin(lambda: window.answers.active is None, 600):
        raise RuntimeError("the answer did not finish")
    ui_cpu = time.thread_time() - cpu0
    loop.stop()
    fin = window.answers.last_finished
    decode_s = fin.stats.tokens_generated / fin.stats.tokens_per_s
    return fin.token_ids, decode_s, loop.gaps, ui_cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="", help="window thread counts (default: 1..cores)")
    p.add_argument("--kinds", default="chat,code,long", help="answer kinds to run")
    p.add_argument("--prompts", type=int, default=6, help="chat prompts")
    p.add_argument("--code-prompts", type=int, default=len(CODE_PROMPTS), help="code prompts")
    p.add_argument("--long-prompts", type=int, default=len(LONG_PROMPTS), help="long prompts")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="token limit of every answer (default: chat 200, code 400, long 900)",
    )
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
        "--stats-rates",
        default="",
        help="stats panel updates per second to try in the window, e.g. 10,4 (default: the "
        "app's own)",
    )
    p.add_argument(
        "--ui-nice",
        type=int,
        default=0,
        help="raise the UI thread's nice value by this much once the engines are loaded (Linux)",
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
    stats_rates = [float(x) for x in args.stats_rates.split(",") if x]
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(kinds) - set(KIND_MAX_TOKENS):
        p.error(f"unknown answer kinds: {', '.join(sorted(unknown))}")

    from engine.llama.machine_probe import usable_cores

    cores = usable_cores()  # `taskset -c 0` measures a 1-core machine
    counts = [int(t) for t in args.threads.split(",")] if args.threads else [*range(1, cores + 1)]
    home = Path(tempfile.mkdtemp(prefix="hyflash-app-bench-"))
    os.environ["HYFLASH_CONFIG_DIR"] = str(home / "config")
    os.environ["HYFLASH_DATA_DIR"] = str(home / "data")
    settings = {
        "drafter": args.drafter,
        "block_size": "auto",
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_tokens": args.max_tokens or KIND_MAX_TOKENS["chat"],  # each kind sets its own
    }
    (home / "config").mkdir()
    (home / "data").mkdir()
    (home / "config" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")

    from PySide6.QtWidgets import QApplication

    from app import worker
    from app.main_window import MainWindow
    from app.worker import EngineConfig, EngineHost
    from engine.bench.app_tables import app_speed_table
    from engine.bench.prompts import CHAT_PROMPTS
    from engine.bench.provenance import provenance
    from engine.bench.speed import machine_info, run_once
    from engine.engine import Engine
    from engine.llama.target import default_threads

    default_emit, default_stats = worker.EMIT_INTERVAL_S, worker.STATS_INTERVAL_S
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
        spin(lambda w=window: w.engine_link.info is not None, 60)
        name = f"window, {t} thread{'s' * (t > 1)}"
        for interval in intervals or [None]:
            for rate in rates or [None]:
                for stats_rate in stats_rates or [None]:
                    label = name
                    if interval is not None:
                        label += f", GIL switch {interval * 1000:g} ms"
                    if rate is not None:
                        label += f", {rate:g} updates/s"
                    if stats_rate is not None:
                        label += f", stats {stats_rate:g}/s"
                    windows[label] = (window, interval, rate, stats_rate)
    cli_threads = default_threads()
    cli = Engine(None, drafter=args.drafter, n_threads=cli_threads)
    cli_name = f"command line, {cli_threads} threads"
    names = [cli_name, *windows]
    prompt_sets = {
        "chat": CHAT_PROMPTS[: args.prompts],
        "code": CODE_PROMPTS[: args.code_prompts],
        "long": LONG_PROMPTS[: args.long_prompts],
    }
    totals = {
        (kind, n): {
            "tokens": 0,
            "decode_s": 0.0,
            "gaps": [],
            "ui_cpu_s": 0.0,
            "answers": 0,
            "differ": 0,
        }
        for kind in kinds
        for n in names
    }
    answers = []  # one record per answer: what it wrote and how fast
    i = 0
    for kind in kinds:
        max_tokens = args.max_tokens or KIND_MAX_TOKENS[kind]
        for prompt in prompt_sets[kind]:
            written, records = {}, {}
            for name in names if i % 2 == 0 else names[::-1]:
                t = totals[(kind, name)]
                ui_cpu = None
                if name == cli_name:
                    run = run_once(cli, prompt, "auto", max_tokens, args.temperature, args.top_p)
                    token_ids, decode_s, gaps = tuple(run.tokens), run.decode_s, []
                else:
                    window, interval, rate, stats_rate = windows[name]
                    window.settings.max_tokens = max_tokens
                    sys.setswitchinterval(interval or default_interval)
                    worker.EMIT_INTERVAL_S = 1 / rate if rate else default_emit
                    worker.STATS_INTERVAL_S = 1 / stats_rate if stats_rate else default_stats
                    # Linux renices one thread by its id; only while the window answers, as
                    # the command line decodes on this thread too
                    ui_thread = threading.get_native_id()
                    os.setpriority(os.PRIO_PROCESS, ui_thread, args.ui_nice)
                    token_ids, decode_s, gaps, ui_cpu = window_answer(
                        window, prompt, not args.no_gap_timer
                    )
                    os.setpriority(os.PRIO_PROCESS, ui_thread, 0)
                    sys.setswitchinterval(default_interval)
                    worker.EMIT_INTERVAL_S = default_emit
                    worker.STATS_INTERVAL_S = default_stats
                    t["ui_cpu_s"] += ui_cpu
                written[name] = token_ids
                t["tokens"] += len(token_ids)
                t["decode_s"] += decode_s
                t["gaps"] += gaps
                t["answers"] += 1
                records[name] = {
                    "kind": kind,
                    "prompt": prompt,
                    "config": name,
                    "tokens": len(token_ids),
                    "decode_s": decode_s,
                    "ui_cpu_s": ui_cpu,
                }
            for name, record in records.items():
                same = written[name] == written[cli_name]
                record["same_tokens_as_command_line"] = same
                totals[(kind, name)]["differ"] += not same
                answers.append(record)
            i += 1
            print(f"{kind} prompt {i} done", file=sys.stderr)

    rows = []
    for kind in kinds:
        cli_t = totals[(kind, cli_name)]
        cli_speed = cli_t["tokens"] / cli_t["decode_s"]
        for name in names:
            t = totals[(kind, name)]
            gaps = t["gaps"]
            window_row = name != cli_name
            rows.append(
                {
                    "kind": kind,
                    "config": name,
                    "answers": t["answers"],
                    "differ": t["differ"],
                    "tokens": t["tokens"],
                    "tok_s": t["tokens"] / t["decode_s"],
                    "vs_cli": t["tokens"] / t["decode_s"] / cli_speed,
                    "ui_cpu_ms_per_token": t["ui_cpu_s"] * 1000 / t["tokens"]
                    if window_row
                    else None,
                    "max_gap_ms": max(gaps) if gaps else None,
                    "p99_gap_ms": float(np.percentile(gaps, 99)) if gaps else None,
                }
            )
    limits = ", ".join(f"{k} {args.max_tokens or KIND_MAX_TOKENS[k]}" for k in kinds)
    lines = [
        f"{', '.join(f'{len(prompt_sets[k])} {k}' for k in kinds)} prompts, tokens max: "
        f"{limits}; drafter {args.drafter}, block size auto, temperature "
        f"{args.temperature:g}, top-p {args.top_p:g}; {machine_info(cli_threads)['cpu']}, "
        f"{cores} cores; GIL switch interval {default_interval * 1000:g} ms unless named"
        + (f"; UI thread nice +{args.ui_nice}." if args.ui_nice else "."),
        "",
        *app_speed_table([(None, rows)]),
    ]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        result = {
            "provenance": provenance(
                [sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
                drafter=args.drafter,
                extra={"threads": cli_threads},
            ),
            "machine": machine_info(cli_threads),
            "settings": settings,
            "kinds": {
                k: {"prompts": prompt_sets[k], "max_tokens": args.max_tokens or KIND_MAX_TOKENS[k]}
                for k in kinds
            },
            "switch_interval_s": default_interval,
            "rows": rows,
            "answers": answers,
        }
        (out / "app-speed.json").write_text(json.dumps(result, indent=2))
        (out / "app-speed.md").write_text("\n".join(lines) + "\n")
    for window in {w for w, *_options in windows.values()}:
        window.close()
    for host in hosts:
        host.shutdown()
    cli.close()
    qapp.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
