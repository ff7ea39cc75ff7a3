"""Soft targets and clean supervision (engine/training/soft_targets.py), and a training run that
is interrupted and resumed ending where an uninterrupted one ends."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hyflash_tiny import E, V, one_torch_thread, tiny_config, tiny_model  # noqa: F401 - autouse

from engine.training.model import NEG, SlotOutput
from engine.training.soft_targets import distill_loss, mixture_kl, own_text_mask, teacher_logprobs
from engine.training.train import Sequences, train
from engine.training.train_config import TrainConfig

_TINY = torch.finfo(torch.float32).tiny


def draft_vocab_logprobs(model, out: SlotOutput) -> torch.Tensor:
    """The reference: log of the mixture's mass on every draft id, the copies scattered over
    the whole draft vocabulary (copies of ids outside it are lost mass)."""
    if out.copy_lp is None:
        return out.vocab_lp
    d = model.target_to_draft[out.copy_ids]
    copy_p = torch.where(d >= 0, out.copy_lp.exp(), torch.zeros_like(out.copy_lp))
    mass = torch.zeros_like(out.vocab_lp).scatter_add(-1, d.clamp(min=0), copy_p)
    return torch.logaddexp(out.vocab_lp, torch.log(mass.clamp(min=_TINY)))


def slot_kl(teacher_lp: torch.Tensor, drafter_lp: torch.Tensor) -> torch.Tensor:
    return (teacher_lp.exp() * (teacher_lp - drafter_lp)).sum(-1)


def _batch(seed: int = 3, n: int = 2, t: int = 24):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(n, t, E, generator=g)
    toks = torch.randint(0, V, (n, t), generator=g)
    anchors = torch.tensor([[0, 5, 11, 17], [2, 8, 14, 20]])[:n]
    return feats, toks, anchors


def test_teacher_is_the_targets_softmax_behind_each_slots_label_without_gradient():
    model = tiny_model(tiny_config())
    feats, _, anchors = _batch()
    feats.requires_grad_(True)
    lp = teacher_logprobs(model, feats, anchors)
    assert not lp.requires_grad  # the target is the teacher: nothing flows back into it
    n_slots = model.cfg.n_slots
    assert lp.shape == (*anchors.shape, n_slots, model.cfg.n_draft_vocab)
    # slot k (label anchor + k) is the target's prediction from its state at anchor + k - 1
    row, a, k = 1, 2, 2
    pos = int(anchors[row, a]) + k - 1
    head = model.embedding[model.draft_ids]  # tied: the tiny target's LM head is its embedding
    expected = torch.log_softmax(feats[row, pos].detach() @ head.t(), -1)
    torch.testing.assert_close(lp[row, a, k - 1], expected)


def _slots_reproducing(teacher_lp: torch.Tensor, copy_id: int, model) -> SlotOutput:
    """A mixture that equals the teacher: half of one id's mass comes through a copy."""
    p = teacher_lp.exp()
    d = int(model.target_to_draft[copy_id])
    share = p[..., d] / 2
    vocab_p = p.clone()
    vocab_p[..., d] -= share
    copy_lp = torch.full((*p.shape[:-1], 3), NEG)
    copy_lp[..., 0] = share.log()
    copy_ids = torch.full((*p.shape[:-1], 3), copy_id)
    return SlotOutput(vocab_p.log(), copy_lp, copy_ids)


def test_kl_is_zero_when_the_drafter_reproduces_the_target_and_positive_otherwise():
    model = tiny_model(tiny_config())
    feats, _, anchors = _batch()
    teacher = teacher_logprobs(model, feats, anchors)
    inside = int(model.draft_ids[5])
    same = _slots_reproducing(teacher, inside, model)
    kl = slot_kl(teacher, draft_vocab_logprobs(model, same))
    assert kl.abs().max() < 1e-5, kl.abs().max()
    # another distribution over the draft vocabulary
    other = SlotOutput(torch.log_softmax(torch.randn_like(teacher), -1), None, None)
    assert (slot_kl(teacher, draft_vocab_logprobs(model, other)) > 1e-3).all()
    # the same vocabulary share, but the copied mass names an id outside the draft vocabulary:
    # the copied id keeps half its mass, so the KL is exactly p(id) log 2
    outside = int(torch.nonzero(model.target_to_draft < 0)[0])
    lost = SlotOutput(same.vocab_lp, same.copy_lp, torch.full_like(same.copy_ids, outside))
    p_id = teacher.exp()[..., int(model.target_to_draft[inside])]
    kl = slot_kl(teacher, draft_vocab_logprobs(model, lost))
    torch.testing.assert_close(kl, p_id * np.log(2), atol=1e-5, rtol=1e-4)


def test_mixture_kl_equals_the_full_width_reference_with_repeated_and_outside_copies():
    model = tiny_model(tiny_config())
    feats, toks, anchors = _batch()
    out = model.forward_train(feats, toks, anchors).slots
    # the window holds repeated ids, and ids outside the draft vocabulary
    assert (model.target_to_draft[out.copy_ids] < 0).any()
    assert (out.copy_ids.sort(-1).values.diff(dim=-1) == 0).any()
    teacher = teacher_logprobs(model, feats, anchors)
    reference = slot_kl(teacher, draft_vocab_logprobs(model, out))
    torch.testing.assert_close(mixture_kl(model, teacher, out), reference, atol=1e-5, rtol=1e-5)


def test_distill_loss_trains_only_the_drafters_parameters_and_learns_the_distribution():
    model = tiny_model(tiny_config()).train()
    feats, toks, anchors = _batch()
    out = model.forward_train(feats, toks, anchors)
    loss, weight = distill_loss(model, feats, anchors, out.slots, out.target_valid)
    assert loss > 0 and weight == (out.target_valid.float() * model.slot_weight).sum()
    loss.backward()
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert {name for name, p in model.named_parameters() if p.grad is not None} <= trainable
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    for name, buf in model.named_buffers():  # frozen target parts: no gradient, no training
        assert not buf.requires_grad and buf.grad is None, name
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    first = float(loss.detach())
    for _ in range(60):
        out = model.forward_train(feats, toks, anchors)
        loss = distill_loss(model, feats, anchors, out.slots, out.target_valid)[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.5 * first, (first, float(loss.detach()))


def test_own_text_mask_keeps_slots_whose_preceding_text_is_the_targets_own():
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    labels = torch.tensor([[1, 2, 3, 9, 5, 6, 7, 8]])  # the target would say 9 at position 3
    anchors = torch.tensor([[0, 1, 3, 4]])
    mask = own_text_mask(tokens, labels, anchors, n_slots=3)
    # anchor 0: slots see tokens 1, 2 (both own); anchor 1: token 2 own, token 3 not;
    # anchor 3: tokens 4, 5 own; anchor 4: tokens 5, 6 own
    assert mask.tolist() == [[[True, True, True], [True, True, False]] + [[True] * 3] * 2]
    assert own_text_mask(tokens, tokens, anchors, 3).all()  # self-distilled text: every slot
    anchors = torch.tensor([[1]])
    model = tiny_model(tiny_config(block_size=4))
    feats = torch.randn(1, 8, E)
    out = model.forward_train(
        feats, tokens, anchors, labels=labels, slot_mask=own_text_mask(tokens, labels, anchors, 3)
    )
    assert out.target_valid.tolist() == [[[True, True, False]]]


def _tiny_corpus() -> Sequences:
    torch.manual_seed(5)
    n = 6
    tokens = [torch.randint(0, V, (40,)).numpy() for _ in range(n)]
    labels = [t.copy() for t in tokens]
    labels[0][10:20] = (labels[0][10:20] + 1) % V  # text the target did not write
    return Sequences(tokens, [torch.randn(40, E).numpy() for _ in range(n)], [4] * n, labels)


@pytest.mark.parametrize("soft_weight, supervision", [(0.0, "all"), (0.5, "own"), (1.0, "all")])
def test_training_with_soft_targets_reports_nll_and_kl_and_learns(
    tmp_path, soft_weight, supervision
):
    model = tiny_model(tiny_config()).train()
    tcfg = TrainConfig(
        steps=40,
        batch_seqs=4,
        anchors_per_seq=4,
        lr=3e-3,
        warmup=1,
        soft_weight=soft_weight,
        supervision=supervision,
    )
    history = train(model, _tiny_corpus(), None, tcfg, tmp_path, show_progress=False)
    assert ("kl" in history[0]) == (soft_weight > 0)
    watched = "kl" if soft_weight == 1.0 else "loss"
    first, last = history[0][watched], np.mean([h[watched] for h in history[-5:]])
    assert last < 0.8 * first, (watched, first, last)


def test_an_interrupted_run_resumes_to_the_same_checkpoint_as_an_uninterrupted_one(tmp_path):
    """Killed after step 7 (its last checkpoint at step 5), rerun: the same final weights,
    optimizer state and history as one run straight through."""
    tcfg = TrainConfig(
        steps=12, batch_seqs=4, anchors_per_seq=4, lr=3e-3, warmup=1, ckpt_every=5, soft_weight=0.5
    )
    data = _tiny_corpus()
    straight = tmp_path / "straight"
    train(tiny_model(tiny_config()).train(), data, None, tcfg, straight, show_progress=False)

    class Killed(Exception):
        pass

    def kill_after_7(record):
        if record["step"] == 7:
            raise Killed

    cut = tmp_path / "cut"
    with pytest.raises(Killed):
        train(
            tiny_model(tiny_config()).train(),
            data,
            None,
            tcfg,
            cut,
            show_progress=False,
            on_step=kill_after_7,
        )
    assert torch.load(cut / "checkpoint.pt", weights_only=True)["step"] == 5
    logs = []
    model = tiny_model(tiny_config()).train()
    with torch.no_grad():  # other weights than the checkpoint's: all of them must load
        for param in model.parameters():
            param.add_(1.0)
    train(model, data, None, tcfg, cut, show_progress=False, log=logs.append)
    assert logs == ["resumed from step 5"]
    a = torch.load(straight / "checkpoint.pt", weights_only=True)
    b = torch.load(cut / "checkpoint.pt", weights_only=True)
    assert a["step"] == b["step"] == 12
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    for key, value in a["opt"]["state"].items():
        for name, tensor in value.items():
            assert torch.equal(tensor, b["opt"]["state"][key][name]), (key, name)

    def steps(history):
        return [{k: v for k, v in h.items() if k != "anchors_per_s"} for h in history]

    assert steps(a["history"]) == steps(b["history"])


def test_kept_steps_hold_the_weights_of_those_steps_on_one_schedule(tmp_path):
    """--keep-steps: step-N.pt holds the weights as they were at step N of the whole run (the
    points of a learning curve), beside the rolling checkpoint.pt; other steps keep nothing."""
    tcfg = TrainConfig(
        steps=12,
        batch_seqs=4,
        anchors_per_seq=4,
        lr=3e-3,
        warmup=1,
        ckpt_every=5,
        keep_steps=(3, 8),
    )
    model = tiny_model(tiny_config()).train()
    seen = {}

    def snapshot(record):
        if record["step"] in tcfg.keep_steps:
            seen[record["step"]] = {k: v.clone() for k, v in model.state_dict().items()}

    train(model, _tiny_corpus(), None, tcfg, tmp_path, show_progress=False, on_step=snapshot)
    assert sorted(p.name for p in tmp_path.glob("step-*.pt")) == ["step-3.pt", "step-8.pt"]
    for step, weights in seen.items():
        kept = torch.load(tmp_path / f"step-{step}.pt", weights_only=True)
        assert kept["step"] == step and len(kept["history"]) == step
        for key, value in weights.items():
            assert torch.equal(kept["model"][key], value), (step, key)
    assert not torch.equal(seen[3]["ctx_feat.weight"], seen[8]["ctx_feat.weight"])  # it trained
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["step"] == 12


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    """Checkpoints load with weights_only: a pickle that calls a function is rejected unrun."""
    import pickle

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (marker.touch, ())

    (tmp_path / "checkpoint.pt").write_bytes(pickle.dumps({"step": Payload()}, protocol=2))
    model = tiny_model(tiny_config()).train()
    with pytest.raises(pickle.UnpicklingError):
        train(model, _tiny_corpus(), None, TrainConfig(steps=1), tmp_path, show_progress=False)
    assert not marker.exists()


def test_a_checkpoint_cut_short_is_passed_over_for_the_last_good_one(tmp_path):
    """checkpoint.pt truncated (a full disk, a copy): the rerun says so in one line, resumes
    from best.pt's step and finishes the run, where it used to fail on every rerun."""
    tcfg = TrainConfig(
        steps=10, batch_seqs=4, anchors_per_seq=4, lr=3e-3, warmup=1, ckpt_every=5, eval_every=5
    )
    data = _tiny_corpus()
    val = Sequences(data.tokens[:2], data.features[:2], data.prompt_lens[:2], data.labels[:2])
    train(tiny_model(tiny_config()).train(), data, val, tcfg, tmp_path, show_progress=False)
    best_step = torch.load(tmp_path / "best.pt", weights_only=True)["step"]
    ckpt = tmp_path / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    logs = []
    longer = dataclasses.replace(tcfg, steps=12)
    history = train(
        tiny_model(tiny_config()).train(),
        data,
        val,
        longer,
        tmp_path,
        show_progress=False,
        log=logs.append,
    )
    assert logs[0].startswith("checkpoint.pt is unreadable")
    assert logs[1] == f"resumed from step {best_step} (best.pt)"
    assert history[-1]["step"] == 12
    assert torch.load(ckpt, weights_only=True)["step"] == 12
