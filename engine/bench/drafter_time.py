"""`hyflash drafter-time`: how long one drafter call takes, beside a 1-token target decode.

The drafter is fed a real prompt's tokens and target features (one prefill), then each block
size's propose call is timed back to back with the target's own decodes, in rounds, so machine
noise hits them alike. Greedy decoding asks for tokens only; sampling asks for the draft's
logits too (a scatter into the target vocabulary). `observe` is the loop's catch-up of one
committed token. Every number is a median over calls of this run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from engine.bench.provenance import provenance, run_machine
from engine.llama.kernels import kernel_kwargs

PROMPT = (
    "Explain step by step how a hash table handles collisions, with a short Python example "
    "of open addressing and a note on when to resize the table."
)


def median_ms(fn: Callable[[], object], calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return 1000 * float(np.median(samples))


def run_drafter_time(args: argparse.Namespace) -> dict:
    from engine.engine import Engine

    engine = Engine(
        args.model,
        drafter=args.drafter,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        backend=args.backend,
        profile=False,
        **kernel_kwargs(args),
    )
    target, drafter = engine.target, engine.drafter
    tokens = engine.chat_tokens([{"role": "user", "content": PROMPT}])
    target.reset()
    target.set_features(drafter.wants_features, drafter.feature_layers)
    target.prefill(tokens)
    drafter.reset()
    drafter.observe(tokens[:-1], target.features(0, len(tokens) - 1))
    anchor = tokens[-1]
    context = target.n_past
    blocks = [int(b) for b in args.blocks.split(",")]

    def decode(n: int) -> None:
        target.decode([anchor] * n)
        target.truncate(context)

    def observe_one() -> None:
        drafter.observe([anchor], target.features(context - 1, context))

    timers: dict[str, Callable[[], object]] = {"target T(1)": lambda: decode(1)}
    for b in blocks:
        timers[f"target T({b})"] = lambda b=b: decode(b)
        timers[f"greedy B={b}"] = lambda b=b: drafter.propose(anchor, b - 1, with_logits=False)
        timers[f"sampling B={b}"] = lambda b=b: drafter.propose(anchor, b - 1)
    for fn in timers.values():  # warm-up: first calls allocate
        fn()
    samples: dict[str, list[float]] = {name: [] for name in timers}
    plain_t1: list[float] = []  # T(1) with the hidden-state output off, as plain decoding runs
    for _ in range(args.rounds):
        for name, fn in timers.items():
            samples[name].append(median_ms(fn, args.calls))
        target.set_features(False)
        plain_t1.append(median_ms(lambda: decode(1), args.calls))
        target.set_features(drafter.wants_features, drafter.feature_layers)
    # observe grows the drafter's context, so it is timed last, on its own
    observe_ms = median_ms(observe_one, args.calls)
    ms = {name: float(np.median(v)) for name, v in samples.items()}
    t1 = ms["target T(1)"]
    rows = [
        {
            "block": b,
            "greedy_ms": ms[f"greedy B={b}"],
            "sampling_ms": ms[f"sampling B={b}"],
            "greedy_pct_t1": 100 * ms[f"greedy B={b}"] / t1,
            "target_ms": ms[f"target T({b})"],
        }
        for b in blocks
    ]
    info = engine.info()
    result = {
        "provenance": provenance(
            target=engine.model_path, drafter=args.drafter, extra={"threads": target.n_threads}
        ),
        "model": engine.model_id,
        "drafter": info.drafter,
        "backend": info.backend,
        "provider": getattr(drafter, "provider", "python"),
        "weights": getattr(drafter, "weights", ""),
        "context_tokens": context,
        "features": drafter.wants_features,
        "target_t1_ms": t1,
        "target_t1_features_off_ms": float(np.median(plain_t1)),
        "observe_ms": observe_ms,
        "rows": rows,
    }
    engine.close()
    return result


def to_markdown(result: dict) -> str:
    machine = run_machine(result)
    lines = [
        f"Drafter {result['drafter']} ({result['weights'] or 'n/a'}, {result['provider']}) on "
        f"{result['model']} ({result['backend']}), {result['context_tokens']} tokens of context; "
        f"{machine['cpu']}, {machine['threads']} target threads, git {machine['git']}.",
        "",
        *time_table(result),
    ]
    lines.append(
        f"\nTarget T(1) = {result['target_t1_ms']:.2f} ms (hidden-state output "
        f"{'on' if result['features'] else 'off'}; off: "
        f"{result['target_t1_features_off_ms']:.2f} ms); observe of one committed token = "
        f"{result['observe_ms']:.2f} ms."
    )
    return "\n".join(lines)


def time_table(result: dict) -> list[str]:
    """Per block size: the drafter's call, greedy and sampling, beside the target's decode."""
    lines = [
        "| B | propose, greedy (ms) | propose with logits, sampling (ms) | greedy / T(1) "
        "| target T(B) (ms) |",
        "|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['block']} | {r['greedy_ms']:.2f} | {r['sampling_ms']:.2f} | "
            f"{r['greedy_pct_t1']:.0f}% | {r['target_ms']:.2f} |"
        )
    return lines
