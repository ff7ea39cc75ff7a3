"""`hyflash train` and `hyflash export`: a HyFlash drafter trained on a corpus with the
target's features, and a trained run exported to an ONNX drafter folder."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.drafters.hyflash_card import DrafterConfig, target_identity
from engine.paths import default_answers_path
from engine.training.selection import parse_sources, source_of, source_weights, split_val
from engine.training.target_vocab import embedding_shape, eog_ids
from engine.training.train_config import TrainConfig


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

    from engine.training.features import cache_dir_for, feature_cache, load_corpus, resolve_source

    tokens, prompt_lens, keys = load_corpus(path, args.max_len)
    if sources is not None:
        keep = [i for i, k in enumerate(keys) if source_of(k) in sources]
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


def training_corpus(
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
        parse_sources(args.sources),
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
    vocab, hidden = embedding_shape(gguf)  # the target's, not the default model's
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
        "soft_weight": args.soft_weight,
        "supervision": args.supervision,
        "sources": args.sources,
        "source_weight": args.source_weight,
        "precision": precision,
    }
    (out / "data.json").write_text(json.dumps(info, indent=2))


def _training_precision(precision: str) -> str:
    """--precision auto -> bf16 where the CPU multiplies bf16 natively, else fp32."""
    from engine.training.torch_target import resolve_dtype

    return resolve_dtype(precision, "cpu")


def cmd_train(args: argparse.Namespace, on_step: Callable[[dict], None] | None = None) -> int:
    """`hyflash train`; on_step (callers in-process) receives each step's record."""
    import torch
    import torch.distributed as dist

    from engine.models.resolve import resolve_target
    from engine.training.model import HyFlashModel
    from engine.training.train import (
        Sequences,
        init_distributed,
        select_draft_vocab,
        train,
    )

    rank, world = init_distributed()
    model_id, gguf = resolve_target(args.model)
    args.corpus = args.corpus or str(default_answers_path(model_id, "train", ""))
    out = Path(args.out)
    cfg = _drafter_config(args, gguf)
    tokens, prompt_lens, keys, feats, labels = training_corpus(args, gguf, cfg.feature_layers)
    if not tokens:
        print(f"error: no usable answers in {args.corpus}", file=sys.stderr)
        return 2
    data = Sequences(tokens, feats, prompt_lens, labels, source_weights(args.source_weight, keys))
    train_idx, val_idx = split_val(keys, args.val_frac)
    # what the slots must predict: the target's labels where the text is not its own
    answer_tokens = [t[p:] for t, p in zip(labels or tokens, prompt_lens, strict=True)]
    draft_ids = None
    if cfg.draft_vocab_size:
        corpus_ids = [int(x) for i in train_idx for x in answer_tokens[i]]
        eog = eog_ids(gguf)
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
        keep_steps=tuple(int(x) for x in args.keep_steps.split(",") if x.strip()),
        threads=args.threads,
        copy_trust=args.copy_trust,
        soft_weight=args.soft_weight,
        supervision=args.supervision,
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


def cmd_export(args: argparse.Namespace) -> int:
    import json

    import torch

    from engine.models.resolve import resolve_target
    from engine.training.export import export_drafter
    from engine.training.model import HyFlashModel

    _, gguf = resolve_target(args.model)
    run = Path(args.run)
    cfg = DrafterConfig.load(run / "config.json")
    state = torch.load(run / args.checkpoint, map_location="cpu", weights_only=True)
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
