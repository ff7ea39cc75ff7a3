"""The generation options, in one table: name, type, range, default and help, and what each
surface starts from when its user says nothing. GenerationSettings (engine.events) checks its
values against these rows; the CLI's flags (engine.commands.engine_args), the server's request
fields (engine.server.protocol) and the app's settings and dialog (app.settings) are built from
them.
Standard library only: every surface imports it without loading llama.cpp.

Why the surfaces' defaults differ:
- The engine and its CLI decode greedily (temperature 0): the output is then plain
  decoding's token for token, which is what `hyflash generate` is used to check and time.
- The app samples lightly (temperature 0.2, top-p 0.9): a chat answer reads better with a
  little variety, and top-p keeps the rare tokens that variety would let in out.
- The server takes OpenAI's defaults (temperature 1, top-p 1; a chat answer may fill the
  context, a text completion stops at 16 tokens), so a client written for OpenAI's API gets
  what it expects; its temperature stops at OpenAI's 2.
- Drafter: the CLI, the server and the app all ask for the HyFlash drafter and fall back to
  the n-gram one where none fits the model (Engine.set_drafter's fallback; the model is loaded
  once either way). `Engine(...)` itself defaults to the n-gram drafter: a library caller
  (tests, benchmarks) gets a drafter that needs no files and fits every model.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral, Real

MAX_BLOCK_SIZE = 32  # the largest block (anchor + drafts) one target decode verifies
DEFAULT_MAX_BLOCK = 16  # the largest block the engine verifies unless told otherwise
DEFAULT_DRAFTER = "hyflash"  # what the CLI, the server and the app ask for
FALLBACK_DRAFTER = "ngram"  # needs no files and fits every model
COMPLETIONS_MAX_TOKENS = 16  # the server's max tokens for /v1/completions (OpenAI's)
# llama.cpp's extra buffer types (auto: the kernel check decides) and how verified blocks are
# split for exactness (engine.llama.kernels), as the CLI, the app and the environment name them.
EXTRA_BUFTS = ("auto", "on", "off")
VERIFY_MODES = ("auto", "exact", "fast")


def _is_int(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def block_size_arg(value: str) -> int | str:
    """A block size as typed on a command line: 'auto' or a number (the range is the row's)."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"block size must be 'auto' or a number, not {value!r}"
        ) from None


class _NotOffered:
    def __repr__(self) -> str:
        return "NOT_OFFERED"


NOT_OFFERED = _NotOffered()  # a surface that has no such option (the engine's default applies)

Rule = tuple[Callable[[object], bool], str]  # (test, what a value must be)


@dataclass(frozen=True)
class Option:
    """One generation option. `rules` are checked in order; the first a value fails gives
    GenerationSettings' one-line message "<label> must be <what>, not <value>"."""

    name: str  # GenerationSettings' field
    label: str  # as messages and the app name it
    type: Callable[[str], object] | None  # a command-line value -> the option's (None: no flag)
    rules: tuple[Rule, ...]
    help: str
    default: object  # the engine's and the CLI's
    app: object = NOT_OFFERED  # the app's default
    server: object = NOT_OFFERED  # the server's, for a request that leaves it out
    app_max: int | float | None = None  # where the app's range stops short of the engine's
    server_max: int | float | None = None  # where the server's does (OpenAI's limits)

    @property
    def range(self) -> str:
        return " and ".join(what for _test, what in self.rules)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def problem(self, value: object) -> str | None:
        """GenerationSettings' message for `value`, or None when it is acceptable."""
        for test, what in self.rules:
            if not test(value):
                return f"{self.label} must be {what}, not {value!r}"
        return None


def _block_size(value: object) -> bool:
    if isinstance(value, str):
        return value == "auto"  # "4" is refused, not read: the type is checked
    return _is_int(value) and 1 <= value <= MAX_BLOCK_SIZE


OPTIONS = (
    Option(
        "block_size",
        "block size",
        block_size_arg,
        ((_block_size, f"'auto' or 1..{MAX_BLOCK_SIZE}"),),
        "tokens one target decode verifies (drafts + 1); 1 = plain decoding, auto = chosen "
        "per step from this machine's measured verify cost",
        default="auto",
        app="auto",
        server="auto",
        # the engine the app loads caps its auto chooser here (its verify plan covers up to
        # MAX_BLOCK_SIZE, which a fixed block size reaches)
        app_max=DEFAULT_MAX_BLOCK,
    ),
    Option(
        "temperature",
        "temperature",
        float,
        (
            (lambda v: _is_number(v) and v >= 0, "0 (greedy) or more"),  # also refuses NaN
            (lambda v: not math.isinf(v), "finite"),
        ),
        "how freely tokens are sampled: 0 = greedy, always the most likely token",
        default=0.0,
        app=0.2,
        server=1.0,
        app_max=2.0,  # past 2 answers are noise
        server_max=2.0,  # OpenAI's limit
    ),
    Option(
        "top_p",
        "top-p",
        float,
        ((lambda v: _is_number(v) and 0 < v <= 1, "above 0 and at most 1"),),
        "sample from the most likely tokens whose probabilities add up to this (1 = all)",
        default=1.0,
        app=0.9,
        server=1.0,
    ),
    Option(
        "top_k",
        "top-k",
        int,
        ((lambda v: _is_int(v) and v >= 0, "0 (off) or more"),),
        "sample from the k most likely tokens only",
        default=0,
    ),
    Option(
        "max_tokens",
        "max tokens",
        int,
        ((lambda v: _is_int(v) and v >= 1, "at least 1"),),
        "the longest answer, in tokens",
        default=512,
        app=512,
        server=None,  # a chat answer may fill the context; completions: COMPLETIONS_MAX_TOKENS
        app_max=32768,
    ),
    Option(
        "seed",
        "seed",
        int,
        ((lambda v: v is None or _is_int(v), "a whole number or None"),),
        "the sampling seed (none: a fresh random one per answer)",
        default=None,
        server=None,
    ),
    Option(
        "stop",
        "stop",
        None,
        (
            (
                lambda v: isinstance(v, list | tuple) and all(isinstance(s, str) for s in v),
                "a list of strings",
            ),
        ),
        "strings that end the answer where they appear (not included)",
        default=(),
        server=(),
    ),
)
OPTION = {option.name: option for option in OPTIONS}


def defaults(surface: str) -> dict[str, object]:
    """The defaults of a surface ("engine", "app", "server") for the options it offers."""
    if surface == "engine":
        return {o.name: o.default for o in OPTIONS}
    values = {o.name: getattr(o, surface) for o in OPTIONS}
    return {name: value for name, value in values.items() if value is not NOT_OFFERED}
