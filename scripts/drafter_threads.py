"""Propose and observe time of a HyFlash drafter folder at onnxruntime intra-op threads 1 and
2, in interleaved rounds (the median of each round's median), on one real prompt's features.

    .venv/bin/python scripts/drafter_threads.py resources/drafters/hyflash-smollm2-135m
"""

from __future__ import annotations

import sys

import numpy as np

from engine.bench.drafter_time import PROMPT, median_ms
from engine.drafters.hyflash import HyFlashDrafter
from engine.engine import Engine


def main(folder: str, rounds: int = 7, calls: int = 100) -> None:
    engine = Engine(None, drafter="ngram", n_threads=2, profile=False)
    target = engine.target
    tokens = engine.chat_tokens([{"role": "user", "content": PROMPT}])
    drafters = {n: HyFlashDrafter.load(folder, target, threads=n) for n in (1, 2)}
    target.reset()
    target.set_features(True, drafters[1].feature_layers)
    target.prefill(tokens)
    features = target.features(0, len(tokens) - 1)
    for drafter in drafters.values():
        drafter.reset()
        drafter.observe(tokens[:-1], features)
    anchor = tokens[-1]
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(rounds):
        for threads, d in drafters.items():
            for n in (3, 7, 15):
                ms = median_ms(lambda d=d, n=n: d.propose(anchor, n, with_logits=False), calls)
                times.setdefault((threads, f"propose {n}"), []).append(ms)
            # one committed token (the context grows by `calls` tokens: no change in cost)
            ms = median_ms(lambda d=d: d.observe([anchor], features[-1:]), calls)
            times.setdefault((threads, "observe 1"), []).append(ms)
    print("| call | 1 thread | 2 threads |\n|---|---|---|")
    for call in ("propose 3", "propose 7", "propose 15", "observe 1"):
        one, two = (float(np.median(times[(n, call)])) for n in (1, 2))
        print(f"| {call} | {one:.2f} ms | {two:.2f} ms |")


if __name__ == "__main__":
    main(sys.argv[1])
