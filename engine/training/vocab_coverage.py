"""`hyflash data vocab-coverage`: how much of a target's held-out answers a draft vocabulary of
each size covers, chosen as training chooses it (`select_draft_vocab`: the end-of-generation
ids, then the most frequent ids of the training answers). The draft head proposes only ids in
its vocabulary, so this coverage bounds every slot's accuracy from above."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from engine.bench.report import markdown_table

SIZES = "8192,16384,32768"


def _answer_ids(rows: list[dict]) -> np.ndarray:
    return np.concatenate([np.asarray(r["answer_ids"], dtype=np.int64) for r in rows])


def coverage_rows(
    train_ids: np.ndarray,
    heldout_ids: np.ndarray,
    sizes: list[int],
    vocab_size: int,
    always: list[int],
) -> list[dict]:
    """Per draft vocabulary size: the share of held-out and of training answer tokens whose id
    it holds."""
    from engine.training.train import select_draft_vocab

    rows = []
    for size in sizes:
        ids = select_draft_vocab(train_ids, min(size, vocab_size), vocab_size, always)
        rows.append(
            {
                "size": int(len(ids)),
                "heldout_coverage": float(np.isin(heldout_ids, ids).mean()),
                "train_coverage": float(np.isin(train_ids, ids).mean()),
            }
        )
    return rows


def coverage_table(result: dict) -> list[str]:
    def share(x: float) -> str:
        return f"{100 * x:.1f}%"

    body = [
        [f"{r['size']:,}", share(r["heldout_coverage"]), share(r["train_coverage"])]
        for r in result["rows"]
    ]
    seen = result["seen_in_training"]
    body.append(
        [
            f"every id in the training answers ({seen['ids']:,})",
            share(seen["heldout_coverage"]),
            "100.0%",
        ]
    )
    return markdown_table(
        ["draft vocabulary", "held-out answer tokens", "training answer tokens"], body
    )


def cmd_data_vocab_coverage(args: argparse.Namespace) -> int:
    from engine.bench.provenance import provenance
    from engine.bench.report import publish
    from engine.models.resolve import resolve_target
    from engine.paths import default_answers_path
    from engine.training.distill import load_answers
    from engine.training.target_vocab import embedding_shape, eog_ids

    model_id, gguf = resolve_target(args.model)
    answers = Path(args.answers) if args.answers else default_answers_path(model_id, "train", "")
    heldout = Path(args.heldout) if args.heldout else default_answers_path(model_id, "eval", "")
    train_rows = load_answers(answers)[: args.max_answers]  # file order, as training reads it
    held_rows = load_answers(heldout)
    if not train_rows or not held_rows:
        empty = answers if not train_rows else heldout
        print(f"error: no answers in {empty}", file=sys.stderr)
        return 2
    train_ids, held_ids = _answer_ids(train_rows), _answer_ids(held_rows)
    vocab_size, _ = embedding_shape(gguf)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    seen = np.unique(train_ids)
    result = {
        "provenance": provenance(target=gguf),
        "model": model_id,
        "vocab_size": vocab_size,
        "answers": str(answers),
        "train_answers": len(train_rows),
        "train_tokens": int(train_ids.size),
        "heldout": str(heldout),
        "heldout_answers": len(held_rows),
        "heldout_tokens": int(held_ids.size),
        "seen_in_training": {
            "ids": int(seen.size),
            "heldout_coverage": float(np.isin(held_ids, seen).mean()),
        },
        "rows": coverage_rows(train_ids, held_ids, sizes, vocab_size, eog_ids(gguf)),
    }
    lines = [
        f"{model_id} (vocabulary {vocab_size:,}): draft vocabularies from {len(train_rows):,} "
        f"training answers ({train_ids.size:,} tokens), coverage of {len(held_rows)} held-out "
        f"answers ({held_ids.size:,} tokens)",
        "",
        *coverage_table(result),
    ]
    publish(result, "\n".join(lines), args.out, "vocab_coverage")
    return 0
