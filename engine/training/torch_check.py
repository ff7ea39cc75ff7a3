"""`hyflash data torch-check`: the GGUF in torch against llama.cpp on held-out text (speed of
features, labels and batched generation; feature cosine and argmax agreement), and the
feature source it records for `hyflash train --feature-source auto`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from engine.bench.report import markdown_table
from engine.training.target_vocab import eog_ids


def _round_robin(rows: list[dict]) -> list[dict]:
    """Rows taking turns by source (evaluation set), so that any prefix mixes the sets."""
    from itertools import zip_longest

    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row.get("source", ""), []).append(row)
    return [r for turn in zip_longest(*groups.values()) for r in turn if r is not None]


def _held_out(rows: list[dict], n_tokens: int) -> list[np.ndarray]:
    """Held-out sequences (prompt + answer ids, at most 512 tokens each) totalling n_tokens,
    the last one cut."""
    seqs, total = [], 0
    for row in rows:
        seq = np.asarray(row["prompt_ids"] + row["answer_ids"], dtype=np.int64)[:512]
        seq = seq[: n_tokens - total]
        if len(seq) < 2:
            break
        seqs.append(seq)
        total += len(seq)
    return seqs


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _llama_check(gguf: Path, seqs: list, prompts: list, args: argparse.Namespace) -> dict:
    """llama.cpp: prefill with features on, then with all-row logits (labels), then
    distill.py's batched greedy streams on the prompts."""
    from engine.bench.corpora import Prompt
    from engine.llama.target import LlamaTarget
    from engine.training.distill import BatchedGreedy
    from engine.training.features import llama_rows

    n_tok = sum(len(s) for s in seqs)
    with LlamaTarget(gguf, n_ctx=520, features=True, n_threads=args.threads) as target:
        llama_rows(target, seqs[0][:16].tolist(), True)  # warm-up
        _, feat_s = _timed(lambda: [llama_rows(target, s.tolist(), False) for s in seqs])
        rows, label_s = _timed(lambda: [llama_rows(target, s.tolist(), True) for s in seqs])
        answers: dict[str, list[int]] = {}

        def on_done(stream, _reason: str) -> None:
            answers[stream.prompt.id] = stream.answer

        width = max(len(p) for p in prompts) + args.gen_tokens + 1
        gen = BatchedGreedy(target, len(prompts), width, target.n_threads)
        todo = [(Prompt("check", str(i), ""), p) for i, p in enumerate(prompts)]
        try:
            _, gen_s = _timed(lambda: gen.run(todo, args.gen_tokens, on_done))
        finally:
            gen.close()
    ordered = [answers[str(i)] for i in range(len(prompts))]
    return {
        "name": f"llama.cpp cpu ({target.n_threads} threads)",
        "source": "llama",
        "features_tok_s": n_tok / feat_s,
        "labels_tok_s": n_tok / label_s,
        "generation_tok_s": sum(len(a) for a in ordered) / gen_s,
        "features": [np.asarray(f) for f, _ in rows],
        "next_tokens": [np.asarray(p) for _, p in rows],
        "answers": ordered,
    }


def _torch_check(
    gguf: Path, dtype: str, seqs: list, prompts: list, eos: list, args: argparse.Namespace
) -> dict:
    """The GGUF in torch: batched forwards without and with the LM head, batched generation."""
    from engine.training.torch_target import TorchTarget

    n_tok = sum(len(s) for s in seqs)
    batches = [seqs[i : i + args.batch] for i in range(0, len(seqs), args.batch)]
    target = TorchTarget(gguf, dtype=dtype, device=args.device, threads=args.threads)
    try:
        target.forward([seqs[0][:16]])  # warm-up
        _, feat_s = _timed(lambda: [target.forward(b, next_tokens=False) for b in batches])
        outs, label_s = _timed(lambda: [o for b in batches for o in target.forward(b)])
        answers, gen_s = _timed(lambda: target.generate_batch(prompts, args.gen_tokens, eos))
    finally:
        target.close()
    ordered = [a for a, _ in answers]
    return {
        "name": f"torch {target.dtype} {target.device}",
        "source": f"torch-{target.dtype}",
        "features_tok_s": n_tok / feat_s,
        "labels_tok_s": n_tok / label_s,
        "generation_tok_s": sum(len(a) for a in ordered) / gen_s,
        "features": [o.features for o in outs],
        "next_tokens": [o.next_tokens for o in outs],
        "answers": ordered,
    }


def _agreement(ref: dict, other: dict) -> dict:
    """Feature cosine and norm ratio per position, argmax agreement, and equal answers of
    other against ref (llama.cpp)."""
    a = np.concatenate(ref["features"]).astype(np.float64)
    b = np.concatenate(other["features"]).astype(np.float64)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    cos = (a * b).sum(1) / (na * nb)
    same = np.concatenate(ref["next_tokens"]) == np.concatenate(other["next_tokens"])
    equal = [x == y for x, y in zip(ref["answers"], other["answers"], strict=True)]
    return {
        "cosine_mean": float(cos.mean()),
        "cosine_min": float(cos.min()),
        "norm_ratio_mean": float((nb / na).mean()),
        "argmax_agreement": float(same.mean()),
        "answers_equal": f"{sum(equal)}/{len(equal)}",
    }


def cmd_data_torch_check(args: argparse.Namespace) -> int:
    """The torch-side target against llama.cpp on held-out text, in one run."""
    from importlib.metadata import version

    import torch

    from engine.bench.report import publish
    from engine.bench.speed import machine_info
    from engine.llama.target import default_threads
    from engine.models.resolve import resolve_target
    from engine.training.distill import load_answers
    from engine.training.torch_target import native_bf16, resolve_device

    args.threads = args.threads or default_threads()
    torch.set_num_threads(args.threads)
    model_id, gguf = resolve_target(args.model)
    rows = _round_robin(load_answers(Path(args.answers)))
    seqs = _held_out(rows, args.tokens)
    prompts = [r["prompt_ids"] for r in rows[: args.gen_prompts]]
    if not seqs:
        print(f"error: no answers in {args.answers}", file=sys.stderr)
        return 2
    bf16 = native_bf16(args.device)
    dtypes = {"all": ["fp32", "bf16"] if bf16 else ["fp32"], "auto": ["auto"]}.get(
        args.dtype, [args.dtype]
    )
    llama = _llama_check(gguf, seqs, prompts, args)
    eos = eog_ids(gguf)
    results = [llama] + [_torch_check(gguf, d, seqs, prompts, eos, args) for d in dtypes]
    for r in results[1:]:
        r.update(_agreement(llama, r))
    keys = ("features", "next_tokens", "answers")
    table = [{k: v for k, v in r.items() if k not in keys} for r in results]
    device = resolve_device(args.device)
    machine = machine_info(args.threads) | {
        "bf16_native": bf16,
        "torch": torch.__version__,
        # metadata, not an import: only torch_target imports transformers (the bundle omits it)
        "transformers": version("transformers"),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
    }
    result = {
        "command": "hyflash data torch-check " + " ".join(sys.argv[3:]),
        "machine": machine,
        "model": model_id,
        "answers": args.answers,
        "sequences": len(seqs),
        "tokens": int(sum(len(s) for s in seqs)),
        "generation": {"prompts": len(prompts), "max_new_tokens": args.gen_tokens},
        "results": table,
    }
    publish(result, _torch_check_markdown(result), args.out, "torch_check")
    record_source_verdict(table, args.device)
    return 0


def record_source_verdict(table: list[dict], device: str, path: Path | None = None) -> str:
    """Remember the fastest feature source among those whose features agree with llama.cpp's
    (cosine mean >= 0.995), so `hyflash train --feature-source auto` takes it on this machine."""
    import json

    from engine.training import features

    path = path or features.SOURCE_VERDICT
    fit = [r for r in table if r["source"] == "llama" or r.get("cosine_mean", 0) >= 0.995]
    best = max(fit, key=lambda r: r["features_tok_s"])
    verdict = {
        "machine": features.source_machine(device),
        "source": best["source"],
        "features_tok_s": {r["source"]: r["features_tok_s"] for r in table},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(verdict, indent=2))
    print(f"feature source for this machine: {best['source']} (recorded in {path})")
    return best["source"]


def torch_check_table(result: dict) -> list[str]:
    """Speed and agreement of every target the check ran, llama.cpp first (the reference)."""
    head = [
        "target",
        "features tok/s",
        "labels tok/s",
        "generation tok/s",
        "cosine mean / min",
        "norm ratio",
        "argmax agreement",
        "answers = llama.cpp's",
    ]
    rows = []
    for r in result["results"]:
        agree = (
            [
                f"{r['cosine_mean']:.5f} / {r['cosine_min']:.4f}",
                f"{r['norm_ratio_mean']:.4f}",
                f"{r['argmax_agreement']:.3f}",
                r["answers_equal"],
            ]
            if "cosine_mean" in r
            else ["reference", "", "", ""]
        )
        speed = [f"{r['features_tok_s']:.0f}", f"{r['labels_tok_s']:.0f}"]
        rows.append([r["name"], *speed, f"{r['generation_tok_s']:.1f}", *agree])
    return markdown_table(head, rows)


def _torch_check_markdown(result: dict) -> str:
    m, g = result["machine"], result["generation"]
    lines = [
        "# Training-side target: torch vs llama.cpp",
        "",
        f"{m['cpu']} ({m['threads']} threads; torch device {m['device']}, native bf16 "
        f"{m['bf16_native']}), torch {m['torch']}, transformers {m['transformers']}; "
        f"{result['model']}, {result['tokens']} held-out tokens in {result['sequences']} "
        f"sequences of {result['answers']}; generation: {g['prompts']} prompts x "
        f"{g['max_new_tokens']} tokens, llama.cpp as parallel streams, torch as one batch.",
        "",
        *torch_check_table(result),
    ]
    best = max(result["results"], key=lambda r: r["features_tok_s"])
    lines += ["", f"Fastest feature source here: {best['name']}."]
    return "\n".join(lines)
