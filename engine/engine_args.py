"""Command-line options of the commands that load a model (generate, chat, serve) and the
engine they load: shared by engine/cli.py and engine/server/cli.py."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from engine.events import (
    DEFAULT_N_CTX,
    MAX_BLOCK_SIZE,
    DrafterMismatchError,
    EngineError,
    GenerationSettings,
)
from engine.kernels import add_kernel_args, kernel_kwargs

if TYPE_CHECKING:
    from engine.engine import Engine

_DEFAULTS = GenerationSettings()
BLOCK_SIZE_HELP = f"N (1..{MAX_BLOCK_SIZE}) or auto"


def block_size_arg(value: str) -> int | str:
    """The type of --block-size: 'auto' or a number (its range is checked where it is used)."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"block size must be 'auto' or a number, not {value!r}"
        ) from None


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", default=None, help="catalog id or path to a .gguf (default: embedded)"
    )
    p.add_argument(
        "--drafter",
        default=None,
        help="none | ngram | hyflash | PATH (default: hyflash where one is shipped for the "
        "model, else ngram)",
    )
    p.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX, help="context length in tokens")
    p.add_argument(
        "--threads", type=int, default=None, help="CPU threads (default: one per CPU, at most 8)"
    )
    add_kernel_args(p)


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--block-size", type=block_size_arg, default=_DEFAULTS.block_size, help=BLOCK_SIZE_HELP
    )
    p.add_argument("--temperature", type=float, default=_DEFAULTS.temperature)
    p.add_argument("--top-p", type=float, default=_DEFAULTS.top_p)
    p.add_argument("--top-k", type=int, default=_DEFAULTS.top_k)
    p.add_argument("--max-tokens", type=int, default=_DEFAULTS.max_tokens)
    p.add_argument("--seed", type=int, default=_DEFAULTS.seed)


def generation_settings(args: argparse.Namespace) -> GenerationSettings:
    """The options of add_sampling_args as engine settings. Values no generation can use
    raise EngineError with GenerationSettings' message (the CLI prints it), before a model is
    loaded for nothing."""
    try:
        return GenerationSettings(
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
            block_size=args.block_size,
        )
    except ValueError as exc:
        raise EngineError(str(exc)) from None


def load_engine(args: argparse.Namespace) -> Engine:
    """The engine of add_engine_args' options; without --drafter, the shipped HyFlash drafter
    where the model has one, else the n-gram drafter."""
    from engine.engine import Engine

    def load(drafter: str) -> Engine:
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
