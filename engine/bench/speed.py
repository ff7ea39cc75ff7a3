"""`hyflash bench`: plain vs speculative decoding on the same prompts, in one run.

For each prompt every configuration runs back to back (so machine noise hits them alike);
greedy outputs must equal plain decoding's token for token, or the run fails. Prints decode
tokens/s, tau, the speedup ratio over plain decoding, and the cost curve T(B)/T(1).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.bench.projection import CostCurve, project, projection_markdown
from engine.bench.prompts import CHAT_PROMPTS, REPEAT_PROMPTS, grounded_prompts
from engine.bench.provenance import provenance, run_machine
from engine.decoding.blocksize import profile_costs
from engine.events import ErrorEvent, Finished, GenerationSettings, StepStats
from engine.llama.kernels import kernel_kwargs

_DEFAULTS = GenerationSettings()


@dataclass
class RunResult:
    text: str
    tokens: tuple[int, ...]
    decode_s: float
    steps: int
    tau: float
    draft_ms: float
    verify_ms: float
    blocks: Counter  # target decodes by block size verified (a projection replays them)


@dataclass
class ConfigTotals:
    name: str
    tokens: int = 0
    committed: int = 0  # tokens committed by target decodes (an end-of-text token included)
    decode_s: float = 0.0
    steps: int = 0
    draft_ms: list[float] = field(default_factory=list)
    draft_ms_total: float = 0.0
    blocks: Counter = field(default_factory=Counter)
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
        self.draft_ms_total += run.draft_ms * run.steps
        self.blocks.update(run.blocks)


def run_once(
    engine,
    prompt: str | list[dict],
    block_size,
    max_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
) -> RunResult:
    # a fixed seed: with sampling every configuration draws from the same random stream
    settings = GenerationSettings(
        max_tokens=max_tokens,
        block_size=block_size,
        temperature=temperature,
        top_p=top_p,
        seed=0,
    )
    finished = None
    blocks: Counter = Counter()
    for event in engine.generate(prompt, settings=settings):
        if isinstance(event, ErrorEvent):
            raise RuntimeError(event.message)
        if isinstance(event, StepStats):
            blocks[event.block_size] += 1
        elif isinstance(event, Finished):
            finished = event
    s = finished.stats
    # decode time = time after prefill; tokens_per_s is generated / that time
    decode_s = s.tokens_generated / s.tokens_per_s if s.tokens_per_s else 0.0
    return RunResult(
        finished.text,
        finished.token_ids,
        decode_s,
        s.step,
        s.tau_mean,
        s.draft_ms,
        s.verify_ms,
        blocks,
    )


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
    """The short machine record older callers keep (a feature cache's source key, the app
    speed script); result files carry engine.bench.provenance's block instead."""
    from engine.bench.provenance import git_state
    from engine.llama.backends import probe

    git = git_state()
    return {
        "cpu": probe().cpu.model,
        "threads": threads,
        "python": platform.python_version(),
        "git": git["commit"][:7] if git else "",
    }


def cost_curve(engine, sizes: list[int], repeats: int) -> dict[int, float]:
    costs = profile_costs(engine.timed_decode, sizes, repeats)
    return {n: costs[n] for n in sizes}


def memory_bandwidth_gbs(threads: int, mib: int = 512, repeats: int = 3) -> float:
    """Read bandwidth of this machine: `threads` threads summing disjoint slices of a buffer
    far larger than the caches (numpy releases the GIL while it reduces)."""
    from concurrent.futures import ThreadPoolExecutor

    data = np.ones(mib * 2**20 // 8, dtype=np.float64)
    parts = np.array_split(data, threads)
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(np.sum, parts))
            best = min(best, time.perf_counter() - start)
    return data.nbytes / best / 1e9


def weight_bytes(gguf_path: Path) -> int:
    """Bytes of the model's tensors: what a 1-token decode must read at least once."""
    from gguf import GGUFReader

    return int(sum(t.n_bytes for t in GGUFReader(gguf_path).tensors))


def bench_prompts(
    prompt_set: str, limit: int | None, per_set: int
) -> list[tuple[str, str | tuple[str, str]]]:
    """(set, prompt) pairs: the 28 chat prompts, the repeat/quote/edit prompts, the grounded
    code-edit and rewrite prompts by task kind, or the first
    `per_set` of every held-out evaluation set (engine/bench/corpora.py; never in the
    drafter's training data), plus MT-Bench second turns as (first turn, second turn)."""
    if prompt_set == "chat":
        return [("chat", p) for p in CHAT_PROMPTS[:limit]]
    if prompt_set == "repeat":
        return [("repeat", p) for p in REPEAT_PROMPTS[:limit]]
    if prompt_set == "grounded":  # a set per task kind
        return grounded_prompts()[:limit]
    from engine.bench.corpora import eval_prompts, mtbench_second_turns

    pairs: list[tuple[str, str | tuple[str, str]]] = [
        (name, p.text) for name, ps in eval_prompts().items() for p in ps[:per_set]
    ]
    pairs += [("mtbench-t2", (p.text, t2)) for p, t2 in mtbench_second_turns()[:per_set]]
    return pairs[:limit]


def conversation(engine, prompt: str | tuple[str, str], max_tokens: int) -> str | list[dict]:
    """A second turn is asked after the target's own greedy answer to the first."""
    if isinstance(prompt, str):
        return prompt
    first, second = prompt
    engine.set_drafter("none")
    answer = run_once(engine, first, 1, max_tokens).text
    return [
        {"role": "user", "content": first},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": second},
    ]


def speedup_interval(
    rows: list[dict], key: str, level: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> list[float]:
    """Bootstrap interval over prompts of a config's speedup (its total tokens / total decode
    time over plain decoding's, on the same resampled prompts): what another draw of prompts
    of the same kinds would likely give."""
    if not rows:
        return [float("nan"), float("nan")]
    tokens = np.array([[r[key]["tokens"], r["none:1"]["tokens"]] for r in rows], dtype=float)
    secs = np.array([[r[key]["decode_s"], r["none:1"]["decode_s"]] for r in rows], dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(rows), size=(n_boot, len(rows)))
    tok, sec = tokens[picks].sum(axis=1), secs[picks].sum(axis=1)  # (n_boot, 2)
    ratios = (tok[:, 0] / sec[:, 0]) / (tok[:, 1] / sec[:, 1])
    tail = (1 - level) / 2
    return [float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))]


def run_bench(args: argparse.Namespace, other: CostCurve | None = None) -> dict:
    """Run every configuration on every prompt; with `other`, also project the speedups onto
    that machine's cost curve (engine/bench/projection.py)."""
    from engine.engine import Engine

    prompts = bench_prompts(args.prompt_set, args.prompts, args.per_set)
    configs = parse_configs(args.configs)
    engine = Engine(
        args.model,
        drafter="none",
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        backend=args.backend,
        **kernel_kwargs(args),
    )
    keys = ["none:1", *(f"{d}:{b}" for d, b in configs)]
    names = {"none:1": "plain", **{f"{d}:{b}": f"{d} (block {b})" for d, b in configs}}
    sets = list(dict.fromkeys(name for name, _ in prompts))
    totals = {(k, s): ConfigTotals(names[k]) for k in keys for s in [*sets, "all"]}
    for drafter, block in [("none", 1), *configs]:  # warm-up: first runs allocate and load
        engine.set_drafter(drafter)
        run_once(engine, "Say hello.", block, 16, args.temperature, args.top_p)
    per_prompt = []
    for i, (set_name, item) in enumerate(prompts):
        per_prompt.append(bench_prompt(engine, args, i, set_name, item, configs, totals))
        print(f"prompt {i + 1}/{len(prompts)} done", file=sys.stderr)

    curve = cost_curve(engine, list(range(1, args.max_block + 1)), args.repeats)
    t1 = curve[1]
    bandwidth = memory_bandwidth_gbs(engine.target.n_threads)
    weights = weight_bytes(engine.model_path)
    summary = [summary_row(key, totals, per_prompt, sets, curve) for key in keys]
    result = {
        "provenance": provenance(
            target=engine.model_path,
            drafter=[d for d, _ in configs],
            extra={"threads": engine.target.n_threads},
        ),
        "model": engine.model_id,
        "model_path": str(engine.model_path),
        "backend": engine.backend.name,
        "kernels": list(engine.kernels.summary()),
        "verify": {"mode": engine.verify.mode, "chunk": engine.verify.chunk or 0},
        "prompt_set": args.prompt_set,
        "prompts": len(prompts),
        "max_tokens": args.max_tokens,
        "runs": args.runs,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "summary": summary,
        # plain decoding reads every weight once per token: bandwidth / weights bounds it
        "bandwidth": {
            "read_gb_s": bandwidth,
            "weight_bytes": weights,
            "bound_tok_s": bandwidth * 1e9 / weights,
            "plain_tok_s": summary[0]["tok_s"],
            "t1_tok_s": 1 / t1,
        },
        "cost_curve_ms": {n: 1000 * v for n, v in curve.items()},
        "cost_ratio": {n: v / t1 for n, v in curve.items()},
        "per_prompt": per_prompt,
    }
    if other is not None:
        result["projection"] = project(summary, other, engine.model_id)
    return result


def bench_prompt(
    engine,
    args: argparse.Namespace,
    i: int,
    set_name: str,
    item: str | tuple[str, str],
    configs: list[tuple[str, str | int]],
    totals: dict[tuple[str, str], ConfigTotals],
) -> dict:
    """Prompt number `i` on plain decoding and every configuration; adds the runs to `totals`
    (its set's and "all") and returns the prompt's row."""
    prompt = conversation(engine, item, args.max_tokens)
    runs = [("none", 1), *configs]
    results: dict[str, RunResult] = {}
    for r in range(args.runs):
        # back to back, in alternating order, so a drift in machine speed favours no config
        order = runs if (i + r) % 2 == 0 else runs[::-1]
        for drafter, block in order:
            engine.set_drafter(drafter)
            key = f"{drafter}:{block}"
            res = run_once(engine, prompt, block, args.max_tokens, args.temperature, args.top_p)
            # the fastest of the runs: interruptions only ever slow a run down
            if key not in results or res.decode_s < results[key].decode_s:
                results[key] = res
    plain = results["none:1"]
    row = {"prompt": i, "set": set_name}
    for key, res in results.items():
        same = res.tokens == plain.tokens
        for s in (set_name, "all"):
            t = totals[(key, s)]
            t.add(res)
            # sampling is lossless in distribution, not token for token (tested apart)
            t.mismatches += 0 if same or args.temperature > 0 else 1
        row[key] = {
            "tokens": len(res.tokens),
            "decode_s": res.decode_s,
            "tok_s": len(res.tokens) / res.decode_s,
            "tau": res.tau,
            "identical": same,
        }
    return row


def summary_row(
    key: str,
    totals: dict[tuple[str, str], ConfigTotals],
    per_prompt: list[dict],
    sets: list[str],
    curve: dict[int, float],
) -> dict:
    """One configuration over all prompts and per set, against plain decoding."""
    t, plain = totals[(key, "all")], totals[("none:1", "all")]
    draft_ms = float(np.mean(t.draft_ms)) if t.draft_ms else 0.0
    block = key.rpartition(":")[2]
    # what the cost curve allows at this tau: tau x T(1) / (T(B) + drafting time)
    bound = (
        t.tau * curve[1] / (curve[int(block)] + draft_ms / 1000)
        if block.isdigit() and int(block) in curve
        else None
    )
    return {
        "config": t.name,
        "key": key,
        "tokens": t.tokens,
        "tok_s": t.tokens_per_s,
        "tau": t.tau,
        "speedup": t.tokens_per_s / plain.tokens_per_s,
        "speedup_ci": speedup_interval(per_prompt, key),
        "bound": bound,
        "draft_ms": draft_ms,
        "draft_ms_total": t.draft_ms_total,
        "blocks": {b: t.blocks[b] for b in sorted(t.blocks)},
        "identical": t.mismatches == 0,
        "mismatches": t.mismatches,
        "per_set": {
            s: {
                "tau": totals[(key, s)].tau,
                "speedup_ci": speedup_interval([r for r in per_prompt if r["set"] == s], key),
                "speedup": totals[(key, s)].tokens_per_s / totals[("none:1", s)].tokens_per_s,
                # target decodes by block size verified: where block size auto drafted
                "blocks": dict(sorted(totals[(key, s)].blocks.items())),
            }
            for s in sets
        },
    }


def to_markdown(result: dict) -> str:
    machine = run_machine(result)
    lines = [
        f"Model {result['model']}, {result['prompts']} {result.get('prompt_set', 'chat')} "
        f"prompts, {result['max_tokens']} tokens max, "
        + (f"fastest of {result['runs']} runs per config, " if result.get("runs", 1) > 1 else "")
        + f"{sampling_text(result.get('temperature', 0.0), result.get('top_p', 1.0))}; "
        f"{machine['cpu']}, {machine['threads']} threads, git {machine['git']}.",
        "",
        *summary_table(result),
    ]
    sets = list(result["summary"][0].get("per_set", {}))
    if len(sets) > 1:
        lines += [
            "",
            "Per set, speedup [95% interval] (tau):",
            "",
            "| config | " + " | ".join(sets) + " |",
            "|---|" + "---|" * len(sets),
        ]
        for s in result["summary"][1:]:
            lines.append(
                f"| {s['config']} | "
                + " | ".join(
                    f"{s['per_set'][n]['speedup']:.2f}x"
                    f"{interval_text(s['per_set'][n].get('speedup_ci'))} "
                    f"({s['per_set'][n]['tau']:.2f})"
                    for n in sets
                )
                + " |"
            )
        auto = [s for s in result["summary"] if s["key"].endswith(":auto")]
        if auto:
            lines += ["", "Block size auto: target decodes by block size (B:count), per set:", ""]
            lines += ["| config | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
            for s in auto:
                lines.append(
                    f"| {s['config']} | "
                    + " | ".join(_histogram(s["per_set"][n].get("blocks", {})) for n in sets)
                    + " |"
                )
    lines += ["", "Cost curve (time of a B-token decode over a 1-token decode):", ""]
    lines += cost_curve_table(result)
    lines.append(f"\nT(1) = {result['cost_curve_ms'][next(iter(result['cost_ratio']))]:.2f} ms")
    bw = result.get("bandwidth")
    if bw:
        lines.append(
            f"\nBandwidth bound of plain decoding: {bw['weight_bytes'] / 1e6:.1f} MB of weights "
            f"per token at {bw['read_gb_s']:.1f} GB/s measured read bandwidth = "
            f"{bw['bound_tok_s']:.0f} tok/s; plain decoding ran at {bw['plain_tok_s']:.1f} tok/s "
            f"({bw['plain_tok_s'] / bw['bound_tok_s']:.0%} of it; a bare 1-token decode "
            f"{bw['t1_tok_s']:.0f} tok/s)."
        )
    if result.get("projection"):
        lines += ["", projection_markdown(result["projection"])]
    return "\n".join(lines)


def summary_table(result: dict) -> list[str]:
    """Every configuration against plain decoding: the run's main table."""
    lines = [
        "| config | tokens | tok/s | tau | speedup vs plain [95% interval] | bound "
        "| draft ms/call | identical to plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sampled = result.get("temperature", 0.0) > 0
    for s in result["summary"]:
        identical = "n/a (sampled)" if sampled else ("yes" if s["identical"] else "NO")
        bound = f"{s['bound']:.2f}x" if s.get("bound") is not None else "-"
        lines.append(
            f"| {s['config']} | {s['tokens']} | {s['tok_s']:.1f} | {s['tau']:.2f} | "
            f"{s['speedup']:.2f}x{interval_text(s.get('speedup_ci'))} | {bound} | "
            f"{s['draft_ms']:.2f} | "
            f"{identical} |"
        )
    return lines


def cost_curve_table(result: dict) -> list[str]:
    """T(B)/T(1) for every B measured."""
    sizes = list(result["cost_ratio"])
    return [
        "| B | " + " | ".join(str(n) for n in sizes) + " |",
        "|---|" + "---|" * len(sizes),
        "| T(B)/T(1) | " + " | ".join(f"{result['cost_ratio'][n]:.2f}" for n in sizes) + " |",
    ]


def _histogram(blocks: dict) -> str:
    return " ".join(f"{b}:{n}" for b, n in sorted(blocks.items(), key=lambda x: int(x[0])))


def interval_text(ci: list[float] | None) -> str:
    """' [lo-hi]' after a ratio, or nothing for a run that recorded no interval."""
    return f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else ""


def sampling_text(temperature: float, top_p: float = 1.0) -> str:
    if temperature == 0:
        return "greedy"
    nucleus = f", top-p {top_p:g}" if top_p < 1.0 else ""
    return f"sampling at temperature {temperature:g}{nucleus} (seed 0)"
