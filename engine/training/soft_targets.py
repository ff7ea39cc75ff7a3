"""Soft targets: the target's whole next-token distribution as the drafter's supervision.

The feature cache holds the target's final normed state at every position and the drafter's
LM head is the target's own (frozen), so the target's distribution behind every slot's label
is one matrix product away in the training step: slot k (predicting token anchor + k) is
distilled towards softmax(f[anchor + k - 1] @ head) over the draft vocabulary (EAGLE, HASS,
DistillSpec train on the same signal). The drafter's side is its whole mixture (vocabulary,
pointer and lookup copies) restricted to the draft vocabulary, so the gate learns from the
target's distribution too.

And clean supervision: in text the target did not write (ShareGPT answers labelled by its
argmax) slot k's label is the target's own only while the k - 1 tokens after the anchor are
what the target itself predicts there; own_text_mask marks those slots.
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine.training.model import HyFlashModel, SlotOutput

_TINY = torch.finfo(torch.float32).tiny  # log(0) kept finite for the copy mass


@torch.no_grad()
def teacher_logprobs(model: HyFlashModel, features: Tensor, anchors: Tensor) -> Tensor:
    """(N, A, B-1, V_d): the target's log-distribution over the draft vocabulary behind each
    slot's label, from the cached final state (the last hidden_size columns of a row, fused
    layers before it) through the frozen head. No gradient: the target is the teacher."""
    n, t = features.shape[:2]
    final = features[..., -model.cfg.hidden_size :]
    pos = anchors[..., None] + torch.arange(model.cfg.n_slots, device=anchors.device)
    rows = final[torch.arange(n, device=anchors.device)[:, None, None], pos.clamp(max=t - 1)]
    with torch.autocast(rows.device.type, enabled=False):  # fp32 even under bf16 training
        return torch.log_softmax(rows.float() @ model.lm_head_t, dim=-1)


def mixture_kl(model: HyFlashModel, teacher_lp: Tensor, out: SlotOutput) -> Tensor:
    """(N, A, B-1): KL(target || drafter) over the draft vocabulary, the drafter's side its
    mixture's mass on each draft id (copies of other ids are mass the draft vocabulary does not
    see; the drafter sums to at most 1 there, so the KL is >= 0, and 0 only where the two are
    equal). The mixture differs from the vocabulary share only at the (at most L+1) ids the
    copies name, so the KL against the vocabulary share is corrected there, once per id: on
    Qwen's 16K draft vocabulary 4x cheaper than scattering the copies over the vocabulary
    (the tests' reference)."""
    p = teacher_lp.exp()
    kl = (p * (teacher_lp - out.vocab_lp)).sum(-1)
    if out.copy_lp is None:
        return kl
    d, order = model.target_to_draft[out.copy_ids].sort(-1)  # ids outside the vocabulary: -1
    copy_p = out.copy_lp.exp().gather(-1, order)
    first = torch.ones_like(d, dtype=torch.bool)  # the first entry of each id's run
    first[..., 1:] = d[..., 1:] != d[..., :-1]
    run = first.cumsum(-1) - 1
    mass = torch.zeros_like(copy_p).scatter_add(-1, run, copy_p).gather(-1, run)
    di = d.clamp(min=0)
    v_lp = out.vocab_lp.gather(-1, di)
    log_q = torch.logaddexp(v_lp, torch.log(mass.clamp(min=_TINY)))
    fix = p.gather(-1, di) * (v_lp - log_q)
    return kl + torch.where(first & (d >= 0), fix, torch.zeros_like(fix)).sum(-1)


def distill_loss(
    model: HyFlashModel, features: Tensor, anchors: Tensor, out: SlotOutput, use: Tensor
) -> tuple[Tensor, Tensor]:
    """(mean KL, weight sum): the decay-weighted mean of the slots' KL(target || drafter)
    over the slots `use` marks (N, A, B-1), with the same gamma**(k-1) weights as the NLL."""
    kl = mixture_kl(model, teacher_logprobs(model, features, anchors), out)
    w = use.float() * model.slot_weight
    total = w.sum()
    return (kl * w).sum() / total.clamp(min=1e-6), total


def own_text_mask(tokens: Tensor, labels: Tensor, anchors: Tensor, n_slots: int) -> Tensor:
    """(N, A, B-1) bool: slot k is True where tokens[anchor + 1 .. anchor + k - 1] equal the
    target's labels there (slot 1 always), i.e. the text between the anchor and the slot's
    label is what the target would have written. Self-distilled answers (labels = tokens)
    are True everywhere."""
    n, t = tokens.shape
    rows = torch.arange(n, device=tokens.device)[:, None, None]
    pos = (anchors[..., None] + torch.arange(1, n_slots, device=tokens.device)).clamp(max=t - 1)
    agree = tokens[rows, pos] == labels[rows, pos]  # (N, A, B-2): the slots' inputs 1..B-2
    lead = torch.ones_like(agree[..., :1])
    return torch.cat([lead, torch.cumprod(agree.long(), dim=-1).bool()], dim=-1)
