"""`hyflash data ...` (and, with torch installed, training and export) subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_CORPUS = Path("data/distill/smollm2-135m-instruct/answers.jsonl")


def cmd_data_generate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from engine.hyflash.distill import generate_corpus
    from engine.hyflash.prompts import train_prompts
    from engine.models import resolve_target
    from engine.target import LlamaTarget

    _, path = resolve_target(args.model)
    prompts = train_prompts()[: args.limit]
    target = LlamaTarget(path, n_ctx=512, n_threads=args.threads)
    bar = tqdm(total=len(prompts), unit="answer", file=sys.stderr)

    def progress(done: int, total: int, tok_s: float) -> None:
        bar.total = total
        bar.update(1)
        bar.set_postfix(tok_s=f"{tok_s:.0f}")

    try:
        written = generate_corpus(
            target, prompts, Path(args.out), streams=args.streams, max_tokens=args.max_tokens,
            n_threads=args.threads, progress=progress,
        )
    finally:
        bar.close()
        target.close()
    print(f"wrote {written} answers to {args.out}")
    return 0


def add_data_parser(sub) -> None:
    data = sub.add_parser("data", help="self-distillation corpora")
    dsub = data.add_subparsers(dest="data_command", required=True)
    gen = dsub.add_parser("generate", help="the target answers training prompts (resumable)")
    gen.add_argument("--model", default=None)
    gen.add_argument("--out", default=str(DEFAULT_CORPUS))
    gen.add_argument("--limit", type=int, default=None, help="first N training prompts")
    gen.add_argument("--streams", type=int, default=8)
    gen.add_argument("--max-tokens", type=int, default=384)
    gen.add_argument("--threads", type=int, default=None)
    gen.set_defaults(func=cmd_data_generate)


def _split_val(keys: list[str], frac: float) -> tuple[list[int], list[int]]:
    """A fixed validation split by hash of the prompt key (stable as the corpus grows)."""
    import zlib

    val = [i for i, k in enumerate(keys) if zlib.crc32(k.encode()) % 1000 < frac * 1000]
    chosen = set(val)
    return [i for i in range(len(keys)) if i not in chosen], val


def cmd_train(args: argparse.Namespace) -> int:
    import hashlib
    import json

    import torch
    import torch.distributed as dist

    from engine.hyflash.config import DrafterConfig, select_draft_vocab
    from engine.hyflash.model import HyFlashModel
    from engine.hyflash.train import (
        Sequences,
        TrainConfig,
        feature_cache,
        init_distributed,
        load_corpus,
        train,
    )
    from engine.models import resolve_target

    rank, world = init_distributed()
    _, gguf = resolve_target(args.model)
    out = Path(args.out)
    tokens, prompt_lens, keys = load_corpus(Path(args.corpus), args.max_len)
    if not tokens:
        print(f"error: no usable answers in {args.corpus}", file=sys.stderr)
        return 2
    digest = hashlib.sha1("|".join(keys).encode()).hexdigest()[:12]
    cache = Path(args.cache or f"runs/features/{gguf.stem}-{digest}")
    if rank == 0:
        feats = feature_cache(tokens, gguf, cache, threads=args.llama_threads)
    if world > 1:
        dist.barrier()
    if rank != 0:
        feats = feature_cache(tokens, gguf, cache)
    data = Sequences([t for t in tokens], feats, prompt_lens)
    train_idx, val_idx = _split_val(keys, args.val_frac)
    if args.config:
        cfg = DrafterConfig.load(args.config)
    else:
        cfg = DrafterConfig(
            d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, window=args.window,
            block_size=args.block_size, attention=args.attention, memory=args.memory,
            history=args.history, cross_slot=not args.no_cross_slot, copy=not args.no_copy,
            draft_vocab_size=args.draft_vocab,
        )
    answer_tokens = [t[p:] for t, p in zip(tokens, prompt_lens, strict=True)]
    eog = _eog_ids(gguf)
    draft_ids = None
    if cfg.draft_vocab_size:
        corpus_ids = [int(x) for i in train_idx for x in answer_tokens[i]]
        draft_ids = select_draft_vocab(corpus_ids, cfg.draft_vocab_size, cfg.vocab_size, eog)
    torch.manual_seed(args.seed)  # same initial weights in every process and every rerun
    model = HyFlashModel.from_gguf(cfg, gguf, draft_ids)
    tcfg = TrainConfig(
        steps=args.steps, batch_seqs=args.batch, anchors_per_seq=args.anchors, lr=args.lr,
        warmup=min(args.warmup, max(1, args.steps // 10)), seed=args.seed,
        eval_every=args.eval_every, ckpt_every=args.eval_every, threads=args.threads,
    )
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        cfg.save(out / "config.json")
        (out / "data.json").write_text(json.dumps({
            "corpus": str(args.corpus), "answers": len(tokens), "train": len(train_idx),
            "val": len(val_idx), "tokens": int(sum(len(t) for t in tokens)),
            "answer_tokens": int(sum(len(a) for a in answer_tokens)),
        }, indent=2))
    history = train(model, data.subset(train_idx), data.subset(val_idx) if val_idx else None,
                    tcfg, out, show_progress=not args.quiet)
    if rank == 0 and history:
        print(f"final loss {history[-1]['loss']:.4f} after {len(history)} steps")
    if world > 1:
        dist.destroy_process_group()
    return 0


def _eog_ids(gguf: Path) -> list[int]:
    from engine.target import LlamaTarget

    with LlamaTarget(gguf, n_ctx=64) as t:
        return [i for i in range(t.n_vocab) if t.is_eog(i)]


def cmd_export(args: argparse.Namespace) -> int:
    import json

    import torch

    from engine.hyflash.config import DrafterConfig
    from engine.hyflash.export import export_drafter
    from engine.hyflash.gguf_weights import target_identity
    from engine.hyflash.model import HyFlashModel
    from engine.models import resolve_target

    _, gguf = resolve_target(args.model)
    run = Path(args.run)
    cfg = DrafterConfig.load(run / "config.json")
    state = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=False)
    model = HyFlashModel.from_gguf(cfg, gguf, state["model"]["draft_ids"].numpy())
    model.load_state_dict(state["model"])
    model.eval()
    history = state["history"]
    vals = [h["val"] for h in history if "val" in h]
    metrics = {"steps": state["step"], "final_loss": history[-1]["loss"] if history else None}
    if vals:
        metrics.update(val_slot_accuracy=vals[-1]["slot_accuracy"],
                       val_tau_estimate=vals[-1]["tau_estimate"])
    data = json.loads((run / "data.json").read_text()) if (run / "data.json").exists() else {}
    path = export_drafter(model, args.out, target=target_identity(gguf), name=args.name,
                          data=data, metrics=metrics, quantize=tuple(args.quantize),
                          default_weights=args.default_weights)
    print(f"exported to {path}")
    return 0


def add_train_parsers(sub) -> None:
    tr = sub.add_parser("train", help="train a HyFlash drafter (torch; resumable)")
    tr.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    tr.add_argument("--out", required=True, help="run folder (checkpoint, config, history)")
    tr.add_argument("--model", default=None)
    tr.add_argument("--cache", default=None, help="feature cache folder")
    tr.add_argument("--config", default=None, help="DrafterConfig JSON (overrides the knobs)")
    tr.add_argument("--d-model", type=int, default=384)
    tr.add_argument("--layers", type=int, default=1)
    tr.add_argument("--heads", type=int, default=6)
    tr.add_argument("--window", type=int, default=64)
    tr.add_argument("--block-size", type=int, default=8)
    tr.add_argument("--attention", default="local", choices=["local", "full"])
    tr.add_argument("--memory", default="mamba2", choices=["mamba2", "gdn", "none"])
    tr.add_argument("--history", default="all", choices=["all", "last512", "last1"])
    tr.add_argument("--no-cross-slot", action="store_true")
    tr.add_argument("--no-copy", action="store_true")
    tr.add_argument("--draft-vocab", type=int, default=8192)
    tr.add_argument("--steps", type=int, default=2000)
    tr.add_argument("--batch", type=int, default=8)
    tr.add_argument("--anchors", type=int, default=16)
    tr.add_argument("--lr", type=float, default=2e-3)
    tr.add_argument("--warmup", type=int, default=100)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--eval-every", type=int, default=250)
    tr.add_argument("--val-frac", type=float, default=0.05)
    tr.add_argument("--max-len", type=int, default=1024)
    tr.add_argument("--threads", type=int, default=1, help="torch threads")
    tr.add_argument("--llama-threads", type=int, default=None, help="threads for prefill")
    tr.add_argument("--quiet", action="store_true")
    tr.set_defaults(func=cmd_train)

    ex = sub.add_parser("export", help="export a trained run to an ONNX drafter folder")
    ex.add_argument("--run", required=True)
    ex.add_argument("--out", required=True)
    ex.add_argument("--model", default=None)
    ex.add_argument("--name", default="hyflash")
    ex.add_argument("--quantize", nargs="*", default=["int8"], choices=["int8", "int4"])
    ex.add_argument("--default-weights", default=None, choices=["fp32", "int8", "int4"])
    ex.set_defaults(func=cmd_export)
