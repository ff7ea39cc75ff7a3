"""Training knobs, torch-free so the command line can take its defaults from them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainConfig:
    steps: int = 2000
    batch_seqs: int = 8  # global batch: sequences per step (split across ranks)
    anchors_per_seq: int = 16
    lr: float = 2e-3
    min_lr_frac: float = 0.05
    weight_decay: float = 0.05
    warmup: int = 100
    clip: float = 1.0
    seed: int = 0
    eval_every: int = 250
    ckpt_every: int = 250
    # steps whose weights are also kept as step-N.pt (points of a learning curve along one run)
    keep_steps: tuple[int, ...] = ()
    val_anchors: int = 32
    threads: int = 1
    copy_trust: float = 0.0  # weight of the copy-path trust loss (model.trust_loss)
    # soft targets: what is minimised is (1 - w) * NLL of the labels + w * KL(target ||
    # drafter) over the draft vocabulary (soft_targets.py); 0: hard labels only
    soft_weight: float = 0.0
    # "all": every slot of text the target did not write learns its label; "own": only slots
    # whose preceding tokens are what the target itself predicts (soft_targets.own_text_mask)
    supervision: str = "all"
    # "bf16": the training forward's matmuls under CPU autocast (1.5x faster steps where AMX or
    # AVX512-BF16 runs them natively; emulated elsewhere, so slower); weights, optimizer
    # state, softmaxes and the exported drafter stay fp32
    precision: str = "fp32"
