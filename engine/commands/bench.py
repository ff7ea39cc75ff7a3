"""`hyflash bench`: plain vs speculative decoding timed in one run (engine.bench.speed)."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from engine.bench.projection import load_curve
from engine.bench.report import publish
from engine.bench.speed import run_bench, to_markdown
from engine.decoding.blocksize import DEFAULT_MAX_BLOCK
from engine.decoding.sampling import check_sampling
from engine.events import DEFAULT_N_CTX, GenerationSettings
from engine.llama.backends import BACKEND_NAMES
from engine.llama.kernels import add_kernel_args

_DEFAULTS = GenerationSettings()


def cmd_bench(args: argparse.Namespace) -> int:
    if args.quick:
        args.max_tokens, args.max_block, args.repeats, args.per_set = 48, 8, 2, 1
        args.prompts = 3 if args.prompt_set == "chat" else args.prompts
    try:  # bad sampling options or a bad curve file fail before the run, not after it
        check_sampling(args.temperature, args.top_p, _DEFAULTS.top_k)
        other = load_curve(args.cost_curve) if args.cost_curve else None
        if args.runs < 1:
            raise ValueError(f"--runs must be at least 1 (got {args.runs})")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    result = run_bench(args, other)
    result["elapsed_s"] = time.perf_counter() - start
    folder = publish(result, to_markdown(result), args.out, "speed")
    if folder is not None:
        from engine.bench.plots import plot_cost_curve

        plot_cost_curve(result, folder)
    bad = [s for s in result["summary"] if not s["identical"]]
    finite = all(np.isfinite(s["tok_s"]) and np.isfinite(s["tau"]) for s in result["summary"])
    if bad or not finite:
        print(
            "FAILED: a drafter's greedy output differed from plain decoding, or a number was "
            "not finite",
            file=sys.stderr,
        )
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="speed: plain vs speculative decoding in one run")
    p.add_argument("--model", default=None)
    p.add_argument("--configs", default="ngram:auto,ngram:2,ngram:4,ngram:8")
    p.add_argument(
        "--prompt-set",
        default="chat",
        choices=["chat", "eval", "repeat", "grounded"],
        help="chat: 28 varied prompts; eval: the held-out sets; repeat: answers that repeat, "
        "quote or edit the prompt's text; grounded: 27 code edits, rewrites and quotes of "
        "20-80-line inputs, by task kind",
    )
    p.add_argument("--prompts", type=int, default=None, help="first N prompts")
    p.add_argument("--per-set", type=int, default=4, help="eval: first N of every set")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--max-block", type=int, default=DEFAULT_MAX_BLOCK)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--runs",
        type=int,
        default=1,
        help="runs of every configuration per prompt; the fastest counts (steadier ratios)",
    )
    p.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX)
    p.add_argument(
        "--temperature",
        type=float,
        default=_DEFAULTS.temperature,
        help="0 = greedy (outputs checked identical)",
    )
    p.add_argument(
        "--top-p", type=float, default=_DEFAULTS.top_p, help="nucleus sampling (the app: 0.9)"
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--backend", default=None, choices=BACKEND_NAMES, help="default: auto")
    add_kernel_args(p)
    p.add_argument("--quick", action="store_true", help="CI-sized run")
    p.add_argument("--out", default=None, help="folder for speed.json and speed.md")
    p.add_argument(
        "--cost-curve",
        default=None,
        metavar="FILE",
        help="also project the speedups onto another machine's T(B)/T(1) curve (JSON: a "
        "speed.json from that machine, or engine/bench/projection.py's format)",
    )
    p.set_defaults(func=cmd_bench)
