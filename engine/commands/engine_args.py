"""Command-line options of the commands that load a model (generate, chat, serve) and the
engine they load: shared by engine/commands/cli.py and engine/commands/serve.py."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from engine.events import DEFAULT_N_CTX, EngineError, GenerationSettings
from engine.llama.kernels import add_kernel_args, kernel_kwargs
from engine.options import DEFAULT_DRAFTER, FALLBACK_DRAFTER, OPTIONS

if TYPE_CHECKING:
    from engine.engine import Engine

CLI_OPTIONS = tuple(o for o in OPTIONS if o.type is not None)  # all but the server's stop


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", default=None, help="catalog id or path to a .gguf (default: embedded)"
    )
    p.add_argument(
        "--drafter",
        default=None,
        help="none | ngram | hyflash | PATH | model:ID|GGUF (a draft model) "
        f"(default: {DEFAULT_DRAFTER} where the model has one, else {FALLBACK_DRAFTER})",
    )
    p.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX, help="context length in tokens")
    p.add_argument(
        "--threads", type=int, default=None, help="CPU threads (default: one per CPU, at most 8)"
    )
    add_kernel_args(p)


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    """One flag per generation option (engine.options), at the engine's defaults."""
    for option in CLI_OPTIONS:
        p.add_argument(
            option.flag,
            type=option.type,
            default=option.default,
            help=f"{option.help} [{option.range}; default: %(default)s]",
        )


def generation_settings(args: argparse.Namespace) -> GenerationSettings:
    """The options of add_sampling_args as engine settings. Values no generation can use
    raise EngineError with GenerationSettings' message (the CLI prints it), before a model is
    loaded for nothing."""
    try:
        return GenerationSettings(**{o.name: getattr(args, o.name) for o in CLI_OPTIONS})
    except ValueError as exc:
        raise EngineError(str(exc)) from None


def load_engine(args: argparse.Namespace) -> Engine:
    """The engine of add_engine_args' options, loaded and timed once, then given its drafter:
    --drafter's, else the HyFlash drafter, or the n-gram one (with a note on stderr) where
    the model has none."""
    from engine.engine import Engine  # llama.cpp loads only for commands that generate

    engine = Engine(
        args.model,
        drafter=args.drafter or DEFAULT_DRAFTER,
        fallback=None if args.drafter else FALLBACK_DRAFTER,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        **kernel_kwargs(args),
    )
    if engine.drafter_note:
        print(f"note: {engine.drafter_note}", file=sys.stderr)
    return engine
