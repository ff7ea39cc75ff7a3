"""Which prompts and training sequences a command takes: --sources, the evaluation and
long-context prompt sets, the validation split and --source-weight."""

from __future__ import annotations

import argparse
import math

import numpy as np

from engine.bench.corpora import TRAIN_SOURCES


def parse_sources(arg: str | None) -> frozenset[str] | None:
    """--sources: prompt sources (the key's part before '/'), checked against the training
    prompts' sources."""
    if not arg:
        return None
    sources = frozenset(arg.split(","))
    if not sources <= set(TRAIN_SOURCES):
        unknown = ", ".join(sorted(sources - set(TRAIN_SOURCES)))
        raise SystemExit(f"--sources: no training prompts from {unknown}")
    return sources


def selected_prompts(args: argparse.Namespace, target) -> tuple[list, int]:
    """(prompts, longest prompt in tokens): training prompts (first `limit`, of `sources`
    when given), the first `per_set` of every evaluation set, or long-context prompts of one
    bucket."""
    from engine.bench.corpora import eval_prompts, train_prompts

    if args.split == "train":
        return train_prompts(sources=parse_sources(args.sources))[: args.limit], 512
    if args.split == "eval":
        sets = eval_prompts().values()
        return [p for prompts in sets for p in prompts[: args.per_set]][: args.limit], 512
    from engine.bench.longctx import long_prompts, long_training_prompts

    lo, hi = (int(x) for x in args.bucket.split("-"))
    if args.split == "long-train":
        chosen = long_training_prompts(target, lo, hi, args.per_set)
    else:
        chosen = long_prompts(target, lo, hi, args.per_set)
    return [lp.prompt for lp in chosen][: args.limit], hi


def split_val(keys: list[str], frac: float) -> tuple[list[int], list[int]]:
    """A fixed validation split by hash of the prompt key (stable as the corpus grows)."""
    import zlib

    val = [i for i, k in enumerate(keys) if zlib.crc32(k.encode()) % 1000 < frac * 1000]
    chosen = set(val)
    return [i for i in range(len(keys)) if i not in chosen], val


def source_of(key: str) -> str:
    """A corpus key's prompt source: its part before '/' (e.g. gsm8k/12 -> gsm8k)."""
    return key.split("/", 1)[0]


def source_weights(arg: str | None, keys: list[str]) -> np.ndarray | None:
    """--source-weight SRC=W,...: each sequence's sampling weight by its prompt's source (the
    key's part before '/'; unnamed sources weigh 1); None when not given."""
    if not arg:
        return None
    named: dict[str, float] = {}
    for item in arg.split(","):
        source, sep, value = item.partition("=")
        try:
            weight = float(value) if sep else -1.0
        except ValueError:
            weight = -1.0
        if weight < 0 or not math.isfinite(weight):
            raise SystemExit(f"--source-weight: {item!r} is not SOURCE=WEIGHT (a weight >= 0)")
        named[source.strip()] = weight
    present = {source_of(k) for k in keys}
    if missing := sorted(set(named) - present):
        raise SystemExit(f"--source-weight: no training sequences from {', '.join(missing)}")
    weights = np.array([named.get(source_of(k), 1.0) for k in keys])
    if not weights.sum() > 0:
        raise SystemExit("--source-weight: every sequence weighs 0")
    return weights
