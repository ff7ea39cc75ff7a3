"""`hyflash acceptance`: drafters walked over held-out greedy answers
(engine.training.acceptance)."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from engine.bench.report import publish
from engine.paths import DISTILL_ROOT, default_answers_path
from engine.training.acceptance import run, to_markdown


def cmd_acceptance(args: argparse.Namespace) -> int:
    if not args.answers:
        from engine.models.resolve import resolve_target

        args.answers = [str(default_answers_path(resolve_target(args.model)[0], "eval", ""))]
    result = run(args)
    folder = publish(result, to_markdown(result), args.out, "acceptance")
    if folder is not None:
        from engine.bench.plots import plot_acceptance, plot_context

        plot_acceptance(result, folder)
        if len(result["answers"]) > 1:
            plot_context(result, folder)
    if not all(np.isfinite(r["tau"]) and r["tau"] >= 1.0 for r in result["rows"]):
        print("FAILED: a tau was not finite or below 1", file=sys.stderr)
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "acceptance", help="tau of drafters walked over held-out greedy answers (no target runs)"
    )
    p.add_argument(
        "--drafter",
        action="append",
        required=True,
        help="LABEL=SPEC, SPEC = ngram | drafter folder | hybrid:folder | model:ID (repeatable)",
    )
    p.add_argument(
        "--answers",
        action="append",
        default=None,
        help="greedy answers JSONL (repeatable: one column per file; default "
        f"{DISTILL_ROOT}/<model id>/eval_answers.jsonl)",
    )
    p.add_argument("--blocks", default="4,8,16")
    p.add_argument("--limit", type=int, default=None, help="first N answers")
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--model", default=None)
    p.add_argument("--cache", default=None, help="feature cache folder")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="folder for acceptance.json and acceptance.md")
    p.set_defaults(func=cmd_acceptance)
