"""Acceptance length of drafters as greedy decoding walks it, on held-out greedy answers.

For greedy decoding the target's output is fixed, so a drafter can be judged without running
the target: walk each stored answer as the speculative loop would (propose from the anchor,
accept the longest matching prefix, commit it plus the target's next token, observe the
committed tokens with their target features, repeat). tau = committed tokens / target
decodes, exactly the engine's statistic, at a small fraction of the engine's cost; features
come from one prefill per answer (engine/training/features.py). The engine benchmark
(`hyflash bench`) measures wall-clock speed on the same drafters.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.bench.provenance import provenance, run_machine
from engine.bench.report import markdown_table
from engine.decoding.drafter_protocol import Drafter


@dataclass
class Walk:
    committed: int = 0  # answer tokens committed
    steps: int = 0  # target decodes (verify steps)
    accepted: list[int] = field(default_factory=list)  # drafts accepted per step
    drafter_s: list[float] = field(default_factory=list)  # per step: propose + observe
    reach: list[str] = field(default_factory=list)  # per step: continuation_reach() class
    memory_bytes: int = 0

    @property
    def tau(self) -> float:
        return self.committed / max(self.steps, 1)


NEAR = 64  # tokens: HyFlash's attention window


def continuation_reach(tokens: np.ndarray, near: int = NEAR) -> list[str]:
    """Per anchor position a: where the continuation tokens[a : a + 4] (anchor and the next
    three) last occurred in the committed context tokens[: a + 1]: "near" (starting within
    `near` tokens of the anchor), "distant" (only farther back) or "novel" (nowhere). Steps
    whose continuation is a distant repeat test a drafter's memory of the whole context."""
    seq = [int(t) for t in tokens]
    last: dict[tuple[int, ...], int] = {}
    out = []
    for a in range(len(seq)):
        if a >= 3:
            last[tuple(seq[a - 3 : a + 1])] = a - 3
        j = last.get(tuple(seq[a : a + 4])) if a + 4 <= len(seq) else None
        out.append("novel" if j is None else ("near" if a - j <= near else "distant"))
    return out


def walk_answer(
    drafter: Drafter, tokens: np.ndarray, features: np.ndarray | None, prompt_len: int, block: int
) -> Walk:
    """Walk one answer (tokens = prompt + answer, an end-of-text token included if the answer
    ended so) with block size `block` (block - 1 drafted tokens per step)."""

    def feats(a: int, b: int) -> np.ndarray | None:
        if not drafter.wants_features or features is None:
            return None
        return np.asarray(features[a:b], dtype=np.float32)

    result = Walk()
    reach = continuation_reach(tokens)
    drafter.reset()
    # as in the engine: the prefill stops before the prompt's last token, the first anchor
    drafter.observe(tokens[: prompt_len - 1].tolist(), feats(0, prompt_len - 1))
    a, last = prompt_len - 1, len(tokens) - 1
    while a < last:
        room = min(block - 1, last - a)
        start = time.perf_counter()
        draft = drafter.propose(int(tokens[a]), room, with_logits=False).tokens[:room]
        result.drafter_s.append(time.perf_counter() - start)
        n = 0
        while n < len(draft) and int(draft[n]) == int(tokens[a + 1 + n]):
            n += 1
        result.accepted.append(n)
        result.reach.append(reach[a])
        result.committed += min(n + 1, last - a)
        result.steps += 1
        start = time.perf_counter()
        drafter.observe(tokens[a : a + n + 1].tolist(), feats(a, a + n + 1))
        result.drafter_s[-1] += time.perf_counter() - start  # a step's drafter time
        a += n + 1
    result.memory_bytes = drafter.memory_bytes()
    return result


# ----- command --------------------------------------------------------------------------------


def _target_decode_ms(target, context: int = 256, n: int = 48) -> float:
    """Median time of a 1-token target decode at a realistic context length."""
    target.reset()
    target.prefill([int(t) for t in np.arange(context) % 1000 + 100])
    times = []
    token = 100
    for _ in range(n):
        start = time.perf_counter()
        out = target.decode([token])
        times.append(time.perf_counter() - start)
        token = int(np.argmax(out.logits[-1]))
    return 1000 * float(np.median(times))


def _load_walks_input(args: argparse.Namespace, gguf: Path) -> tuple:
    """(tokens, prompt_lens, keys, file stem) per answer of every --answers file, and
    features_for(layers): their features (with those fused target layers) from the prefill
    cache, computed once per set of layers."""
    from engine.training.features import cache_dir_for, feature_cache, layers_tag, load_corpus

    if args.cache and len(args.answers) > 1:
        raise SystemExit("--cache names one answers file's feature cache; give one --answers")
    tokens, prompt_lens, keys, files, per_file = [], [], [], [], []
    for answers in args.answers:
        t, p, k = load_corpus(Path(answers), args.max_len)
        t, p, k = t[: args.limit], p[: args.limit], k[: args.limit]
        tokens += t
        prompt_lens += p
        keys += k
        files += [Path(answers).stem] * len(t)
        per_file.append((t, k))
    known: dict[tuple[int, ...], list] = {}

    def features_for(layers: tuple[int, ...]) -> list:
        if layers not in known:
            known[layers] = []
            for t, k in per_file:
                cache = cache_dir_for(gguf, k, layers=layers)
                if args.cache:
                    cache = Path(args.cache + (f"-{layers_tag(layers)}" if layers else ""))
                known[layers] += feature_cache(t, gguf, cache, layers=layers)[0]
        return known[layers]

    return tokens, prompt_lens, keys, files, features_for


def _tau(walks: list[Walk]) -> float:
    return sum(w.committed for w in walks) / sum(w.steps for w in walks)


def _summary(walks: list[Walk], block: int, keys: list[str], files: list[str], tokens) -> dict:
    """One table row's numbers: tau overall, per dataset and per answers file, accepted
    drafts by continuation reach, late-slot acceptance, drafter time and memory."""
    by_set: dict[str, list[Walk]] = defaultdict(list)
    by_file: dict[str, list[tuple[Walk, int]]] = defaultdict(list)
    for key, w, f, t in zip(keys, walks, files, tokens, strict=True):
        by_set[key.split("/", 1)[0]].append(w)
        by_file[f].append((w, len(t)))
    propose = [s for w in walks for s in w.drafter_s]
    hist = np.bincount([n for w in walks for n in w.accepted], minlength=block)
    by_reach: dict[str, list[int]] = defaultdict(list)
    for w in walks:
        for n, r in zip(w.accepted, w.reach, strict=True):
            by_reach[r].append(n)
    # P(slot k accepted) for the second half of the block's slots
    at_least = hist[::-1].cumsum()[::-1] / max(hist.sum(), 1)
    late = at_least[max(1, block // 2) : block]
    return {
        "tau": _tau(walks),
        "per_set_tau": {s: _tau(ws) for s, ws in sorted(by_set.items())},
        "per_file": {
            f: {
                "tau": _tau([w for w, _ in ws]),
                "context_tokens_mean": float(np.mean([n for _, n in ws])),
                "memory_bytes_max": max(w.memory_bytes for w, _ in ws),
            }
            for f, ws in by_file.items()
        },
        "accepted_histogram": hist.tolist(),
        # mean drafts accepted per step, by where the continuation occurred
        "accepted_by_reach": {
            r: {"steps": len(ns), "mean_accepted": float(np.mean(ns))}
            for r, ns in sorted(by_reach.items())
        },
        "late_slot_accept": float(np.mean(late)) if len(late) else 0.0,
        "drafter_ms": 1000 * float(np.median(propose)),
        "memory_bytes_max": max(w.memory_bytes for w in walks),
    }


def run(args: argparse.Namespace) -> dict:
    from engine.drafters.make import make_drafter
    from engine.llama.target import LlamaTarget
    from engine.models.resolve import resolve_target

    model_id, gguf = resolve_target(args.model)
    tokens, prompt_lens, keys, files, features_for = _load_walks_input(args, gguf)
    blocks = [int(b) for b in args.blocks.split(",")]
    specs = [s.split("=", 1) if "=" in s else [s, s] for s in args.drafter]
    rows = []
    # a draft model drafts in a context as long as the target's: room for the longest answer
    n_ctx = max(512, args.max_len + 8)
    with LlamaTarget(gguf, n_ctx=n_ctx, n_threads=args.threads) as target:
        threads = target.n_threads  # for the record: the default when --threads is not given
        decode_ms = _target_decode_ms(target)
        for label, spec in specs:
            drafter = make_drafter(spec, model_id, target)
            feats = (
                features_for(drafter.feature_layers)
                if drafter.wants_features
                else [None] * len(tokens)
            )
            for block in blocks:
                walks = [
                    walk_answer(drafter, t, f, p, block)
                    for t, f, p in zip(tokens, feats, prompt_lens, strict=True)
                ]
                row = {"drafter": label, "spec": spec, "block": block}
                rows.append(row | _summary(walks, block, keys, files, tokens))
                print(
                    f"{label} B={block}: tau {rows[-1]['tau']:.2f}, drafter "
                    f"{rows[-1]['drafter_ms']:.2f} ms",
                    file=sys.stderr,
                )
    return {
        "provenance": provenance(
            target=gguf, drafter=[spec for _, spec in specs], extra={"threads": threads}
        ),
        "model": model_id,
        "answers": [str(a) for a in args.answers],
        "sequences": len(tokens),
        "answer_tokens": int(sum(len(t) - p for t, p in zip(tokens, prompt_lens, strict=True))),
        "target_decode_ms": decode_ms,
        "rows": rows,
    }


def _tau_table(result: dict, blocks: list[int], labels: list[str], by: dict) -> list[str]:
    decode_ms = result["target_decode_ms"]
    head = [
        "drafter",
        *(f"tau B={b}" for b in blocks),
        f"drafter ms/step (B={' / '.join(map(str, blocks))})",
        "drafter / decode",
        "draft memory (max)",
    ]
    rows = []
    for label in labels:
        ms = [by[(label, b)]["drafter_ms"] for b in blocks]  # a short block scores fewer slots
        rows.append(
            [
                label,
                *(f"{by[(label, b)]['tau']:.2f}" for b in blocks),
                " / ".join(f"{m:.2f}" for m in ms),
                " / ".join(f"{100 * m / decode_ms:.0f}%" for m in ms),
                f"{by[(label, blocks[0])]['memory_bytes_max'] / 1024:.0f} KiB",
            ]
        )
    return markdown_table(head, rows)


def _per_set_table(rows: list[dict], b: int, labels: list[str], by: dict) -> list[str]:
    sets = sorted({s for r in rows for s in r["per_set_tau"]})
    body = []
    for label in labels:
        per = by[(label, b)]["per_set_tau"]
        body.append([label, *(f"{per.get(s, float('nan')):.2f}" for s in sets)])
    return ["", f"Per dataset, tau at B={b}:", "", *markdown_table(["drafter", *sets], body)]


def _reach_table(b: int, labels: list[str], by: dict) -> list[str]:
    reaches = ("near", "distant", "novel")
    first_row = by[(labels[0], b)]["accepted_by_reach"]
    head = [
        "drafter",
        *(f"{r} ({first_row.get(r, {}).get('steps', 0)})" for r in reaches),
        "late slots",
    ]
    body = []
    for label in labels:
        row = by[(label, b)]
        reach = row["accepted_by_reach"]
        body.append(
            [
                label,
                *(f"{reach.get(r, {}).get('mean_accepted', float('nan')):.2f}" for r in reaches),
                f"{row['late_slot_accept']:.3f}",
            ]
        )
    return [
        "",
        f"Drafts accepted per step at B={b}, by where the continuation (anchor + 3 tokens) last "
        f"occurred in the context (near: within {NEAR} tokens; in brackets the first drafter's "
        f"steps of each class), "
        f"and P(slot accepted) averaged over slots {max(1, b // 2)}..{b - 1}:",
        "",
        *markdown_table(head, body),
    ]


def _per_file_table(b: int, labels: list[str], by: dict) -> list[str]:
    first = by[(labels[0], b)]["per_file"]
    files = list(first)
    if len(files) <= 1:
        return []
    head = ["drafter", *(f"{f} (~{first[f]['context_tokens_mean']:.0f})" for f in files)]
    body = []
    for label in labels:
        per = by[(label, b)]["per_file"]
        body.append(
            [
                label,
                *(
                    f"{per[f]['tau']:.2f} ({per[f]['memory_bytes_max'] / 1024:.0f} KiB)"
                    for f in files
                ),
            ]
        )
    return [
        "",
        f"Per answers file (mean context tokens), tau at B={b} and draft memory (max):",
        "",
        *markdown_table(head, body),
    ]


def to_markdown(result: dict) -> str:
    blocks = sorted({r["block"] for r in result["rows"]})
    labels = list(dict.fromkeys(r["drafter"] for r in result["rows"]))
    by = {(r["drafter"], r["block"]): r for r in result["rows"]}
    b = blocks[-1]
    lines = [
        f"{result['sequences']} held-out greedy answers ({result['answer_tokens']} tokens) of "
        f"{result['model']}; 1-token target decode {result['target_decode_ms']:.2f} ms; "
        f"git {run_machine(result)['git']}.",
        "",
        *_tau_table(result, blocks, labels, by),
        *_per_set_table(result["rows"], b, labels, by),
        *_reach_table(b, labels, by),
        *_per_file_table(b, labels, by),
    ]
    return "\n".join(lines)
