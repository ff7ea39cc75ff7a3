"""`hyflash` command line: generate, chat, bench (and more subcommands as they land)."""

from __future__ import annotations

import argparse
import json
import sys
import threading

from engine.events import (
    EngineError,
    ErrorEvent,
    Finished,
    GenerationSettings,
    StepStats,
    TextDelta,
)
from engine.kernels import add_kernel_args, kernel_kwargs


def _block_size(value: str) -> int | str:
    return "auto" if value == "auto" else int(value)


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", default=None, help="catalog id or path to a .gguf (default: embedded)"
    )
    p.add_argument(
        "--drafter",
        default=None,
        help="none | ngram | hyflash | PATH (default: hyflash where one is shipped for the "
        "model, else ngram)",
    )
    p.add_argument("--n-ctx", type=int, default=4096, help="context length in tokens")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    add_kernel_args(p)


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--block-size", type=_block_size, default="auto", help="N (1..32) or auto")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--seed", type=int, default=None)


def _settings(args: argparse.Namespace) -> GenerationSettings:
    return GenerationSettings(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        block_size=args.block_size,
    )


def _load_engine(args: argparse.Namespace):
    from engine.engine import Engine
    from engine.events import DrafterMismatchError

    def load(drafter: str):
        return Engine(
            args.model,
            drafter=drafter,
            n_ctx=args.n_ctx,
            n_threads=args.threads,
            **kernel_kwargs(args),
        )

    if args.drafter is not None:
        return load(args.drafter)
    try:
        return load("hyflash")
    except DrafterMismatchError as exc:
        print(f"note: {exc} Using the n-gram drafter.", file=sys.stderr)
        return load("ngram")


def stats_line(s: StepStats) -> str:
    return (
        f"tau {s.tau_mean:.2f} | {s.tokens_per_s:.1f} tok/s | TTFT {s.ttft_s * 1000:.0f} ms | "
        f"block {s.block_size} ({s.block_size_mode}) | KV {s.target_kv_bytes / 2**20:.1f} MiB | "
        f"draft {s.draft_memory_bytes / 2**20:.2f} MiB"
    )


def cmd_generate(args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        print("error: the prompt is empty", file=sys.stderr)
        return 2
    engine = _load_engine(args)
    finished: Finished | None = None
    for event in engine.generate(
        args.prompt, raw=args.raw, system=args.system, settings=_settings(args)
    ):
        if isinstance(event, TextDelta) and not args.json:
            sys.stdout.write(event.text)
            sys.stdout.flush()
        elif isinstance(event, ErrorEvent):
            print(f"error: {event.message}", file=sys.stderr)
            return 2
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None
    if args.json:
        out = {
            "text": finished.text,
            "tokens": list(finished.token_ids),
            "stop_reason": finished.stop_reason,
            "prompt_tokens": finished.prompt_tokens,
            "model": engine.model_id,
            "drafter": engine.drafter.name,
            "kernels": list(engine.kernels.summary()),
            "verify_reason": engine.verify.reason,
            "stats": finished.stats.to_dict() if finished.stats else None,
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        print()
        if finished.stats:
            print(stats_line(finished.stats), file=sys.stderr)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    engine = _load_engine(args)
    info = engine.info()
    print(f"HyFlash chat — {info.model_id}, drafter {info.drafter}. Empty line or Ctrl-D quits.")
    messages: list[dict] = []
    if args.system:
        messages.append({"role": "system", "content": args.system})
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if not line.strip():
            return 0
        messages.append({"role": "user", "content": line})
        cancel = threading.Event()
        answer = ""
        try:
            for event in engine.generate(messages, settings=_settings(args), cancel=cancel):
                if isinstance(event, TextDelta):
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
                elif isinstance(event, ErrorEvent):
                    print(f"\nerror: {event.message}")
                    messages.pop()
                    break
                elif isinstance(event, Finished):
                    answer = event.text
                    print()
                    if event.stats:
                        print(f"[{stats_line(event.stats)}]")
        except KeyboardInterrupt:
            cancel.set()
            print("\n[stopped]")
        if answer:
            messages.append({"role": "assistant", "content": answer})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hyflash", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="answer one prompt")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--raw", action="store_true", help="no chat template: plain completion")
    gen.add_argument("--system", default=None)
    gen.add_argument("--json", action="store_true", help="print one JSON object")
    _add_engine_args(gen)
    _add_sampling_args(gen)
    gen.set_defaults(func=cmd_generate)

    chat = sub.add_parser("chat", help="interactive terminal chat")
    chat.add_argument("--system", default=None)
    _add_engine_args(chat)
    _add_sampling_args(chat)
    chat.set_defaults(func=cmd_chat)

    from engine.bench.acceptance import add_acceptance_parser
    from engine.bench.drafter_time import add_drafter_time_parser
    from engine.bench.speed import add_bench_parser
    from engine.doctor import add_doctor_parser
    from engine.downloads import add_download_parser
    from engine.hyflash.commands import add_data_parser, add_train_parsers
    from engine.server.cli import add_serve_parser  # fastapi loads only when serving

    add_bench_parser(sub)
    add_acceptance_parser(sub)
    add_drafter_time_parser(sub)
    add_doctor_parser(sub)
    add_download_parser(sub)
    add_data_parser(sub)
    add_train_parsers(sub)
    add_serve_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
