"""HyFlash torch side: config, recurrent memories, the drafter module, ONNX export, GGUF weights.

Tiny random configurations keep this file fast on a 2-core CPU; one test reads the real
SmolLM2 GGUF and decodes a prompt with the real target.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hyflash_tiny import (  # noqa: F401 - autouse fixture
    E,
    V,
    one_torch_thread,
    tiny_config,
    tiny_model,
)

from engine.drafters.hyflash_card import DrafterConfig, draft_memory_bytes, target_identity
from engine.llama.gguf_file import EmbeddingRows
from engine.training.export import ObserveGraph, ProposeGraph, example_inputs, export_drafter
from engine.training.gguf_weights import load_target_weights, write_stand_in_gguf
from engine.training.model import HyFlashModel
from engine.training.ssm import GatedDeltaNetMemory, Mamba2Memory, unit_lower_inverse
from engine.training.train import Sequences, _step_batch, select_draft_vocab, train
from engine.training.train_config import TrainConfig

# ----- config ------------------------------------------------------------------------------


def test_config_json_round_trip(tmp_path):
    cfg = tiny_config(attention="full", memory="gdn", history="last512", cross_slot=False)
    assert DrafterConfig.from_json(cfg.to_json()) == cfg
    cfg.save(tmp_path / "c.json")
    assert DrafterConfig.load(tmp_path / "c.json") == cfg
    assert cfg.n_slots == 3 and cfg.history_len == 512 and cfg.variant == "full-attention"
    with pytest.raises(ValueError, match="memory"):
        tiny_config(memory="lstm")
    with pytest.raises(ValueError, match="unknown keys"):
        DrafterConfig.from_dict({**cfg.to_dict(), "bogus": 1})


# ----- recurrent memories ------------------------------------------------------------------


@pytest.mark.parametrize("cls", [Mamba2Memory, GatedDeltaNetMemory])
def test_step_recurrence_equals_chunked_scan(cls):
    """States after every prefix agree between the step-wise recurrence and the chunked scan
    (float64, atol 1e-10) for several chunk sizes, T not a multiple of the chunk."""
    torch.manual_seed(1)
    mem = cls(12, 3, 8, 5).double()
    x = torch.randn(2, 37, 12, dtype=torch.float64)
    s0 = torch.randn(2, 3, 8, 5, dtype=torch.float64)
    states = [s0]
    for t in range(x.shape[1]):
        states.append(mem.step(x[:, t], states[-1]))
    ref = torch.stack(states, 1)
    positions = torch.arange(38).expand(2, 38)
    for chunk in (1, 3, 8, 16, 64):
        scan = mem.scan(x, s0, chunk=chunk)
        torch.testing.assert_close(scan.states_at(positions), ref, atol=1e-10, rtol=0)
        torch.testing.assert_close(scan.final, ref[:, -1], atol=1e-10, rtol=0)


@pytest.mark.parametrize("cls", [Mamba2Memory, GatedDeltaNetMemory])
def test_chunk_update_with_padding_matches_steps(cls):
    """The exported observe path (one chunk, doubling inverse, padded inputs) == steps.
    float32, atol 1e-5."""
    torch.manual_seed(2)
    mem = cls(12, 2, 8, 6)
    mem.inverse_method = "doubling:16"
    x = torch.randn(1, 16, 12)
    s = s0 = torch.randn(1, 2, 8, 6)
    for t in range(11):
        s = mem.step(x[:, t], s)
    valid = torch.zeros(1, 16)
    valid[:, :11] = 1
    torch.testing.assert_close(mem.chunk_update(x, s0, valid), s, atol=1e-5, rtol=1e-5)
    # padding inside the step recurrence leaves the state untouched
    torch.testing.assert_close(mem.step(x[:, 0], s, valid=torch.zeros(1)), s)


def test_doubling_inverse_matches_solve():
    torch.manual_seed(3)
    a = torch.randn(4, 13, 13, dtype=torch.float64).tril(-1) * 0.5
    ref = unit_lower_inverse(a, "solve")
    torch.testing.assert_close(unit_lower_inverse(a, "doubling"), ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(unit_lower_inverse(a, "doubling:16"), ref, atol=1e-10, rtol=0)


# ----- memory accounting -------------------------------------------------------------------


@pytest.mark.parametrize("memory", ["mamba2", "gdn", "none"])
def test_draft_memory_constant_for_local_attention(memory):
    cfg = DrafterConfig(memory=memory, attention="local")
    sizes = {n: draft_memory_bytes(cfg, n) for n in (0, 512, 4096, 32768, 131072)}
    assert len(set(sizes.values())) == 1, sizes
    kv = cfg.window * cfg.n_layers * 2 * cfg.d_model * 4
    state = 0 if memory == "none" else cfg.mem_heads * cfg.mem_key_dim * cfg.mem_value_dim * 4
    assert sizes[0] >= kv + state


def test_draft_memory_linear_for_full_attention():
    full = DrafterConfig(attention="full", memory="none")
    local = DrafterConfig(attention="local", memory="mamba2")
    b = [draft_memory_bytes(full, n) for n in (1000, 2000, 4000, 8000)]
    per_token = (b[1] - b[0]) / 1000
    assert per_token >= 2 * full.d_model * 4
    assert b[2] - b[1] == 2 * (b[1] - b[0]) and b[3] - b[2] == 2 * (b[2] - b[1])
    assert draft_memory_bytes(full, 8192) > 5 * draft_memory_bytes(local, 8192)


# ----- the drafter module ------------------------------------------------------------------


def test_slots_see_only_context_before_the_anchor():
    """Changing anything after the anchor (features from the anchor on, tokens after it)
    must not change any slot output: no leakage of the answer into training."""
    for kw in (
        dict(memory="mamba2"),
        dict(attention="full", memory="gdn", cross_slot=False),
        dict(memory="gdn", history="last1"),
    ):
        model = tiny_model(tiny_config(**kw))
        torch.manual_seed(4)
        feats, toks = torch.randn(2, 30, E), torch.randint(0, 12, (2, 30))
        anchors = torch.tensor([[0, 5, 17], [3, 9, 20]])
        out1, _ = model.draft_at_anchors(feats, toks, anchors)
        feats2, toks2 = feats.clone(), toks.clone()
        feats2[0, 17:], toks2[0, 18:] = torch.randn(13, E), torch.randint(0, V, (12,))
        out2, _ = model.draft_at_anchors(feats2, toks2, anchors)
        torch.testing.assert_close(out1.vocab_lp[0, 2], out2.vocab_lp[0, 2])
        if out1.copy_lp is not None:
            torch.testing.assert_close(out1.copy_lp[0, 2], out2.copy_lp[0, 2])
            assert torch.equal(out1.copy_ids[0, 2], out2.copy_ids[0, 2])


@pytest.mark.parametrize("attention", ["local", "full"])
def test_mixture_argmax_matches_full_scatter(attention):
    model = tiny_model(tiny_config(attention=attention))
    torch.manual_seed(5)
    feats, toks = torch.randn(2, 24, E), torch.randint(0, 10, (2, 24))
    out, gate = model.draft_at_anchors(feats, toks, torch.tensor([[4, 12, 20], [8, 15, 23]]))
    full = model.mixture_logprobs(out)
    assert torch.equal(model.mixture_argmax(out), full.argmax(-1))
    torch.testing.assert_close(full.exp().sum(-1), torch.ones(full.shape[:-1]))
    torch.testing.assert_close(gate.sum(-1), torch.ones(gate.shape[:-1]))


@pytest.mark.parametrize(
    "kw",
    [dict(memory="mamba2"), dict(memory="gdn", copy=False), dict(attention="full", memory="none")],
)
def test_training_loss_falls(kw):
    """Self-distillation-style step on tiny random data: loss falls over 50 AdamW steps."""
    model = tiny_model(tiny_config(**kw)).train()
    torch.manual_seed(6)
    feats, toks = torch.randn(2, 32, E), torch.randint(0, V, (2, 32))
    lengths = torch.tensor([32, 27])
    anchors = torch.tensor([[0, 6, 13, 20, 28], [2, 9, 15, 21, 26]])
    cand_ids, cand_match = model.candidate_tables(toks)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    losses = []
    for _ in range(50):
        out = model.forward_train(
            feats, toks, anchors, lengths=lengths, cand_ids=cand_ids, cand_match=cand_match
        )
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.3 * losses[0], losses[::10]
    assert out.slot_accuracy().shape == (3,) and out.acceptance_length() >= 1
    # frozen target parts stay out of checkpoints; the draft vocabulary map is in them
    keys = model.state_dict().keys()
    assert "embedding" not in keys and "lm_head_t" not in keys and "draft_ids" in keys


def test_bf16_training_steps_run_under_autocast_and_learn(tmp_path):
    """--precision bf16: the training loop's forward runs under bf16 autocast (its losses
    part from fp32's from the first step, by bf16 rounding only) and still learns; the
    weights it saves stay fp32."""
    torch.manual_seed(5)
    seqs = Sequences(
        tokens=[torch.randint(0, V, (40,)).numpy() for _ in range(4)],
        features=[torch.randn(40, E).numpy() for _ in range(4)],
        prompt_lens=[4] * 4,
    )
    losses = {}
    for precision in ("fp32", "bf16"):
        model = tiny_model(tiny_config()).train()
        tcfg = TrainConfig(
            steps=40, batch_seqs=4, anchors_per_seq=4, lr=3e-3, warmup=1, precision=precision
        )
        history = train(model, seqs, None, tcfg, tmp_path / precision, show_progress=False)
        losses[precision] = [h["loss"] for h in history]
        assert all(p.dtype == torch.float32 for p in model.parameters())
    fp32, bf16 = losses["fp32"], losses["bf16"]
    assert fp32[0] != bf16[0] and abs(fp32[0] - bf16[0]) < 0.05 * fp32[0]
    assert bf16[-1] < 0.7 * bf16[0], bf16[::10]


def test_source_weights_set_how_often_training_draws_each_source():
    """--source-weight: a source at weight 3 is drawn ~3x as often as an unnamed one, weight 0
    never; the weights follow a subset (the train split); malformed or unknown ones fail."""
    from engine.training.selection import source_weights

    keys = ["gsm8k/0", "sharegpt/a", "mbpp/0", "sharegpt/b"]
    weights = source_weights("gsm8k=3,mbpp=0", keys)
    assert weights.tolist() == [3.0, 1.0, 0.0, 1.0]
    seqs = Sequences(
        tokens=[np.full(12, i, dtype=np.int64) for i in range(4)],
        features=[np.zeros((12, E), dtype=np.float32)] * 4,
        prompt_lens=[2] * 4,
        weights=weights,
    ).subset([0, 1, 2])
    assert seqs.weights.tolist() == [3.0, 1.0, 0.0]
    tcfg = TrainConfig(batch_seqs=8, anchors_per_seq=2)
    drawn = np.concatenate([_step_batch(seqs, tcfg, s)["tokens"][:, 0].numpy() for s in range(300)])
    counts = np.bincount(drawn, minlength=3)
    assert counts[2] == 0 and 2.6 < counts[0] / counts[1] < 3.4, counts
    assert source_weights(None, keys) is None
    for bad in ("gsm8k", "gsm8k=-1", "gsm8k=x", "ifbench=2", "gsm8k=0,sharegpt=0,mbpp=0"):
        with pytest.raises(SystemExit, match="--source-weight"):
            source_weights(bad, keys)


def test_draft_vocab_selection_and_checkpoints():
    ids = select_draft_vocab([5, 5, 5, 3, 3, 9, 1], size=4, vocab_size=V, always=[96])
    assert ids.tolist() == [1, 3, 5, 96]  # 9 and 1 tie at one use: the lower id wins
    cfg = tiny_config(draft_vocab_size=4)
    emb = torch.randn(V, E)
    model = HyFlashModel(cfg, emb, emb, ids)
    HyFlashModel(cfg, emb, emb, ids).load_state_dict(model.state_dict())
    with pytest.raises(ValueError, match="draft vocabulary"):
        HyFlashModel(cfg, emb, emb, [0, 1, 2, 3]).load_state_dict(model.state_dict())


def test_folded_lm_head_equals_unfolded():
    """With d_model < hidden the exported propose graph folds out_proj into the LM head."""
    model = tiny_model(tiny_config(d_model=8, n_heads=2, ptr_dim=4))
    graph = ProposeGraph(model)
    assert graph.fold
    _, prop_in = example_inputs(model.cfg, n_ctx=6, seed=9)
    with torch.no_grad():
        folded = graph(**prop_in)
        graph.fold = False
        plain = graph(**prop_in)
    for a, b in zip(folded, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_scoring_fewer_slots_keeps_their_outputs():
    """The propose graph scores only `slots`; every slot still attends, so those rows equal
    the rows of a full-block call (for leading and for scattered slot choices)."""
    model = tiny_model(tiny_config(d_model=8, n_heads=2, ptr_dim=4))
    graph = ProposeGraph(model)
    _, prop_in = example_inputs(model.cfg, n_ctx=6, seed=4)
    with torch.no_grad():
        full = graph(**prop_in)
        for pick in ([0, 1], [2], [0, 2]):
            part = graph(**{**prop_in, "slots": torch.tensor(pick)})
            for a, b in zip(part, full, strict=True):
                torch.testing.assert_close(a, b[:, pick], atol=1e-6, rtol=1e-6)


# ----- ONNX export --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hyflash_export")
    gguf_path = write_stand_in_gguf(folder / "target.gguf", np.zeros((V, E), np.float32))
    cfg = tiny_config(memory="gdn", d_model=64, n_layers=1)
    model = tiny_model(cfg, seed=7)
    with torch.no_grad():  # spread the weights so logits are peaked, as trained ones are
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = export_drafter(
            model,
            folder / "drafter",
            target=target_identity(gguf_path),
            data="random weights (test)",
            metrics={"tau": 1.0},
            quantize=("int8", "int4"),
        )
    return model, out


def _run(path, feeds) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v.numpy() for k, v in feeds.items()})


def test_onnx_fp32_matches_torch(exported):
    """ORT fp32 outputs == the torch graphs (atol 1e-4), for several dynamic lengths."""
    model, folder = exported
    n_slots = model.cfg.n_slots
    cases = ((8, 8, 0, n_slots), (3, 5, 1, 1), (1, 1, 2, 2), (6, 30, 3, n_slots - 1))
    for n_new, n_ctx, seed, n_out in cases:
        obs_in, prop_in = example_inputs(
            model.cfg, n_new=n_new, n_ctx=n_ctx, seed=seed, n_out=n_out
        )
        with torch.no_grad():
            ref_obs = ObserveGraph(model)(**obs_in)
            ref_prop = ProposeGraph(model)(**prop_in)
        for got, ref in zip(_run(folder / "model_observe.onnx", obs_in), ref_obs, strict=True):
            np.testing.assert_allclose(got, ref.numpy(), atol=1e-4, rtol=1e-4)
        for got, ref in zip(_run(folder / "model_propose.onnx", prop_in), ref_prop, strict=True):
            assert got.shape[1] == n_out
            np.testing.assert_allclose(got, ref.numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_quantized_export_runs_and_agrees(exported, kind):
    """Quantized graphs run and stay close to fp32: INT8 slot argmax agrees on >= 75% of rows
    (random weights: flat distributions, the hardest case), INT4 log-probs correlate > 0.9."""
    model, folder = exported
    agree = total = 0
    refs, gots = [], []
    for seed in range(12):
        _, prop_in = example_inputs(model.cfg, n_ctx=8, seed=10 + seed)
        ref = _run(folder / "model_propose.onnx", prop_in)
        got = _run(folder / f"model_propose.{kind}.onnx", prop_in)
        assert all(np.isfinite(g).all() for g in got)
        agree += int((got[0].argmax(-1) == ref[0].argmax(-1)).sum())
        total += ref[0].shape[1]
        refs.append(ref[0].ravel())
        gots.append(got[0].ravel())
    corr = np.corrcoef(np.concatenate(refs), np.concatenate(gots))[0, 1]
    assert corr > 0.9, corr
    if kind == "int8":
        assert agree / total >= 0.75, agree / total
    obs_in, _ = example_inputs(model.cfg, n_new=5)
    ref = _run(folder / "model_observe.onnx", obs_in)
    got = _run(folder / f"model_observe.{kind}.onnx", obs_in)
    assert [g.shape for g in got] == [r.shape for r in ref]


def test_norms_fuse_in_onnxruntime(exported, tmp_path):
    """Every RMSNorm of the shipped (INT8) graphs becomes one SimplifiedLayerNormalization
    node in onnxruntime's optimized graph (no Sqrt / Reciprocal chain left; the Pow that stays
    is the gated-delta memory's L2 norm): each unfused chain is ~6 small nodes per call."""
    _, folder = exported
    for graph in ("propose", "observe"):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.optimized_model_filepath = str(tmp_path / f"{graph}.onnx")
        opts.log_severity_level = 3  # the optimized file's "hardware specific" warning
        ort.InferenceSession(
            str(folder / f"model_{graph}.int8.onnx"), opts, providers=["CPUExecutionProvider"]
        )
        ops = [n.op_type for n in onnx.load(str(tmp_path / f"{graph}.onnx")).graph.node]
        assert "SimplifiedLayerNormalization" in ops, graph
        assert "Reciprocal" not in ops, graph


def test_card_contents(exported):
    model, folder = exported
    card = json.loads((folder / "card.json").read_text())
    assert card["target"]["vocab_size"] == V and card["target"]["hidden_size"] == E
    assert len(card["target"]["gguf_sha256"]) == 64
    assert DrafterConfig.from_dict(card["config"]) == model.cfg
    assert card["block_size_trained"] == model.cfg.block_size
    assert card["metrics"] == {"tau": 1.0} and card["data"]
    for graph in ("propose", "observe"):
        for name in card["files"][graph].values():
            assert (folder / name).exists()
    np.testing.assert_array_equal(np.load(folder / "draft_vocab.npy"), model.draft_ids.numpy())


# ----- real target weights ------------------------------------------------------------------


def test_stand_in_gguf_untied_head(tmp_path):
    rng = np.random.default_rng(8)
    emb = rng.standard_normal((V, E)).astype(np.float32)
    head = rng.standard_normal((V, E)).astype(np.float32)
    path = write_stand_in_gguf(tmp_path / "untied.gguf", emb, head)
    for reader in ("index", "gguf"):
        weights = load_target_weights(path, reader=reader)
        assert not weights.tied
        np.testing.assert_array_equal(weights.embedding, emb)
        np.testing.assert_array_equal(weights.lm_head, head)
    np.testing.assert_array_equal(EmbeddingRows(path)([3, 96, 3]), emb[[3, 96, 3]])
    ident = target_identity(path)
    assert (ident.vocab_size, ident.hidden_size, ident.name) == (V, E, "stand-in")


def test_train_sizes_the_drafter_for_the_given_target(tmp_path):
    """`hyflash train --model X` takes vocabulary and width from X's GGUF, not the defaults
    (which are SmolLM2's): a drafter for another target would not build otherwise."""
    from engine.training.target_vocab import embedding_shape

    path = write_stand_in_gguf(tmp_path / "other.gguf", np.zeros((V, E), np.float32))
    assert (
        embedding_shape(path) == (V, E) != (DrafterConfig().vocab_size, DrafterConfig().hidden_size)
    )


def test_real_gguf_weights_match_the_target():
    from engine.llama.target import LlamaTarget
    from engine.models.resolve import resolve_target

    _, path = resolve_target(None)
    weights = load_target_weights(path)
    assert weights.embedding.shape == (49152, 576) and weights.embedding.dtype == np.float32
    assert weights.tied and weights.lm_head is weights.embedding  # SmolLM2 ties them
    # the fast header index reads exactly what gguf.GGUFReader reads
    np.testing.assert_array_equal(
        load_target_weights(path, reader="gguf").embedding, weights.embedding
    )
    rows = EmbeddingRows(path)
    ids = [0, 1, 2, 576, 49151]
    np.testing.assert_array_equal(rows(ids), weights.embedding[ids])
    ident = target_identity(path)
    assert (ident.vocab_size, ident.hidden_size) == (49152, 576) and len(ident.gguf_sha256) == 64

    target = LlamaTarget(path, n_ctx=512, features=True, n_threads=1)
    try:
        prompt = target.tokenize("The capital of France is", add_special=True)
        out = target.decode(prompt)
        # the final normed feature through the LM head reproduces the target's own choice
        mine = out.features @ weights.lm_head.T
        assert np.array_equal(mine.argmax(-1), out.logits.argmax(-1))
        assert target.n_vocab == ident.vocab_size and target.n_embd == ident.hidden_size
    finally:
        target.close()


@pytest.mark.parametrize("causal", [True, False])
def test_causal_slots_make_a_short_block_the_start_of_the_whole_one(causal):
    """With causal slots the propose graph's S + 1 rows give what the first S slots of the
    trained block give; with bidirectional slots the later slots change the earlier ones
    (so a short block would not be the same drafter)."""
    cfg = tiny_config(causal_slots=causal, block_size=6, memory="mamba2")
    model = tiny_model(cfg, seed=3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    assert cfg.short_blocks == causal
    n_out = 2
    _, full_in = example_inputs(cfg, n_ctx=8, seed=1)
    _, short_in = example_inputs(cfg, n_ctx=8, seed=1, n_out=n_out)
    # a short block's graph takes one candidate per scored slot: the full block's first ones
    assert short_in["cand_emb"].shape[1] == (n_out if causal else cfg.n_slots)
    short_in["cand_emb"] = full_in["cand_emb"][:, :n_out]
    short_in["cand_match"] = full_in["cand_match"][:, :n_out]
    graph = ProposeGraph(model)
    with torch.no_grad():
        full = graph(**full_in)[0][:, :n_out]
        cfg.causal_slots = True  # run the short path on this model's weights either way
        short = graph(**short_in)[0]
        cfg.causal_slots = causal
    assert short.shape == full.shape
    if causal:
        torch.testing.assert_close(short, full, atol=1e-5, rtol=0)
    else:
        assert (short - full).abs().max() > 1e-3


def test_copy_trust_loss_teaches_the_gate_when_the_lookup_is_right():
    """The trust loss is the BCE of the candidate's gate share against "the lookup candidate
    is the next token"; minimised alone it separates right candidates from wrong ones."""
    model = tiny_model(tiny_config()).train()
    torch.manual_seed(7)
    seg = torch.randint(0, V, (12,))
    toks = torch.cat([seg, torch.randint(0, V, (4,)), seg, torch.randint(0, V, (4,))])[None]
    feats = torch.randn(1, toks.shape[1], E)
    anchors = torch.tensor([[3, 8, 18, 19, 20, 22, 25, 26]])
    cand_ids, cand_match = model.candidate_tables(toks)
    k = torch.arange(1, model.cfg.block_size)
    tpos = anchors[0, :, None] + k
    valid = tpos < toks.shape[1]
    y = toks[0, tpos.clamp(max=toks.shape[1] - 1)]
    has = valid & (cand_match[0, anchors[0]] > 0)
    hit = cand_ids[0, anchors[0]] == y
    assert (has & hit).any() and (has & ~hit).any()

    def forward():
        return model.forward_train(feats, toks, anchors, cand_ids=cand_ids, cand_match=cand_match)

    out = forward()
    g = out.copy_gate[0, ..., 2]
    expected = -torch.where(hit, g.log(), torch.log1p(-g))[has].mean()
    assert torch.allclose(out.trust_loss, expected, atol=1e-5)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    for _ in range(60):
        loss = forward().trust_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    g = forward().copy_gate[0, ..., 2].detach()
    assert g[has & hit].min() > 0.7 and g[has & ~hit].max() < 0.3, (g[has & hit], g[has & ~hit])
