"""HyFlash run-time drafter (onnxruntime + numpy): incremental observe == the torch model on
the whole context, window/state memory, the identity check, and the real target end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hyflash_tiny import E, V, one_torch_thread, tiny_config  # noqa: F401 - autouse fixture

from engine.decoding.drafter_protocol import Drafter
from engine.drafters.hyflash import HyFlashDrafter
from engine.drafters.hyflash_card import (
    CARD_VERSION,
    DrafterConfig,
    draft_memory_bytes,
    target_identity,
)
from engine.drafters.ngram_index import NgramIndex, ngram_candidates
from engine.events import DrafterMismatchError
from engine.training.export import export_drafter
from engine.training.gguf_weights import write_stand_in_gguf
from engine.training.model import HyFlashModel, SlotOutput

VARIANTS = {
    "hyflash-mamba2": dict(memory="mamba2"),
    "hyflash-gdn-last1-noncross": dict(memory="gdn", history="last1", cross_slot=False),
    "full-attention-nocopy": dict(attention="full", memory="none", copy=False),
    # causal slots: a propose of S drafts runs S + 1 rows (short blocks)
    "hyflash-causal-slots": dict(memory="mamba2", causal_slots=True, block_size=6),
    # fused target features: two captured layers' inputs before the final state
    "hyflash-fused-layers": dict(memory="mamba2", feature_layers=(1, 3), feature_dim=3 * E),
}


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """A tiny GGUF target (embedding only) and an object shaped like LlamaTarget for it."""
    folder = tmp_path_factory.mktemp("hyflash_rt")
    emb = np.random.default_rng(0).standard_normal((V, E)).astype(np.float32)
    path = write_stand_in_gguf(folder / "tiny.gguf", emb)
    return SimpleNamespace(path=path, n_vocab=V, n_embd=E), emb, folder


def _make(cfg: DrafterConfig, emb: np.ndarray, seed: int) -> HyFlashModel:
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = HyFlashModel(cfg, emb, emb, torch.randperm(V, generator=g)[: cfg.n_draft_vocab])
    with torch.no_grad():  # away from the init so every path carries signal
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


@pytest.fixture(scope="module")
def drafters(stand_in):
    target, emb, folder = stand_in
    out = {}
    for i, (name, kw) in enumerate(VARIANTS.items()):
        cfg = tiny_config(n_layers=2 if i == 0 else 1, **kw)
        model = _make(cfg, emb, seed=i)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = export_drafter(
                model,
                folder / name,
                target=target_identity(target.path),
                quantize=("int8",) if i == 0 else (),
            )
        out[name] = (model, path)
    return out


def _context(seed: int, t: int, width: int = E):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 12, (t + 1,), generator=g)  # few ids: n-gram matches happen
    # features at the scales the target gives: a fused layer's raw residual is far from unit
    scale = torch.linspace(1.0, 8.0, width // E).repeat_interleave(E) if width > E else 1.0
    return tokens[:t], torch.randn(t, width, generator=g) * scale, int(tokens[t])


@pytest.mark.parametrize("name", list(VARIANTS))
def test_incremental_observe_matches_torch_on_whole_context(stand_in, drafters, name):
    """Features fed in uneven chunks (some longer than observe_chunk, the window sliding)
    give the same slot log-probabilities as the torch model on the whole context.
    Tolerance: atol 1e-4 on finite log-probs; identical support and argmax."""
    target, _, _ = stand_in
    model, path = drafters[name]
    drafter = HyFlashDrafter.load(path, target, weights="fp32")
    assert isinstance(drafter, Drafter) and drafter.name == "hyflash" and drafter.wants_features
    card = json.loads((path / "card.json").read_text())
    assert card["short_blocks"] == model.cfg.short_blocks  # the short path is tested below
    # only a drafter whose call grows with the drafts is asked for fewer under block size auto
    assert drafter.pays_per_draft == model.cfg.short_blocks
    tokens, feats, anchor = _context(seed=1, t=30, width=model.cfg.feature_dim)
    i = 0
    for step in (1, 5, 11, 3, 2, 8):
        drafter.observe(tokens[i : i + step].tolist(), feats[i : i + step].numpy())
        i += step
    assert i == 30
    got = drafter.mix_logits(*drafter.propose_raw(anchor))
    ref = model.mixture_logprobs(model.propose_reference(feats, tokens, anchor))[0, 0].numpy()
    finite = np.isfinite(ref)
    assert np.array_equal(np.isfinite(got), finite)
    np.testing.assert_allclose(got[finite], ref[finite], atol=1e-4, rtol=0)

    draft = drafter.propose(anchor, max_tokens=100)
    assert draft.bucket.startswith("hyflash-sure") and draft.logits.dtype == np.float32
    assert draft.logits.shape == (model.cfg.n_slots, V)
    assert np.array_equal(draft.tokens, ref.argmax(-1))
    assert np.array_equal(drafter.propose(anchor, 2).tokens, draft.tokens[:2])
    # scoring only the first slots (a short block) leaves their log-probs unchanged
    short = drafter.mix_logits(*drafter.propose_raw(anchor, 3))
    assert short.shape == (3, V)
    np.testing.assert_allclose(short[finite[:3]], got[:3][finite[:3]], atol=1e-5, rtol=0)
    assert len(drafter.propose(anchor, 0).tokens) == 0

    # reset + one observe of everything gives the same answer
    drafter.reset()
    drafter.observe(tokens.tolist(), feats.numpy())
    np.testing.assert_allclose(drafter.mix_logits(*drafter.propose_raw(anchor)), got, atol=1e-5)


def test_copy_path_reaches_out_of_vocabulary_tokens(stand_in, drafters):
    """A pointer copy or lookup candidate may name a token outside the draft vocabulary."""
    target, _, _ = stand_in
    model, path = drafters["hyflash-mamba2"]
    drafter = HyFlashDrafter.load(path, target)
    outside = sorted(set(range(V)) - set(model.draft_ids.tolist()))[:4]
    pattern = [*outside, 1, 2] * 4
    feats = np.random.default_rng(2).standard_normal((len(pattern), E)).astype(np.float32)
    drafter.observe(pattern, feats)
    draft = drafter.propose(2, 3)
    assert np.isfinite(draft.logits[:, outside]).any()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_greedy_propose_without_logits_picks_the_same_tokens(stand_in, drafters, name):
    """The greedy path scores only the draft-vocab winner and the copied ids; it must pick
    the argmax of the full mixture and put the draft in the same confidence bucket."""
    target, _, _ = stand_in
    drafter = HyFlashDrafter.load(drafters[name][1], target)
    tokens, feats, _ = _context(7, 40, drafters[name][0].cfg.feature_dim)
    checked = 0
    for i, token in enumerate(tokens.tolist()):
        full = drafter.propose(token, 3)
        fast = drafter.propose(token, 3, with_logits=False)
        assert fast.logits is None
        assert np.array_equal(fast.tokens, full.tokens), i
        assert fast.bucket == full.bucket
        drafter.observe([token], feats[i : i + 1].numpy())
        checked += 1
    assert checked == 40


def test_empty_context_and_features_required(stand_in, drafters):
    target, _, _ = stand_in
    for _, path in drafters.values():
        drafter = HyFlashDrafter.load(path, target)
        draft = drafter.propose(5, 3)  # a one-token prompt: nothing observed yet
        assert len(draft.tokens) == 3 and np.isfinite(draft.logits.max(-1)).all()
        with pytest.raises(ValueError, match="features"):
            drafter.observe([1, 2], None)


def test_runtime_memory_constant_for_local_linear_for_full(stand_in, drafters):
    target, _, _ = stand_in
    rng = np.random.default_rng(3)
    for name, (model, path) in drafters.items():
        drafter = HyFlashDrafter.load(path, target)
        sizes = []
        for n in (10, 90, 400):
            drafter.reset()
            drafter.observe(
                rng.integers(0, V, n).tolist(),
                rng.standard_normal((n, model.cfg.feature_dim)).astype(np.float32),
            )
            sizes.append(drafter.memory_bytes())
            assert sizes[-1] == draft_memory_bytes(model.cfg, n)
        if model.cfg.attention == "local":
            assert len(set(sizes)) == 1, (name, sizes)
            held = drafter.memory_breakdown()
            assert held["window"] + held["state"] <= sizes[-1]
        else:
            assert sizes[2] - sizes[1] == (400 - 90) / (90 - 10) * (sizes[1] - sizes[0])


def test_int8_weights_load_and_stay_close(stand_in, drafters):
    target, _, _ = stand_in
    _, path = drafters["hyflash-mamba2"]
    tokens, feats, anchor = _context(seed=4, t=20)
    out = {}
    for weights in ("fp32", "int8"):
        d = HyFlashDrafter.load(
            path, target, weights=weights, threads=1, providers=["CPUExecutionProvider"]
        )
        d.observe(tokens.tolist(), feats.numpy())
        out[weights] = d.propose(anchor, 3).logits
    finite = np.isfinite(out["fp32"])
    assert np.array_equal(finite, np.isfinite(out["int8"]))
    assert np.corrcoef(out["fp32"][finite], out["int8"][finite])[0, 1] > 0.9
    with pytest.raises(DrafterMismatchError, match="int4"):
        HyFlashDrafter.load(path, target, weights="int4")


def test_confidence_bucket_counts_leading_sure_slots():
    from engine.drafters.hyflash import confidence_bucket

    probs = np.array([[0.9, 0.1], [0.85, 0.15], [0.3, 0.7], [0.99, 0.01], [0.95, 0.05]])
    lp = np.log(probs)
    assert confidence_bucket(lp, np.array([1, 0, 0, 0, 0])) == "hyflash-sure0"  # 0.1 < 0.8
    assert confidence_bucket(lp, np.array([0, 0, 1, 0, 0])) == "hyflash-sure2"  # 0.7 < 0.8
    assert confidence_bucket(lp[[0, 1, 3, 4]], np.zeros(4, dtype=int)) == "hyflash-sure3"
    assert confidence_bucket(lp[[2]], np.array([0])) == "hyflash-sure0"
    many = np.log(np.tile([[0.9, 0.1]], (15, 1)))
    assert confidence_bucket(many, np.zeros(15, dtype=int)) == "hyflash-sure12"


def test_ngram_index_matches_training_tables():
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 6, 80).tolist()
    ids, match = ngram_candidates(tokens, n_slots=5, max_ngram=3)
    index = NgramIndex(3)
    for a, token in enumerate(tokens):
        got_ids, got_match = index.candidates(token, 5)
        assert np.array_equal(got_ids, ids[a]) and np.array_equal(got_match, match[a])
        index.observe([token])
    assert (match > 0).any() and (match == 3).any()
    # a continuation never runs past the anchor: "a b c a b" + anchor "c" -> "a b c"
    index = NgramIndex(3)
    index.observe([7, 8, 9, 7, 8])
    cand, m = index.candidates(9, 4)
    assert cand[:3].tolist() == [7, 8, 9] and m.tolist() == [3, 3, 3, 0]


def test_training_and_run_time_break_mixture_ties_alike(stand_in, drafters):
    """Exact ties in the mixture go to the lower target id on both sides: the torch model's
    argmax (training accuracy) and the run time's (greedy drafts and argmax of the logits)."""
    target, _, _ = stand_in
    model, path = drafters["hyflash-mamba2"]
    drafter = HyFlashDrafter.load(path, target)
    vocab = model.draft_ids.numpy()
    outside = np.setdiff1d(np.arange(V), vocab)  # copied ids with no vocabulary mass
    lo, hi = vocab.min(), vocab.max()
    assert outside.min() < hi and outside.max() > lo
    tie = np.float32(np.log(0.25))
    vocab_lp = np.full((3, len(vocab)), np.log(0.01), dtype=np.float32)
    copy_lp = np.full((3, 3), -1e9, dtype=np.float32)
    copy_ids = np.tile(outside[:3], (3, 1))
    # row 0: the vocabulary winner ties a lower copied id -> the copied id
    vocab_lp[0, np.argmax(vocab)] = tie
    copy_ids[0, 0], copy_lp[0, 0] = outside.min(), tie
    # row 1: two copied ids tie, the higher one first -> the lower one
    copy_ids[1, :2], copy_lp[1, :2] = [outside[-1], outside[-2]], tie
    # row 2: the vocabulary winner ties a higher copied id -> the vocabulary winner
    vocab_lp[2, np.argmin(vocab)] = tie
    copy_ids[2, 2], copy_lp[2, 2] = outside.max(), tie
    want = [outside.min(), outside[-2], lo]
    greedy, _ = drafter.mixture_argmax(vocab_lp, copy_lp, copy_ids)
    logits = drafter.mix_logits(vocab_lp, copy_lp, copy_ids)
    out = SlotOutput(
        torch.from_numpy(vocab_lp), torch.from_numpy(copy_lp), torch.from_numpy(copy_ids)
    )
    assert greedy.tolist() == want
    assert np.argmax(logits, axis=1).tolist() == want
    assert model.mixture_argmax(out).tolist() == want


def test_runtime_does_not_import_torch():
    code = "import sys, engine.drafters.hyflash; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ----- the real target --------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_target():
    from engine.llama.target import LlamaTarget
    from engine.models.resolve import resolve_target

    _, path = resolve_target(None)
    # one thread: on a shared 2-core machine a starved second llama.cpp thread stalls decode
    target = LlamaTarget(path, n_ctx=512, features=True, n_threads=1)
    yield target
    target.close()


def test_card_for_another_target_is_refused(tmp_path, real_target, stand_in, drafters):
    _, path = drafters["hyflash-mamba2"]
    card = json.loads((path / "card.json").read_text())
    folder = tmp_path / "other"
    folder.mkdir()
    card["target"] = {"gguf_sha256": "0" * 64, "vocab_size": 32000, "hidden_size": 576}
    (folder / "card.json").write_text(json.dumps(card))
    with pytest.raises(DrafterMismatchError, match="vocabulary 32000"):
        HyFlashDrafter.load(folder, real_target)
    # right shape, other file: refused by the GGUF hash
    card["target"] = {"gguf_sha256": "0" * 64, "vocab_size": 49152, "hidden_size": 576}
    (folder / "card.json").write_text(json.dumps(card))
    with pytest.raises(DrafterMismatchError, match="sha256"):
        HyFlashDrafter.load(folder, real_target)
    # fused features from a layer this 30-layer target does not have
    fused = 3 * card["config"]["hidden_size"]  # two layers and the final state
    deep = dict(card, config=dict(card["config"], feature_layers=[4, 40], feature_dim=fused))
    (folder / "card.json").write_text(json.dumps(deep))
    with pytest.raises(DrafterMismatchError, match=r"reads target layers \[4, 40\]"):
        HyFlashDrafter.load(folder, real_target)
    with pytest.raises(DrafterMismatchError, match="no card.json"):
        HyFlashDrafter.load(tmp_path, real_target)
    # a drafter from a newer app (a graph interface this one does not know) is refused
    card["format_version"] = CARD_VERSION + 1
    (folder / "card.json").write_text(json.dumps(card))
    with pytest.raises(DrafterMismatchError, match="Update the app"):
        HyFlashDrafter.load(folder, real_target)


@pytest.mark.parametrize("layers", [(), (4, 15, 26)], ids=["final", "fused"])
def test_real_target_end_to_end(tmp_path, real_target, layers):
    """A (random-weight) drafter for the real SmolLM2 target: loads against it, reads its
    embedding rows from the Q8_0 GGUF, folds real features (fused: three layers' inputs and
    the final state, captured by llama.cpp as the loop asks for them), and plugs into the
    lossless loop: greedy output equals plain decoding."""
    from engine.decoding.speculative import generate_tokens
    from engine.drafters.none import NoDrafter
    from engine.events import Finished, GenerationSettings

    target = real_target
    ident = target_identity(target.path)
    cfg = DrafterConfig(
        d_model=64,
        n_layers=1,
        n_heads=2,
        window=16,
        block_size=4,
        mem_heads=2,
        mem_key_dim=16,
        mem_value_dim=16,
        draft_vocab_size=512,
        ptr_dim=16,
        feature_layers=layers,
        feature_dim=(len(layers) + 1) * 576,
    )
    from engine.training.gguf_weights import load_target_weights

    weights = load_target_weights(target.path)
    torch.manual_seed(0)
    model = HyFlashModel(cfg, weights.embedding, weights.lm_head, np.arange(512)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export_drafter(model, tmp_path / "real", target=ident, quantize=())
    drafter = HyFlashDrafter.load(path, target, threads=1)

    prompt = target.tokenize("Count: 1, 2, 3, 4, 5, 6,", add_special=True)
    settings = GenerationSettings(max_tokens=12, temperature=0.0, block_size=4)

    def run(d):
        target.reset()
        events = list(generate_tokens(target, d, prompt, settings))
        return next(e for e in events if isinstance(e, Finished))

    plain, spec = run(NoDrafter()), run(drafter)
    assert spec.token_ids == plain.token_ids and len(plain.token_ids) == 12
    assert spec.stats.draft_memory_bytes == draft_memory_bytes(cfg, 0)
    assert target.feature_layers == layers

    # the drafter state equals a fresh one fed the same committed context in one go
    target.reset()
    out = target.decode(prompt[:-1])
    assert out.features.shape == (len(prompt) - 1, cfg.feature_dim)
    target.set_features(True)  # back to final-only for the module's other tests
    fresh = HyFlashDrafter.load(path, target, threads=1)
    fresh.observe(prompt[:-1], out.features)
    ref = model.mixture_logprobs(
        model.propose_reference(
            torch.from_numpy(out.features), torch.tensor(prompt[:-1]), prompt[-1]
        )
    )[0, 0].numpy()
    got = fresh.propose(prompt[-1], 3).logits
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], atol=1e-3, rtol=0)


def test_catch_up_leaves_the_drafter_where_per_step_observes_would(real_target):
    """The loop folds committed tokens into the drafter only before it proposes (catch_up):
    catching up in a few chunked observes must propose what observes of 1-3 tokens per step
    (the old loop's pattern) do."""
    from engine.decoding.speculative import catch_up
    from engine.drafters.spec import hyflash_drafter_dir

    target = real_target
    folder = hyflash_drafter_dir("smollm2-135m-instruct")
    tokens = target.tokenize("def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n" * 3)
    context, anchor = tokens[:-1], tokens[-1]
    half = len(context) // 2
    target.reset()
    lazy = HyFlashDrafter.load(folder, target, threads=1)
    target.decode(context[:half])
    assert catch_up(lazy, target, 0) == half
    target.decode(context[half:])
    assert catch_up(lazy, target, half) == len(context)
    assert catch_up(lazy, target, len(context)) == len(context)  # nothing new: no call

    stepwise = HyFlashDrafter.load(folder, target, threads=1)
    i, sizes = 0, [1, 3, 2]
    while i < len(context):
        j = min(len(context), i + sizes[i % 3])
        stepwise.observe(context[i:j], target.features(i, j))
        i = j
    a, b = stepwise.propose(anchor, 8), lazy.propose(anchor, 8)
    assert a.tokens.tolist() == b.tokens.tolist()
    finite = np.isfinite(a.logits)
    assert np.array_equal(finite, np.isfinite(b.logits))
    # the shipped weights are dynamic INT8, which scales activations per call, so chunking
    # moves logits slightly (the per-step loop's prompt observe was one chunk too)
    assert np.corrcoef(a.logits[finite], b.logits[finite])[0, 1] > 0.99
