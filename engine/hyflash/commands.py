"""`hyflash data ...` (and, with torch installed, training and export) subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_CORPUS = Path("data/distill/smollm2-135m-instruct/answers.jsonl")


def cmd_data_generate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from engine.hyflash.distill import generate_corpus
    from engine.hyflash.prompts import train_prompts
    from engine.models import resolve_target
    from engine.target import LlamaTarget

    _, path = resolve_target(args.model)
    prompts = train_prompts()[: args.limit]
    target = LlamaTarget(path, n_ctx=512, n_threads=args.threads)
    bar = tqdm(total=len(prompts), unit="answer", file=sys.stderr)

    def progress(done: int, total: int, tok_s: float) -> None:
        bar.total = total
        bar.update(1)
        bar.set_postfix(tok_s=f"{tok_s:.0f}")

    try:
        written = generate_corpus(
            target, prompts, Path(args.out), streams=args.streams, max_tokens=args.max_tokens,
            n_threads=args.threads, progress=progress,
        )
    finally:
        bar.close()
        target.close()
    print(f"wrote {written} answers to {args.out}")
    return 0


def add_data_parser(sub) -> None:
    data = sub.add_parser("data", help="self-distillation corpora")
    dsub = data.add_subparsers(dest="data_command", required=True)
    gen = dsub.add_parser("generate", help="the target answers training prompts (resumable)")
    gen.add_argument("--model", default=None)
    gen.add_argument("--out", default=str(DEFAULT_CORPUS))
    gen.add_argument("--limit", type=int, default=None, help="first N training prompts")
    gen.add_argument("--streams", type=int, default=8)
    gen.add_argument("--max-tokens", type=int, default=384)
    gen.add_argument("--threads", type=int, default=None)
    gen.set_defaults(func=cmd_data_generate)
