"""`hyflash bench`: plain vs speculative decoding on the same prompts, in one run.

For each prompt every configuration runs back to back (so machine noise hits them alike);
greedy outputs must equal plain decoding's token for token, or the run fails. Prints decode
tokens/s, tau, the speedup ratio over plain decoding, and the cost curve T(B)/T(1).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.bench.prompts import CHAT_PROMPTS
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
    """'ngram:auto,ngram:4' -> [('ngram', 'auto'), ('ngram', 4)]."""
    configs = []
    for item in spec.split(","):
        drafter, _, block = item.partition(":")
        configs.append((drafter, "auto" if block in ("", "auto") else int(block)))
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


def run_bench(args: argparse.Namespace) -> dict:
    from engine.engine import Engine

    prompts = CHAT_PROMPTS[: args.prompts]
    configs = parse_configs(args.configs)
    engine = Engine(args.model, drafter="none", n_ctx=args.n_ctx, n_threads=args.threads)
    totals = {"none:1": ConfigTotals("plain")}
    for drafter, block in configs:
        totals[f"{drafter}:{block}"] = ConfigTotals(f"{drafter} (block {block})")
    per_prompt = []
    for i, prompt in enumerate(prompts):
        engine.set_drafter("none")
        plain = run_once(engine, prompt, 1, args.max_tokens)
        totals["none:1"].add(plain)
        row = {"prompt": i, "plain_tok_s": len(plain.tokens) / plain.decode_s}
        for drafter, block in configs:
            engine.set_drafter(drafter)
            res = run_once(engine, prompt, block, args.max_tokens)
            t = totals[f"{drafter}:{block}"]
            t.add(res)
            same = res.tokens == plain.tokens
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
    plain = totals["none:1"]
    summary = []
    for key, t in totals.items():
        draft_ms = float(np.mean(t.draft_ms)) if t.draft_ms else 0.0
        summary.append(
            {
                "config": t.name,
                "key": key,
                "tokens": t.tokens,
                "tok_s": t.tokens_per_s,
                "tau": t.tau,
                "speedup": t.tokens_per_s / plain.tokens_per_s,
                "draft_ms": draft_ms,
                "identical": t.mismatches == 0,
                "mismatches": t.mismatches,
            }
        )
    result = {
        "command": "hyflash bench " + " ".join(sys.argv[2:] if len(sys.argv) > 2 else []),
        "machine": machine_info(engine.target.n_threads),
        "model": engine.model_id,
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
        f"Model {result['model']}, {result['prompts']} prompts, {result['max_tokens']} tokens max, "
        f"greedy; {result['machine']['cpu']}, {result['machine']['threads']} threads, "
        f"git {result['machine']['git']}.",
        "",
        "| config | tokens | tok/s | tau | speedup vs plain | draft ms/call | identical to plain |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in result["summary"]:
        lines.append(
            f"| {s['config']} | {s['tokens']} | {s['tok_s']:.1f} | {s['tau']:.2f} | "
            f"{s['speedup']:.2f}x | {s['draft_ms']:.2f} | {'yes' if s['identical'] else 'NO'} |"
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
        args.prompts, args.max_tokens, args.max_block, args.repeats = 3, 48, 8, 2
    start = time.perf_counter()
    result = run_bench(args)
    result["elapsed_s"] = time.perf_counter() - start
    md = to_markdown(result)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "speed.json").write_text(json.dumps(result, indent=2))
        (out / "speed.md").write_text(md + "\n")
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
    p.add_argument("--prompts", type=int, default=len(CHAT_PROMPTS))
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--max-block", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--quick", action="store_true", help="CI-sized run")
    p.add_argument("--out", default=None, help="folder for speed.json and speed.md")
    p.set_defaults(func=cmd_bench)
