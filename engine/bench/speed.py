"""`hyflash bench`: plain vs speculative decoding on the same prompts, in one run.

For each prompt every configuration runs back to back (so machine noise hits them alike);
greedy outputs must equal plain decoding's token for token, or the run fails. Prints decode
tokens/s, tau, the speedup ratio over plain decoding, and the cost curve T(B)/T(1).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.bench.prompts import CHAT_PROMPTS
from engine.bench.report import publish
from engine.blocksize import profile_costs
from engine.events import ErrorEvent, Finished, GenerationSettings


@dataclass
class RunResult:
    tokens: tuple[int, ...]
    decode_s: float
    steps: int
    tau: float
    draft_ms: float
    verify_ms: float


@dataclass
class ConfigTotals:
    name: str
    tokens: int = 0
    committed: int = 0  # tokens committed by target decodes (an end-of-text token included)
    decode_s: float = 0.0
    steps: int = 0
    draft_ms: list[float] = field(default_factory=list)
    mismatches: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s else 0.0

    @property
    def tau(self) -> float:
        return self.committed / self.steps if self.steps else 0.0

    def add(self, run: RunResult) -> None:
        self.tokens += len(run.tokens)
        self.committed += round(run.tau * run.steps)
        self.decode_s += run.decode_s
        self.steps += run.steps
        self.draft_ms.append(run.draft_ms)


def run_once(engine, prompt: str, block_size, max_tokens: int) -> RunResult:
    settings = GenerationSettings(max_tokens=max_tokens, block_size=block_size)
    finished = None
    for event in engine.generate(prompt, settings=settings):
        if isinstance(event, ErrorEvent):
            raise RuntimeError(event.message)
        if isinstance(event, Finished):
            finished = event
    s = finished.stats
    # decode time = time after prefill; tokens_per_s is generated / that time
    decode_s = s.tokens_generated / s.tokens_per_s if s.tokens_per_s else 0.0
    return RunResult(finished.token_ids, decode_s, s.step, s.tau_mean, s.draft_ms, s.verify_ms)


def parse_configs(spec: str) -> list[tuple[str, str | int]]:
    """'ngram:auto,ngram:4,hybrid:hyflash:8' -> [('ngram', 'auto'), ('ngram', 4),
    ('hybrid:hyflash', 8)]: the block size follows the last colon."""
    configs = []
    for item in spec.split(","):
        drafter, _, block = item.rpartition(":")
        if not (block.isdigit() or block == "auto"):
            drafter, block = item, "auto"
        configs.append((drafter, "auto" if block == "auto" else int(block)))
    return configs


def machine_info(threads: int) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        rev = ""
    return {"cpu": cpu, "threads": threads, "python": platform.python_version(), "git": rev}


def cost_curve(engine, sizes: list[int], repeats: int) -> dict[int, float]:
    costs = profile_costs(engine._timed_decode, sizes, repeats)
    return {n: costs[n] for n in sizes}


def bench_prompts(prompt_set: str, limit: int | None, per_set: int) -> list[tuple[str, str]]:
    """(set, prompt) pairs: the 28 chat prompts, or the first `per_set` of every held-out
    evaluation set (engine/hyflash/prompts.py; never in the drafter's training data)."""
    if prompt_set == "chat":
        return [("chat", p) for p in CHAT_PROMPTS[:limit]]
    from engine.hyflash.prompts import eval_prompts

    pairs = [(name, p.text) for name, ps in eval_prompts().items() for p in ps[:per_set]]
    return pairs[:limit]


def run_bench(args: argparse.Namespace) -> dict:
    from engine.engine import Engine

    prompts = bench_prompts(args.prompt_set, args.prompts, args.per_set)
    configs = parse_configs(args.configs)
    engine = Engine(args.model, drafter="none", n_ctx=args.n_ctx, n_threads=args.threads)
    keys = ["none:1", *(f"{d}:{b}" for d, b in configs)]
    names = {"none:1": "plain", **{f"{d}:{b}": f"{d} (block {b})" for d, b in configs}}
    sets = list(dict.fromkeys(name for name, _ in prompts))
    totals = {(k, s): ConfigTotals(names[k]) for k in keys for s in [*sets, "all"]}
    per_prompt = []
    for i, (set_name, prompt) in enumerate(prompts):
        engine.set_drafter("none")
        plain = run_once(engine, prompt, 1, args.max_tokens)
        for s in (set_name, "all"):
            totals[("none:1", s)].add(plain)
        row = {"prompt": i, "set": set_name, "plain_tok_s": len(plain.tokens) / plain.decode_s}
        for drafter, block in configs:
            engine.set_drafter(drafter)
            res = run_once(engine, prompt, block, args.max_tokens)
            same = res.tokens == plain.tokens
            for s in (set_name, "all"):
                t = totals[(f"{drafter}:{block}", s)]
                t.add(res)
                t.mismatches += 0 if same else 1
            row[f"{drafter}:{block}"] = {
                "tok_s": len(res.tokens) / res.decode_s,
                "tau": res.tau,
                "identical": same,
            }
        per_prompt.append(row)
        print(f"prompt {i + 1}/{len(prompts)} done", file=sys.stderr)

    sizes = list(range(1, args.max_block + 1))
    curve = cost_curve(engine, sizes, args.repeats)
    t1 = curve[1]
    summary = []
    for key in keys:
        t, plain = totals[(key, "all")], totals[("none:1", "all")]
        draft_ms = float(np.mean(t.draft_ms)) if t.draft_ms else 0.0
        block = key.rpartition(":")[2]
        # what the cost curve allows at this tau: tau x T(1) / (T(B) + drafting time)
        bound = (
            t.tau * t1 / (curve[int(block)] + draft_ms / 1000)
            if block.isdigit() and int(block) in curve
            else None
        )
        summary.append(
            {
                "config": t.name,
                "key": key,
                "tokens": t.tokens,
                "tok_s": t.tokens_per_s,
                "tau": t.tau,
                "speedup": t.tokens_per_s / plain.tokens_per_s,
                "bound": bound,
                "draft_ms": draft_ms,
                "identical": t.mismatches == 0,
                "mismatches": t.mismatches,
                "per_set": {
                    s: {
                        "tau": totals[(key, s)].tau,
                        "speedup": totals[(key, s)].tokens_per_s
                        / totals[("none:1", s)].tokens_per_s,
                    }
                    for s in sets
                },
            }
        )
    result = {
        "command": "hyflash bench " + " ".join(sys.argv[2:] if len(sys.argv) > 2 else []),
        "machine": machine_info(engine.target.n_threads),
        "model": engine.model_id,
        "prompt_set": args.prompt_set,
        "prompts": len(prompts),
        "max_tokens": args.max_tokens,
        "summary": summary,
        "cost_curve_ms": {n: 1000 * v for n, v in curve.items()},
        "cost_ratio": {n: v / t1 for n, v in curve.items()},
        "per_prompt": per_prompt,
    }
    return result


def to_markdown(result: dict) -> str:
    lines = [
        f"Model {result['model']}, {result['prompts']} {result.get('prompt_set', 'chat')} "
        f"prompts, {result['max_tokens']} tokens max, greedy; {result['machine']['cpu']}, "
        f"{result['machine']['threads']} threads, git {result['machine']['git']}.",
        "",
        "| config | tokens | tok/s | tau | speedup vs plain | bound | draft ms/call "
        "| identical to plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in result["summary"]:
        bound = f"{s['bound']:.2f}x" if s.get("bound") is not None else "-"
        lines.append(
            f"| {s['config']} | {s['tokens']} | {s['tok_s']:.1f} | {s['tau']:.2f} | "
            f"{s['speedup']:.2f}x | {bound} | {s['draft_ms']:.2f} | "
            f"{'yes' if s['identical'] else 'NO'} |"
        )
    sets = list(result["summary"][0].get("per_set", {}))
    if len(sets) > 1:
        lines += [
            "",
            "Per set, speedup (tau):",
            "",
            "| config | " + " | ".join(sets) + " |",
            "|---|" + "---|" * len(sets),
        ]
        for s in result["summary"][1:]:
            lines.append(
                f"| {s['config']} | "
                + " | ".join(
                    f"{s['per_set'][n]['speedup']:.2f}x ({s['per_set'][n]['tau']:.2f})"
                    for n in sets
                )
                + " |"
            )
    lines += ["", "Cost curve (time of a B-token decode over a 1-token decode):", ""]
    sizes = list(result["cost_ratio"])
    lines.append("| B | " + " | ".join(str(n) for n in sizes) + " |")
    lines.append("|---|" + "---|" * len(sizes))
    lines.append(
        "| T(B)/T(1) | " + " | ".join(f"{result['cost_ratio'][n]:.2f}" for n in sizes) + " |"
    )
    lines.append(f"\nT(1) = {result['cost_curve_ms'][sizes[0]]:.2f} ms")
    return "\n".join(lines)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.quick:
        args.max_tokens, args.max_block, args.repeats, args.per_set = 48, 8, 2, 1
        args.prompts = 3 if args.prompt_set == "chat" else args.prompts
    start = time.perf_counter()
    result = run_bench(args)
    result["elapsed_s"] = time.perf_counter() - start
    folder = publish(result, to_markdown(result), args.out, "speed")
    if folder is not None:
        from engine.bench.plots import plot_cost_curve

        plot_cost_curve(result, folder)
    bad = [s for s in result["summary"] if not s["identical"]]
    finite = all(np.isfinite(s["tok_s"]) and np.isfinite(s["tau"]) for s in result["summary"])
    if bad or not finite:
        print("FAILED: a drafter's greedy output differed from plain decoding", file=sys.stderr)
        return 1
    return 0


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="speed: plain vs speculative decoding in one run")
    p.add_argument("--model", default=None)
    p.add_argument("--configs", default="ngram:auto,ngram:2,ngram:4,ngram:8")
    p.add_argument("--prompt-set", default="chat", choices=["chat", "eval"])
    p.add_argument("--prompts", type=int, default=None, help="first N prompts")
    p.add_argument("--per-set", type=int, default=4, help="eval: first N of every set")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--max-block", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--quick", action="store_true", help="CI-sized run")
    p.add_argument("--out", default=None, help="folder for speed.json and speed.md")
    p.set_defaults(func=cmd_bench)
