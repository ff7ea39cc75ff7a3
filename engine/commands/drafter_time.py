"""`hyflash drafter-time`: ms per drafter call beside a target decode
(engine.bench.drafter_time)."""

from __future__ import annotations

import argparse

from engine.bench.drafter_time import run_drafter_time, to_markdown
from engine.bench.report import publish
from engine.llama.backends import BACKEND_NAMES
from engine.llama.kernels import add_kernel_args


def cmd_drafter_time(args: argparse.Namespace) -> int:
    result = run_drafter_time(args)
    publish(result, to_markdown(result), args.out, "drafter-time")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "drafter-time", help="ms per drafter call at each block size, beside a target decode"
    )
    p.add_argument("--model", default=None)
    p.add_argument("--drafter", default="hyflash", help="none | ngram | hyflash | PATH")
    p.add_argument("--blocks", default="4,8,16", help="block sizes B (the call drafts B-1)")
    p.add_argument("--calls", type=int, default=100, help="calls per timing, median taken")
    p.add_argument("--rounds", type=int, default=5, help="rounds over all timings, median")
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--backend", default=None, choices=BACKEND_NAMES, help="default: auto")
    p.add_argument("--out", default=None, help="folder for drafter-time.json and .md")
    add_kernel_args(p)
    p.set_defaults(func=cmd_drafter_time)
