"""`hyflash` command line: generate and chat here; serve, the benchmarks, download, doctor, the
drafter's data and training commands and speedup come from their own modules."""

from __future__ import annotations

import argparse
import json
import sys
import threading

from engine.bench.provenance import provenance, set_cli_command
from engine.commands.engine_args import (
    add_engine_args,
    add_sampling_args,
    generation_settings,
    load_engine,
)
from engine.events import EngineError, ErrorEvent, Finished, StepStats, TextDelta


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
    settings = generation_settings(args)
    engine = load_engine(args)
    finished: Finished | None = None
    for event in engine.generate(args.prompt, raw=args.raw, system=args.system, settings=settings):
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
            "provenance": provenance(
                target=engine.model_path,
                drafter=args.drafter or engine.drafter.name,
                extra={"threads": engine.target.n_threads},
            ),
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        print()
        if finished.stats:
            print(stats_line(finished.stats), file=sys.stderr)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    settings = generation_settings(args)
    engine = load_engine(args)
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
            for event in engine.generate(messages, settings=settings, cancel=cancel):
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
    add_engine_args(gen)
    add_sampling_args(gen)
    gen.set_defaults(func=cmd_generate)

    chat = sub.add_parser("chat", help="interactive terminal chat")
    chat.add_argument("--system", default=None)
    add_engine_args(chat)
    add_sampling_args(chat)
    chat.set_defaults(func=cmd_chat)

    # every other subcommand's home is engine/commands/<module>.py, which adds it with
    # add_parser(sub); imported here, not at the top, so `hyflash generate` loads none of them
    # (serve's fastapi loads only when serving)
    from engine.commands import (
        acceptance,
        bench,
        doctor,
        download,
        drafter_time,
        results,
        serve,
        speedup,
        training,
    )

    commands = (
        bench,
        acceptance,
        drafter_time,
        doctor,
        download,
        training,
        speedup,
        results,
        serve,
    )
    for command in commands:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    set_cli_command(None if argv is None else ["hyflash", *argv])
    try:
        return args.func(args)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        set_cli_command(None)


if __name__ == "__main__":
    sys.exit(main())
