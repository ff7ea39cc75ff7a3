"""The kernel check's child process (see engine.llama.kernels): load one configuration, decode, and
compare batched rows with single-token decodes bit for bit.

    python -m engine.bench.kernel_probe MODEL --out FILE --extra-bufts on|off [--threads N] ...

Writes one JSON line per step to FILE (the parent kills a child that stops writing), the last
one {"step": "done", "exact_upto": B, ...}, or {"step": "error", "kind": K, "message": M} and
exit status 1 for an error: kind "load" when llama.cpp would not load the model file, "error"
otherwise; M is one line, never a traceback. A crash here is the finding, not a bug to hide.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

# Ordinary prose and code, so the rows compared are those of real text.
_CHECK_TEXT = (
    "The committee met on Tuesday to review the budget. After a long discussion, members "
    "agreed to fund the library repairs and to postpone the new bridge until spring.\n"
    "def mean(values):\n    total = sum(values)\n    return total / len(values)\n\n"
    "Question: A train travels 120 km in 1.5 hours. What is its average speed? "
    "Answer: 120 / 1.5 = 80 km/h. "
)
CONTEXTS = (16, 200)  # rows are compared after a short and a longer context
TIMED_ROWS = (1, 2, 4, 8, 16, 32)


def check_tokens(target, n: int) -> list[int]:
    """n ordinary text tokens (the check text repeated as needed)."""
    tokens: list[int] = []
    while len(tokens) < n:
        tokens += target.tokenize(_CHECK_TEXT, add_special=False, parse_special=False)
    return tokens[:n]


def exact_rows(
    target,
    context: Sequence[int],
    block: Sequence[int],
    on_step: Callable[[int, bool], None] | None = None,
) -> tuple[int, float | None]:
    """Largest B such that, after `context`, decoding block[:B'] in one batch gives logit rows
    bit-identical to decoding those tokens one at a time, for every B' <= B; and the max
    |logit difference| at the first B that differs (None if none does). Leaves the target
    holding `context`."""
    target.reset()
    target.prefill(list(context))
    start = target.n_past
    singles = np.stack([target.decode([t]).logits[0] for t in block])
    target.truncate(start)
    for b in range(1, len(block) + 1):
        rows = target.decode(list(block[:b])).logits
        target.truncate(start)
        same = bool(np.array_equal(rows, singles[:b]))
        if on_step is not None:
            on_step(b, same)
        if not same:
            return b - 1, float(np.max(np.abs(rows - singles[:b])))
    return len(block), None


def decode_times_ms(target, tokens: Sequence[int], repeats: int = 5) -> dict[int, float]:
    start = target.n_past
    times = {}
    for n in TIMED_ROWS:
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            target.decode(list(tokens[:n]))
            samples.append(time.perf_counter() - t0)
            target.truncate(start)
        times[n] = round(1000 * float(np.median(samples)), 3)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kernel_probe")
    parser.add_argument("model")
    parser.add_argument("--out", required=True)
    parser.add_argument("--extra-bufts", choices=("on", "off"), required=True)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--gpu-layers", type=int, default=0)
    parser.add_argument("--max-rows", type=int, default=32)
    args = parser.parse_args(argv)
    out = Path(args.out).open("a", encoding="utf-8")

    def write(step: str, **fields) -> None:
        out.write(json.dumps({"step": step, **fields}) + "\n")
        out.flush()

    write("start")
    try:
        _check(args, write, None if argv is None else [sys.argv[0], *argv])
    except Exception as exc:  # noqa: BLE001 - reported to the parent as a kind and one line
        from engine.events import ModelFileError

        kind = "load" if isinstance(exc, ModelFileError) else "error"
        message = str(exc) if kind == "load" else f"{type(exc).__name__}: {exc}"
        write("error", kind=kind, message=" ".join(message.split()))
        return 1
    return 0


def _check(args: argparse.Namespace, write: Callable[..., None], argv: list[str] | None) -> None:
    from engine.bench.provenance import provenance
    from engine.llama.kernels import KernelConfig
    from engine.llama.target import LlamaTarget

    config = KernelConfig(extra_bufts=args.extra_bufts == "on")
    n_ctx = max(CONTEXTS) + args.max_rows + 8
    with LlamaTarget(
        args.model,
        n_ctx=max(n_ctx, 256),
        n_threads=args.threads,
        n_gpu_layers=args.gpu_layers,
        kernels=config,
    ) as target:
        write("loaded")
        target.decode([target.bos_token])
        write("decoded")
        tokens = check_tokens(target, max(CONTEXTS) + args.max_rows)
        exact, diff = args.max_rows, None
        for n in CONTEXTS:
            found, found_diff = exact_rows(
                target,
                tokens[:n],
                tokens[n : n + min(args.max_rows, exact + 1)],  # past the exact B is moot
                lambda b, same, n=n: write("rows", context=n, b=b, same=same),
            )
            if found < exact:
                exact, diff = found, found_diff
        times = decode_times_ms(target, tokens[max(CONTEXTS) :])
        write(
            "done",
            exact_upto=exact,
            checked_rows=args.max_rows,
            max_abs_diff=diff,
            decode_ms=times,
            provenance=provenance(
                argv,
                target=args.model,
                extra={"threads": target.n_threads, "extra_bufts": args.extra_bufts},
            ),
        )


if __name__ == "__main__":
    sys.exit(main())
