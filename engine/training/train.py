"""Training of HyFlash drafters by self-distillation (torch; the [train] extra).

Data: the committed corpus of token ids (distill.py) plus target features recomputed by
prefill into a float16 memmap cache (resumable). Training: random anchors in the answer part
of each sequence, context strictly before the anchor, slot k predicts anchor+k with loss weight
gamma**(k-1) (inside the model), AdamW, warm-up + cosine schedule, gradient clipping, seeded,
checkpoints with resume, tqdm progress, validation with per-slot accuracy.

Distributed: under `torchrun --nproc_per_node N` each rank takes an equal slice of the same
global batch (gloo on CPU, NCCL on GPUs); the loss is normalised by the global weight sum, so
the gradients, and hence the loss curve, equal a single process on that batch.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from engine.atomic_files import write_atomically
from engine.training.model import HyFlashModel
from engine.training.soft_targets import distill_loss, own_text_mask
from engine.training.train_config import TrainConfig


@dataclass
class Sequences:
    """Token sequences (prompt + answer) with their target features."""

    tokens: list[np.ndarray]  # int64 (T,)
    features: list[np.ndarray]  # float16/32 (T, F): feature i predicts token i+1
    prompt_lens: list[int]
    labels: list[np.ndarray] | None = None  # training targets when they are not the tokens
    # how often training draws each sequence, relative to the others (None: uniformly)
    weights: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def subset(self, idx: Sequence[int]) -> Sequences:
        return Sequences(
            [self.tokens[i] for i in idx],
            [self.features[i] for i in idx],
            [self.prompt_lens[i] for i in idx],
            None if self.labels is None else [self.labels[i] for i in idx],
            None if self.weights is None else self.weights[list(idx)],
        )


def select_draft_vocab(
    token_ids: Iterable[int] | np.ndarray, size: int, vocab_size: int, always: Iterable[int] = ()
) -> np.ndarray:
    """The draft vocabulary: `always` (e.g. end-of-generation ids) then the most frequent ids
    of a corpus (ties: lower id), padded with the lowest unused ids; sorted, int64."""
    if size > vocab_size:
        raise ValueError(f"a draft vocabulary of {size} exceeds the vocabulary {vocab_size}")
    ids = (
        np.fromiter(token_ids, dtype=np.int64)
        if not isinstance(token_ids, np.ndarray)
        else (token_ids.astype(np.int64).ravel())
    )
    counts = np.bincount(ids, minlength=vocab_size)[:vocab_size]
    order = np.lexsort((np.arange(vocab_size), -counts))  # count descending, then id
    chosen = list(dict.fromkeys([*(int(t) for t in always), *order.tolist()]))[:size]
    return np.sort(np.asarray(chosen, dtype=np.int64))


# ----- batches --------------------------------------------------------------------------------


def sample_anchors(
    data: Sequences, seq_idx: Sequence[int], anchors_per_seq: int, rng: np.random.Generator
) -> np.ndarray:
    """Anchors uniformly in each answer (the drafter's job at run time), leaving at least one
    target token: (len(seq_idx), anchors_per_seq)."""
    rows = []
    for i in seq_idx:
        lo, hi = data.prompt_lens[i], len(data.tokens[i]) - 2
        rows.append(rng.integers(lo, max(lo, hi) + 1, size=anchors_per_seq))
    return np.stack(rows)


def make_batch(data: Sequences, seq_idx: Sequence[int], anchors: np.ndarray) -> dict:
    """Pad the chosen sequences into tensors."""
    seqs = [data.tokens[i] for i in seq_idx]
    t = max(len(s) for s in seqs)
    f_dim = data.features[seq_idx[0]].shape[1]
    tokens = torch.zeros(len(seqs), t, dtype=torch.int64)
    feats = torch.zeros(len(seqs), t, f_dim, dtype=torch.float32)
    for row, i in enumerate(seq_idx):
        n = len(data.tokens[i])
        tokens[row, :n] = torch.from_numpy(data.tokens[i])
        feats[row, :n] = torch.from_numpy(np.asarray(data.features[i], dtype=np.float32))
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
    labels = None
    if data.labels is not None:
        labels = torch.zeros(len(seqs), t, dtype=torch.int64)
        for row, i in enumerate(seq_idx):
            labels[row, : len(data.labels[i])] = torch.from_numpy(data.labels[i])
    return {
        "features": feats,
        "tokens": tokens,
        "anchors": torch.from_numpy(anchors),
        "lengths": lengths,
        "labels": labels,
    }


def lr_at(step: int, tcfg: TrainConfig) -> float:
    if step < tcfg.warmup:
        return tcfg.lr * (step + 1) / tcfg.warmup
    progress = (step - tcfg.warmup) / max(1, tcfg.steps - tcfg.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return tcfg.lr * (tcfg.min_lr_frac + (1 - tcfg.min_lr_frac) * cosine)


# ----- distributed helpers --------------------------------------------------------------------


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_distributed() -> tuple[int, int]:
    """Join the torchrun process group when launched by torchrun; else single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    return _world()


def _all_sum(x: torch.Tensor) -> torch.Tensor:
    if _world()[1] > 1:
        x = x.clone()
        dist.all_reduce(x)
    return x


# ----- the loop -------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(model: HyFlashModel, data: Sequences, n_anchors: int, seed: int = 1234) -> dict:
    """Per-slot accuracy and a greedy acceptance-length estimate on fixed validation anchors."""
    model.eval()
    rng = np.random.default_rng(seed)
    correct = valid = None
    tau_sum = tau_n = 0.0
    for start in range(0, len(data), 8):
        idx = list(range(start, min(len(data), start + 8)))
        b = make_batch(data, idx, sample_anchors(data, idx, n_anchors, rng))
        out = model.forward_train(
            b["features"], b["tokens"], b["anchors"], lengths=b["lengths"], labels=b["labels"]
        )
        c = (out.correct & out.target_valid).sum((0, 1)).double()
        v = out.target_valid.sum((0, 1)).double()
        correct = c if correct is None else correct + c
        valid = v if valid is None else valid + v
        full = out.target_valid.all(-1)
        tau_sum += float(out.acceptance_length() * full.sum())
        tau_n += float(full.sum())
    model.train()
    acc = (correct / valid.clamp(min=1)).tolist()
    return {"slot_accuracy": acc, "tau_estimate": tau_sum / max(tau_n, 1.0)}


class _TrainForward(torch.nn.Module):
    """DDP syncs gradients for what runs through forward(): route forward_train there."""

    def __init__(self, model: HyFlashModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, features, tokens, anchors, lengths, labels, slot_mask):
        return self.model.forward_train(
            features, tokens, anchors, lengths=lengths, labels=labels, slot_mask=slot_mask
        )


def save_checkpoint(path: Path, model, opt, step: int, history: list[dict]) -> None:
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "history": history}
    write_atomically(path, lambda tmp: torch.save(state, tmp))


def _resume(ckpt: Path, model: HyFlashModel, opt, log) -> tuple[int, list[dict]]:
    """(step, history) of the run's last readable checkpoint (checkpoint.pt, else best.pt)
    loaded into model and opt; (0, []) fresh. One cut short (a full disk, a copy) is passed
    over with one line, never a reason to stop."""
    for path in (ckpt, ckpt.with_name("best.pt")):
        if not path.exists():
            continue
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (RuntimeError, EOFError) as exc:  # cut short; a pickle that would run code is
            # not among these: weights_only refuses it, and that stops the run
            log(f"{path.name} is unreadable ({type(exc).__name__}): passed over")
            continue
        model.load_state_dict(state["model"])  # another drafter's weights: an error, loudly
        opt.load_state_dict(state["opt"])
        log(f"resumed from step {state['step']}" + ("" if path == ckpt else f" ({path.name})"))
        return state["step"], state["history"]
    return 0, []


def _step_batch(train_data: Sequences, tcfg: TrainConfig, step: int) -> dict:
    """This rank's slice of the step's global batch: the same on every rank (seeded by step)."""
    rank, world = _world()
    per_rank = tcfg.batch_seqs // world
    rng = np.random.default_rng([tcfg.seed, step])
    w = train_data.weights
    global_idx = rng.choice(
        len(train_data),
        size=tcfg.batch_seqs,
        replace=w is not None or len(train_data) < tcfg.batch_seqs,
        p=None if w is None else w / w.sum(),
    )
    global_anchors = sample_anchors(train_data, global_idx, tcfg.anchors_per_seq, rng)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    return make_batch(train_data, global_idx[mine].tolist(), global_anchors[mine])


def _global_mean(mean: Tensor, w_local: Tensor) -> Tensor:
    """A per-rank weighted mean rescaled so that, once DDP averages gradients over ranks, the
    sum is the global batch's weighted mean."""
    return mean * w_local / _all_sum(w_local.detach()).clamp(min=1e-6) * _world()[1]


def _optimize(model: HyFlashModel, forward, opt, params, b: dict, tcfg: TrainConfig) -> tuple:
    """One optimizer step on batch b: (global-batch NLL, gradient norm, global-batch KL or
    None). What is minimised is (1 - soft_weight) NLL + soft_weight KL (+ the copy-trust term,
    a per-rank mean); the NLL is reported whatever the mix, so runs compare."""
    slot_mask = None
    if tcfg.supervision == "own" and b["labels"] is not None:
        slot_mask = own_text_mask(b["tokens"], b["labels"], b["anchors"], model.cfg.n_slots)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=tcfg.precision == "bf16"):
        out = forward(
            b["features"], b["tokens"], b["anchors"], b["lengths"], b["labels"], slot_mask
        )
    use = (out.target_valid & out.reachable).float()
    w_local = (use * model.slot_weight).sum()
    nll = _global_mean(out.loss, w_local)
    objective = (1 - tcfg.soft_weight) * nll
    kl = None
    if tcfg.soft_weight:
        kl = _global_mean(
            *distill_loss(model, b["features"], b["anchors"], out.slots, out.target_valid)
        )
        objective = objective + tcfg.soft_weight * kl
    if tcfg.copy_trust:
        objective = objective + tcfg.copy_trust * out.trust_loss
    opt.zero_grad(set_to_none=True)
    objective.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, tcfg.clip)
    opt.step()
    return _global_value(nll), float(grad_norm), None if kl is None else _global_value(kl)


def _global_value(term: Tensor) -> float:
    """The global batch's weighted mean of a term _global_mean scaled on each rank."""
    return float(_all_sum(term.detach())) / _world()[1]


def _save(out_dir: Path, model, opt, step: int, history: list[dict], tcfg: TrainConfig) -> None:
    save_checkpoint(out_dir / "checkpoint.pt", model, opt, step, history)
    if step in tcfg.keep_steps:
        save_checkpoint(out_dir / f"step-{step}.pt", model, opt, step, history)
    # small corpora overfit: keep the weights that validated best as well
    vals = [h["val"]["tau_estimate"] for h in history if "val" in h]
    if vals and vals[-1] >= max(vals):
        save_checkpoint(out_dir / "best.pt", model, opt, step, history)
    (out_dir / "history.json").write_text(json.dumps(history))


def train(
    model: HyFlashModel,
    train_data: Sequences,
    val_data: Sequences | None,
    tcfg: TrainConfig,
    out_dir: Path,
    *,
    log=print,
    show_progress: bool = True,
    on_step: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Train (resuming from out_dir/checkpoint.pt if present); return the loss history.
    on_step receives each step's record (step, loss, ...) as it is made (progress reports)."""
    from tqdm import tqdm

    torch.set_num_threads(tcfg.threads)
    rank, world = _world()
    if tcfg.batch_seqs % world:
        raise ValueError(f"batch_seqs {tcfg.batch_seqs} must be divisible by {world} ranks")
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(tcfg.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=tcfg.lr, weight_decay=tcfg.weight_decay, betas=(0.9, 0.95))
    forward = (
        torch.nn.parallel.DistributedDataParallel(_TrainForward(model))
        if world > 1
        else _TrainForward(model)
    )
    step, history = _resume(out_dir / "checkpoint.pt", model, opt, log)
    bar = tqdm(total=tcfg.steps, initial=step, disable=not show_progress or rank != 0, unit="step")
    tokens_seen, t0 = 0, time.perf_counter()
    while step < tcfg.steps:
        b = _step_batch(train_data, tcfg, step)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tcfg)
        loss, grad_norm, kl = _optimize(model, forward, opt, params, b, tcfg)
        step += 1
        tokens_seen += int(b["anchors"].numel()) * world
        rate = tokens_seen / (time.perf_counter() - t0)
        record = {
            "step": step,
            "loss": loss,
            "lr": lr_at(step - 1, tcfg),
            "grad_norm": grad_norm,
            "anchors_per_s": rate,
        }
        if kl is not None:
            record["kl"] = kl
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", anchors_s=f"{rate:.0f}")
        if val_data is not None and (step % tcfg.eval_every == 0 or step == tcfg.steps):
            record["val"] = evaluate(model, val_data, tcfg.val_anchors)
            if rank == 0:
                acc = ", ".join(f"{a:.2f}" for a in record["val"]["slot_accuracy"])
                log(
                    f"step {step}: loss {loss:.3f}, val tau~{record['val']['tau_estimate']:.2f}"
                    f", slot acc [{acc}], {rate:.0f} anchors/s"
                )
        history.append(record)
        if rank == 0 and (
            step % tcfg.ckpt_every == 0 or step == tcfg.steps or step in tcfg.keep_steps
        ):
            _save(out_dir, model, opt, step, history, tcfg)
        if on_step is not None and rank == 0:
            on_step(record)
    bar.close()
    if rank == 0:
        (out_dir / "train_config.json").write_text(json.dumps(asdict(tcfg), indent=2))
    return history
