"""`hyflash data ...` (and, with torch installed, training and export) subcommands."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine.corpora import TRAIN_SOURCES
from engine.data_paths import (
    DISTILL_ROOT,
    EVAL_CORPUS,
    conversations_path,
    default_answers_path,
)
from engine.drafters.hyflash_shared import (
    ATTENTION_KINDS,
    HISTORY_KINDS,
    MEMORY_KINDS,
    DrafterConfig,
    GGUFIndex,
    target_identity,
)
from engine.hyflash.train_config import TrainConfig


def _sources(arg: str | None) -> frozenset[str] | None:
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
    from engine.corpora import eval_prompts, train_prompts

    if args.split == "train":
        return train_prompts(sources=_sources(args.sources))[: args.limit], 512
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


def cmd_data_generate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from engine.hyflash.distill import generate_corpus
    from engine.models import resolve_target
    from engine.target import LlamaTarget

    model_id, path = resolve_target(args.model)
    out = Path(args.out) if args.out else default_answers_path(model_id, args.split, args.bucket)
    with LlamaTarget(path, n_ctx=64) as probe:
        prompts, longest = selected_prompts(args, probe)
        if args.generator == "torch":  # (generate_corpus picks its own for llama.cpp)
            prompts = _prompts_to_answer(probe, prompts, out, longest)
    bar = tqdm(total=len(prompts), unit="answer", file=sys.stderr)

    def progress(done: int, total: int, tok_s: float) -> None:
        bar.total = total
        bar.update(done - bar.n)
        bar.set_postfix(tok_s=f"{tok_s:.0f}")

    if args.generator == "torch":
        return _generate_torch(args, path, prompts, out, progress, bar)
    target = LlamaTarget(path, n_ctx=max(512, longest), n_threads=args.threads)
    try:
        written = generate_corpus(
            target,
            prompts,
            out,
            streams=args.streams,
            max_tokens=args.max_tokens,
            max_prompt_tokens=longest,
            n_threads=args.threads,
            progress=progress,
        )
    finally:
        bar.close()
        target.close()
    print(f"wrote {written} answers to {out}")
    return 0


def _prompts_to_answer(target, prompts: list, out: Path, longest: int) -> list[tuple]:
    """(prompt, chat-templated ids) of the prompts out does not answer yet, up to longest."""
    from engine.chat_template import ChatTemplate
    from engine.hyflash.distill import done_keys

    template = ChatTemplate.for_target(target)
    have = done_keys(out)
    todo = []
    for p in prompts:
        if p.key not in have:
            ids = template.tokenize(target, [{"role": "user", "content": p.text}])
            if len(ids) <= longest:
                todo.append((p, ids))
    return todo


def _generate_torch(args: argparse.Namespace, path: Path, todo: list, out: Path, progress, bar):
    """data generate --generator torch: the GGUF in torch answers in batches of --streams."""
    from engine.hyflash.torch_target import TorchTarget, generate_answers

    eos = _eog_ids(path)
    target = TorchTarget(
        path, dtype=args.torch_dtype, device=args.torch_device, threads=args.threads
    )
    try:
        written = generate_answers(
            target,
            todo,
            out,
            batch=args.streams,
            max_tokens=args.max_tokens,
            eos_ids=eos,
            progress=progress,
        )
    finally:
        bar.close()
        target.close()
    print(f"wrote {written} answers to {out} (torch {target.dtype} on {target.device})")
    return 0


def cmd_data_conversations(args: argparse.Namespace) -> int:
    """ShareGPT first turns with the dataset's own answers, as token ids (no generation): the
    cheap complement to self-distillation, labelled by the target at training time."""
    import json

    from engine.chat_template import ChatTemplate
    from engine.corpora import sharegpt_conversations
    from engine.hyflash.distill import append_rows, done_keys
    from engine.models import resolve_target
    from engine.target import LlamaTarget

    model_id, path = resolve_target(args.model)
    out = Path(args.out) if args.out else conversations_path(model_id)
    have = done_keys(out)
    # prompts unlike the generated answers' first; once the answers cover them (the corpus
    # answers every ShareGPT prompt up to 512 tokens), the dataset's own reply to an answered
    # prompt is still a different text to learn from
    answered = done_keys(default_answers_path(model_id, "train", ""))
    convs = [c for c in sharegpt_conversations(10**9) if c[0].key not in have]
    convs.sort(key=lambda c: c[0].key in answered)  # stable: dataset order within each group
    written = 0
    with LlamaTarget(path, n_ctx=64) as target, append_rows(out) as f:
        template = ChatTemplate.for_target(target)
        for prompt, answer in convs:
            if written >= args.limit:
                break
            prompt_ids = template.tokenize(target, [{"role": "user", "content": prompt.text}])
            answer_ids = target.tokenize(answer, add_special=False, parse_special=False)
            stop = "eos" if len(answer_ids) < args.max_tokens else "length"
            answer_ids = answer_ids[: args.max_tokens] + (
                [target.eos_token] if stop == "eos" else []
            )
            if len(prompt_ids) > 512 or len(answer_ids) < 8:
                continue
            row = {
                "key": prompt.key,
                "source": "sharegpt-answer",
                "prompt_ids": prompt_ids,
                "answer_ids": answer_ids,
                "stop": stop,
            }
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
            written += 1
    print(f"wrote {written} conversations to {out}")
    return 0


def _add_torch_args(parser) -> None:
    parser.add_argument(
        "--torch-dtype",
        default="auto",
        choices=["auto", "fp32", "bf16"],
        help="torch target weights (auto: bf16 where native: AMX/AVX512-BF16 or CUDA)",
    )
    parser.add_argument("--torch-device", default="auto", choices=["auto", "cpu", "cuda"])


def add_data_parser(sub) -> None:
    data = sub.add_parser("data", help="self-distillation corpora")
    dsub = data.add_subparsers(dest="data_command", required=True)
    gen = dsub.add_parser("generate", help="the target answers training prompts (resumable)")
    gen.add_argument("--model", default=None)
    gen.add_argument(
        "--split",
        default="train",
        choices=["train", "eval", "long", "long-train"],
        help="training prompts, held-out evaluation prompts, long-context prompts of "
        "--bucket (the last two for benchmarks), or long-context training prompts of --bucket "
        "(HotpotQA questions the benchmark does not use; --per-set of them)",
    )
    gen.add_argument("--bucket", default="2048-4096", help="long, long-train: prompt tokens lo-hi")
    gen.add_argument(
        "--out",
        default=None,
        help=f"default {DISTILL_ROOT}/<model id>/answers.jsonl, eval_answers.jsonl or "
        "<split>_<bucket>.jsonl",
    )
    gen.add_argument("--limit", type=int, default=None, help="first N prompts")
    gen.add_argument(
        "--sources",
        default=None,
        help=f"train: only prompts of these sources, comma-separated ({','.join(TRAIN_SOURCES)}"
        "), in the same fixed order; e.g. gsm8k,mbpp answers the in-domain maths and code "
        "prompts first",
    )
    gen.add_argument(
        "--per-set",
        type=int,
        default=12,
        help="eval, long: first N of every set; long-train: N prompts",
    )
    gen.add_argument(
        "--streams", type=int, default=8, help="parallel llama.cpp sequences, or torch batch size"
    )
    gen.add_argument("--max-tokens", type=int, default=384)
    gen.add_argument("--threads", type=int, default=None)
    gen.add_argument(
        "--generator",
        default="llama",
        choices=["llama", "torch"],
        help="who answers: llama.cpp (the run-time target) or the same GGUF in torch "
        "(the [train] extra; batched, for a GPU; rows record their generator)",
    )
    _add_torch_args(gen)
    gen.set_defaults(func=cmd_data_generate)
    conv = dsub.add_parser(
        "conversations", help="ShareGPT turns with their own answers (prefill-labelled data)"
    )
    conv.add_argument("--model", default=None)
    conv.add_argument(
        "--out", default=None, help=f"default {DISTILL_ROOT}/<model id>/sharegpt_answers.jsonl"
    )
    conv.add_argument("--limit", type=int, default=1000)
    conv.add_argument("--max-tokens", type=int, default=384)
    conv.set_defaults(func=cmd_data_conversations)
    check = dsub.add_parser(
        "torch-check",
        help="the GGUF in torch vs llama.cpp on held-out text: speed of features, labels "
        "and batched generation; feature cosine and argmax agreement ([train] extra)",
    )
    check.add_argument("--model", default=None)
    check.add_argument("--answers", default=str(EVAL_CORPUS), help="held-out answers")
    check.add_argument(
        "--dtype",
        default="all",
        choices=["all", "auto", "fp32", "bf16"],
        help="torch dtypes to measure (all: fp32, and bf16 where it runs natively)",
    )
    check.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    check.add_argument("--tokens", type=int, default=8192, help="held-out tokens")
    check.add_argument("--batch", type=int, default=8, help="torch sequences per forward")
    check.add_argument("--gen-prompts", type=int, default=8, help="prompts, generated at once")
    check.add_argument("--gen-tokens", type=int, default=128, help="new tokens per prompt")
    check.add_argument("--threads", type=int, default=None)
    check.add_argument("--out", default=None, help="folder for torch_check.json and .md")
    check.set_defaults(func=cmd_data_torch_check)


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
    from engine.corpora import Prompt
    from engine.hyflash.distill import BatchedGreedy
    from engine.hyflash.features import llama_rows
    from engine.target import LlamaTarget

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
    from engine.hyflash.torch_target import TorchTarget

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
    from engine.hyflash.distill import load_answers
    from engine.hyflash.torch_target import native_bf16, resolve_device
    from engine.models import resolve_target
    from engine.target import default_threads

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
    eos = _eog_ids(gguf)
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
    _record_source_verdict(table, args.device)
    return 0


def _record_source_verdict(table: list[dict], device: str, path: Path | None = None) -> str:
    """Remember the fastest feature source among those whose features agree with llama.cpp's
    (cosine mean >= 0.995), so `hyflash train --feature-source auto` takes it on this machine."""
    import json

    from engine.hyflash import features

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
        "| target | features tok/s | labels tok/s | generation tok/s | cosine mean / min "
        "| norm ratio | argmax agreement | answers = llama.cpp's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["results"]:
        agree = (
            f"{r['cosine_mean']:.5f} / {r['cosine_min']:.4f} | {r['norm_ratio_mean']:.4f} | "
            f"{r['argmax_agreement']:.3f} | {r['answers_equal']}"
            if "cosine_mean" in r
            else "reference | | | "
        )
        lines.append(
            f"| {r['name']} | {r['features_tok_s']:.0f} | {r['labels_tok_s']:.0f} | "
            f"{r['generation_tok_s']:.1f} | {agree} |"
        )
    best = max(result["results"], key=lambda r: r["features_tok_s"])
    lines += ["", f"Fastest feature source here: {best['name']}."]
    return "\n".join(lines)


def _split_val(keys: list[str], frac: float) -> tuple[list[int], list[int]]:
    """A fixed validation split by hash of the prompt key (stable as the corpus grows)."""
    import zlib

    val = [i for i, k in enumerate(keys) if zlib.crc32(k.encode()) % 1000 < frac * 1000]
    chosen = set(val)
    return [i for i in range(len(keys)) if i not in chosen], val


def _source_of(key: str) -> str:
    """A corpus key's prompt source: its part before '/' (e.g. gsm8k/12 -> gsm8k)."""
    return key.split("/", 1)[0]


def _source_weights(arg: str | None, keys: list[str]) -> np.ndarray | None:
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
    present = {_source_of(k) for k in keys}
    if missing := sorted(set(named) - present):
        raise SystemExit(f"--source-weight: no training sequences from {', '.join(missing)}")
    weights = np.array([named.get(_source_of(k), 1.0) for k in keys])
    if not weights.sum() > 0:
        raise SystemExit("--source-weight: every sequence weighs 0")
    return weights


def _corpus_with_features(
    path: Path,
    with_labels: bool,
    args: argparse.Namespace,
    gguf: Path,
    cache: str | None,
    max_answers: int | None,
    layers: tuple[int, ...],
    sources: frozenset[str] | None = None,
):
    """(tokens, prompt_lens, keys, features, labels or None) of the first max_answers
    sequences of one corpus (of those whose prompts come from `sources`, when given),
    features (and target labels) from the prefill cache; rank 0 fills the cache, the others
    wait for it. A subset has a cache of its own: a larger run later copies those sequences'
    features from it (features.py reuses them by content)."""
    import torch.distributed as dist

    from engine.hyflash.features import cache_dir_for, feature_cache, load_corpus, resolve_source

    tokens, prompt_lens, keys = load_corpus(path, args.max_len)
    if sources is not None:
        keep = [i for i, k in enumerate(keys) if _source_of(k) in sources]
        tokens, prompt_lens, keys = ([x[i] for i in keep] for x in (tokens, prompt_lens, keys))
    n = max_answers or len(tokens)
    tokens, prompt_lens, keys = tokens[:n], prompt_lens[:n], keys[:n]
    if not tokens:
        return [], [], [], [], None
    source = resolve_source(args.feature_source, args.torch_dtype, args.torch_device)
    cache_dir = Path(cache) if cache else cache_dir_for(gguf, keys, with_labels, source, layers)
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    if rank == 0:
        start = time.perf_counter()
        feats, labels = feature_cache(
            tokens,
            gguf,
            cache_dir,
            threads=args.llama_threads,
            with_labels=with_labels,
            source=source,
            device=args.torch_device,
            layers=layers,
        )
        n_tok = sum(len(t) for t in tokens)
        took = time.perf_counter() - start
        print(
            f"{path.name}: {source} features{' + labels' if with_labels else ''} of {n_tok} "
            f"tokens ready in {took:.0f} s ({n_tok / max(took, 1e-9):.0f} tok/s; instant when "
            "cached)"
        )
    if distributed:
        dist.barrier()
    if rank != 0:
        feats, labels = feature_cache(
            tokens, gguf, cache_dir, with_labels=with_labels, source=source, layers=layers
        )
    return tokens, prompt_lens, keys, feats, labels


def _training_corpus(
    args: argparse.Namespace, gguf: Path, layers: tuple[int, ...]
) -> tuple[list, ...]:
    """(tokens, prompt_lens, keys, features, labels or None) of --corpus, with --extra-corpus
    appended (always labelled by the target: it did not write that text)."""
    tokens, prompt_lens, keys, feats, labels = _corpus_with_features(
        Path(args.corpus),
        args.labels == "target",
        args,
        gguf,
        args.cache,
        args.max_answers,
        layers,
        _sources(args.sources),
    )
    if not tokens or not args.extra_corpus:
        return tokens, prompt_lens, keys, feats, labels
    more = _corpus_with_features(Path(args.extra_corpus), True, args, gguf, None, None, layers)
    return (
        [*tokens, *more[0]],
        [*prompt_lens, *more[1]],
        [*keys, *more[2]],
        [*feats, *more[3]],
        [*(labels if labels is not None else tokens), *more[4]],
    )


def _drafter_config(args: argparse.Namespace, gguf: Path) -> DrafterConfig:
    """--config, or the knobs on the command line for this target's vocabulary and width."""
    if args.config:
        return DrafterConfig.load(args.config)
    vocab, hidden = _embedding_shape(gguf)  # the target's, not the default model's
    layers = tuple(int(x) for x in args.feature_layers.split(",") if x.strip())
    return DrafterConfig(
        hidden_size=hidden,
        feature_dim=(len(layers) + 1) * hidden,
        feature_layers=layers,
        vocab_size=vocab,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        window=args.window,
        block_size=args.block_size,
        attention=args.attention,
        memory=args.memory,
        history=args.history,
        cross_slot=not args.no_cross_slot,
        causal_slots=args.causal_slots,
        copy=not args.no_copy,
        draft_vocab_size=args.draft_vocab,
    )


def _write_run_info(
    out: Path, cfg: DrafterConfig, args, tokens, answer_tokens, split, precision: str
) -> None:
    """config.json and data.json of a run folder (export copies data.json into the card)."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    cfg.save(out / "config.json")
    info = {
        "corpus": str(args.corpus),
        "answers": len(tokens),
        "train": len(split[0]),
        "val": len(split[1]),
        "tokens": int(sum(len(t) for t in tokens)),
        "answer_tokens": int(sum(len(a) for a in answer_tokens)),
        "extra_corpus": args.extra_corpus,
        "copy_trust": args.copy_trust,
        "sources": args.sources,
        "source_weight": args.source_weight,
        "precision": precision,
    }
    (out / "data.json").write_text(json.dumps(info, indent=2))


def _training_precision(precision: str) -> str:
    """--precision auto -> bf16 where the CPU multiplies bf16 natively, else fp32."""
    from engine.hyflash.torch_target import resolve_dtype

    return resolve_dtype(precision, "cpu")


def cmd_train(args: argparse.Namespace, on_step: Callable[[dict], None] | None = None) -> int:
    """`hyflash train`; on_step (callers in-process) receives each step's record."""
    import torch
    import torch.distributed as dist

    from engine.hyflash.model import HyFlashModel
    from engine.hyflash.train import (
        Sequences,
        init_distributed,
        select_draft_vocab,
        train,
    )
    from engine.models import resolve_target

    rank, world = init_distributed()
    model_id, gguf = resolve_target(args.model)
    args.corpus = args.corpus or str(default_answers_path(model_id, "train", ""))
    out = Path(args.out)
    cfg = _drafter_config(args, gguf)
    tokens, prompt_lens, keys, feats, labels = _training_corpus(args, gguf, cfg.feature_layers)
    if not tokens:
        print(f"error: no usable answers in {args.corpus}", file=sys.stderr)
        return 2
    data = Sequences(tokens, feats, prompt_lens, labels, _source_weights(args.source_weight, keys))
    train_idx, val_idx = _split_val(keys, args.val_frac)
    # what the slots must predict: the target's labels where the text is not its own
    answer_tokens = [t[p:] for t, p in zip(labels or tokens, prompt_lens, strict=True)]
    draft_ids = None
    if cfg.draft_vocab_size:
        corpus_ids = [int(x) for i in train_idx for x in answer_tokens[i]]
        eog = _eog_ids(gguf)
        draft_ids = select_draft_vocab(corpus_ids, cfg.draft_vocab_size, cfg.vocab_size, eog)
    torch.manual_seed(args.seed)  # same initial weights in every process and every rerun
    model = HyFlashModel.from_gguf(cfg, gguf, draft_ids)
    tcfg = TrainConfig(
        steps=args.steps,
        batch_seqs=args.batch,
        anchors_per_seq=args.anchors,
        lr=args.lr,
        warmup=min(args.warmup, max(1, args.steps // 10)),
        seed=args.seed,
        eval_every=args.eval_every,
        ckpt_every=args.eval_every,
        threads=args.threads,
        copy_trust=args.copy_trust,
        precision=_training_precision(args.precision),
    )
    if rank == 0:
        _write_run_info(out, cfg, args, tokens, answer_tokens, (train_idx, val_idx), tcfg.precision)
    val = data.subset(val_idx) if val_idx else None
    history = train(
        model, data.subset(train_idx), val, tcfg, out, show_progress=not args.quiet, on_step=on_step
    )
    if rank == 0 and history:
        print(f"final loss {history[-1]['loss']:.4f} after {len(history)} steps")
    if world > 1:
        dist.destroy_process_group()
        # everything is saved and closed: leave without interpreter teardown, where a gloo
        # worker thread has aborted a torchrun child once ("terminate called without an
        # active exception" during finalisation, after a finished run)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _embedding_shape(gguf: Path) -> tuple[int, int]:
    with GGUFIndex(gguf) as index:
        return index.embedding_shape()


def _eog_ids(gguf: Path) -> list[int]:
    from engine.target import LlamaTarget

    with LlamaTarget(gguf, n_ctx=64) as t:
        return [i for i in range(t.n_vocab) if t.is_eog(i)]


def cmd_export(args: argparse.Namespace) -> int:
    import json

    import torch

    from engine.hyflash.export import export_drafter
    from engine.hyflash.model import HyFlashModel
    from engine.models import resolve_target

    _, gguf = resolve_target(args.model)
    run = Path(args.run)
    cfg = DrafterConfig.load(run / "config.json")
    state = torch.load(run / args.checkpoint, map_location="cpu", weights_only=False)
    model = HyFlashModel.from_gguf(cfg, gguf, state["model"]["draft_ids"].numpy())
    model.load_state_dict(state["model"])
    model.eval()
    history = state["history"]
    vals = [h["val"] for h in history if "val" in h]
    metrics = {"steps": state["step"], "final_loss": history[-1]["loss"] if history else None}
    if vals:
        metrics.update(
            val_slot_accuracy=vals[-1]["slot_accuracy"], val_tau_estimate=vals[-1]["tau_estimate"]
        )
    data = json.loads((run / "data.json").read_text()) if (run / "data.json").exists() else {}
    path = export_drafter(
        model,
        args.out,
        target=target_identity(gguf),
        name=args.name,
        data=data,
        metrics=metrics,
        quantize=tuple(args.quantize),
        default_weights=args.default_weights,
    )
    if args.keep_only:
        _keep_only_weights(Path(path), args.keep_only)
    print(f"exported to {path}")
    return 0


def _keep_only_weights(folder: Path, keep: str) -> None:
    """Ship one weight variant: delete the other graph files and drop them from the card."""
    import json

    card_path = folder / "card.json"
    card = json.loads(card_path.read_text())
    for graph, variants in card["files"].items():
        if keep not in variants:
            raise SystemExit(f"error: no {keep} weights were exported for {graph}")
        for variant, name in list(variants.items()):
            if variant != keep:
                (folder / name).unlink()
                del variants[variant]
    card["default_weights"] = keep
    card_path.write_text(json.dumps(card, indent=2))


def add_train_parsers(sub) -> None:
    tr = sub.add_parser("train", help="train a HyFlash drafter (torch; resumable)")
    tr.add_argument(
        "--corpus", default=None, help=f"default {DISTILL_ROOT}/<model id>/answers.jsonl"
    )
    tr.add_argument("--out", required=True, help="run folder (checkpoint, config, history)")
    tr.add_argument("--model", default=None)
    tr.add_argument("--cache", default=None, help="feature cache folder")
    tr.add_argument("--config", default=None, help="DrafterConfig JSON (overrides the knobs)")
    tr.add_argument("--d-model", type=int, default=DrafterConfig.d_model)
    tr.add_argument("--layers", type=int, default=DrafterConfig.n_layers)
    tr.add_argument("--heads", type=int, default=DrafterConfig.n_heads)
    tr.add_argument("--window", type=int, default=DrafterConfig.window)
    tr.add_argument("--block-size", type=int, default=DrafterConfig.block_size)
    tr.add_argument("--attention", default=DrafterConfig.attention, choices=ATTENTION_KINDS)
    tr.add_argument("--memory", default=DrafterConfig.memory, choices=MEMORY_KINDS)
    tr.add_argument("--history", default=DrafterConfig.history, choices=HISTORY_KINDS)
    tr.add_argument("--no-cross-slot", action="store_true")
    tr.add_argument(
        "--causal-slots",
        action="store_true",
        help="slots see earlier slots only: a block of B runs B rows at run time, not 16",
    )
    tr.add_argument("--no-copy", action="store_true")
    tr.add_argument("--draft-vocab", type=int, default=DrafterConfig.draft_vocab_size)
    tr.add_argument(
        "--feature-layers",
        default="",
        help="target layers whose inputs are fused with the final state as the drafter's "
        "features, e.g. 2,15,27 (low, middle, high); empty: the final state only",
    )
    tr.add_argument("--steps", type=int, default=TrainConfig.steps)
    tr.add_argument("--batch", type=int, default=TrainConfig.batch_seqs)
    tr.add_argument("--anchors", type=int, default=TrainConfig.anchors_per_seq)
    tr.add_argument("--lr", type=float, default=TrainConfig.lr)
    tr.add_argument("--warmup", type=int, default=TrainConfig.warmup)
    tr.add_argument("--seed", type=int, default=TrainConfig.seed)
    tr.add_argument("--eval-every", type=int, default=TrainConfig.eval_every)
    tr.add_argument("--val-frac", type=float, default=0.05)
    tr.add_argument("--max-len", type=int, default=1024)
    tr.add_argument("--max-answers", type=int, default=None, help="first N sequences only")
    tr.add_argument(
        "--sources",
        default=None,
        help=f"--corpus answers to prompts of these sources only, comma-separated "
        f"({','.join(TRAIN_SOURCES)}); --max-answers counts among them",
    )
    tr.add_argument(
        "--source-weight",
        default=None,
        help="draw sequences of these prompt sources more or less often than the others, "
        "e.g. gsm8k=3,mbpp=3 (sources weigh 1 unless named; the validation split is not "
        "weighted)",
    )
    tr.add_argument(
        "--extra-corpus",
        default=None,
        help="a second corpus of text the target did not write (hyflash data "
        "conversations), trained on the target's labels",
    )
    tr.add_argument(
        "--labels",
        default="tokens",
        choices=["tokens", "target"],
        help="train on the stored tokens (self-distilled answers) or on the "
        "target's own prediction at every position (text it did not write)",
    )
    tr.add_argument("--threads", type=int, default=TrainConfig.threads, help="torch threads")
    tr.add_argument(
        "--copy-trust",
        type=float,
        default=TrainConfig.copy_trust,
        help="weight of the copy-path trust loss: the gate learns to take the n-gram lookup "
        "candidate where it is right (0: NLL only)",
    )
    tr.add_argument(
        "--precision",
        default=TrainConfig.precision,
        choices=["fp32", "bf16", "auto"],
        help="the training forward's matmuls: fp32, or bf16 under autocast (about 1.5x faster "
        "steps on AMX CPUs; weights and the exported drafter stay fp32); auto: bf16 where the "
        "CPU runs it natively (AMX or AVX512-BF16), else fp32",
    )
    tr.add_argument(
        "--llama-threads", type=int, default=None, help="threads for prefill (either source)"
    )
    tr.add_argument(
        "--feature-source",
        default="auto",
        choices=["auto", "llama", "torch"],
        help="who computes features (and --labels target): llama.cpp prefill, or the same "
        "GGUF in torch; auto: the faster one `hyflash data torch-check` measured here, else "
        "torch",
    )
    _add_torch_args(tr)
    tr.add_argument("--quiet", action="store_true")
    tr.set_defaults(func=cmd_train)

    ex = sub.add_parser("export", help="export a trained run to an ONNX drafter folder")
    ex.add_argument("--run", required=True)
    ex.add_argument("--out", required=True)
    ex.add_argument("--model", default=None)
    ex.add_argument("--name", default="hyflash")
    ex.add_argument(
        "--checkpoint",
        default="checkpoint.pt",
        help="checkpoint.pt (last) or best.pt (best validation)",
    )
    ex.add_argument("--quantize", nargs="*", default=["int8"], choices=["int8", "int4"])
    ex.add_argument(
        "--keep-only",
        default=None,
        choices=["fp32", "int8", "int4"],
        help="ship one weight variant (a smaller folder)",
    )
    ex.add_argument("--default-weights", default=None, choices=["fp32", "int8", "int4"])
    ex.set_defaults(func=cmd_export)
