"""The training-side target (the GGUF in torch via transformers) against llama.cpp's, on the
real embedded SmolLM2 GGUF: tokenizer ids, final-layer and middle-layer features, argmax,
batched greedy generation, and the torch feature source's cache.

Tolerances: llama.cpp's Q4_1 matmuls quantize activations to 8 bits while torch multiplies
the dequantized weights in float, so features agree closely but not bitwise (measured on the
text below, fp32: cosine mean 0.9992, min 0.9964; argmax 95%)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.llama.chat_template import ChatTemplate
from engine.llama.target import LlamaTarget
from engine.training import torch_target
from engine.training.torch_target import TorchTarget

TEXT = (
    "The Apollo 11 mission landed on the Moon on July 20, 1969. Neil Armstrong and Buzz "
    "Aldrin walked on the surface while Michael Collins orbited above. To compute the area "
    "of a circle, multiply pi by the square of its radius: def area(r): return 3.14159 * r ** 2"
)
LAYER = 10


@pytest.fixture(scope="module")
def torch_t(model_path):
    torch.set_num_threads(1)  # the machine is shared with timing runs
    t = TorchTarget(model_path, dtype="fp32", device="cpu", capture_layers=(LAYER,))
    yield t
    t.close()


@pytest.fixture(scope="module")
def llama_t(model_path):
    t = LlamaTarget(model_path, n_ctx=512, features=True, capture_layers=(LAYER,), n_threads=1)
    yield t
    t.close()


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _chat_ids(target: LlamaTarget, text: str) -> list[int]:
    return ChatTemplate.for_target(target).tokenize(target, [{"role": "user", "content": text}])


@pytest.mark.parametrize(
    "text",
    [
        "Hello world, how are you?",
        "  def f(x):\n\treturn x**2  # 3.14159, ünïcödé 日本語 🙂\n\n",
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        TEXT,
    ],
)
def test_tokenizer_gives_llama_cpp_ids(torch_t, llama_t, text):
    """Text as the engine tokenizes it: no BOS added (SmolLM2 adds none), special tokens
    written in the text (chat markers) parsed as such."""
    assert not llama_t.adds_bos()
    expected = llama_t.tokenize(text, add_special=False, parse_special=True)
    assert torch_t.tokenize(text) == expected


def test_chat_template_prompt_ids(torch_t, llama_t):
    template = ChatTemplate.for_target(llama_t)
    messages = [{"role": "user", "content": TEXT}]
    assert torch_t.tokenize(template.render(messages)) == template.tokenize(llama_t, messages)


def test_features_and_argmax_match_llama_cpp(torch_t, llama_t):
    ids = _chat_ids(llama_t, TEXT)
    assert 90 <= len(ids) <= 130
    llama_t.reset()
    ref = llama_t.decode(ids)
    # batched with a shorter sequence (right padding) to test the padded path too
    out, short = torch_t.forward([ids, ids[:20]])
    assert out.features.shape == ref.features.shape == (len(ids), 576)
    cos = _cosine(ref.features, out.features)
    assert cos.mean() >= 0.998 and cos.min() >= 0.99, (cos.mean(), cos.min())
    ratio = np.linalg.norm(out.features, axis=1) / np.linalg.norm(ref.features, axis=1)
    assert abs(ratio.mean() - 1) < 0.01
    assert np.mean(out.next_tokens == ref.logits.argmax(1)) >= 0.9
    # layer capture indexes as LlamaTarget's: the input of decoder layer LAYER
    layer_cos = _cosine(ref.layers[LAYER], out.layers[LAYER])
    assert layer_cos.mean() >= 0.999 and layer_cos.min() >= 0.99
    assert _cosine(out.layers[LAYER], out.features).mean() < 0.9  # a middle layer
    np.testing.assert_allclose(short.features, out.features[:20], atol=1e-3)
    assert np.array_equal(short.next_tokens, out.next_tokens[:20])


def test_batched_generation_equals_unbatched(torch_t, llama_t):
    """Left padding with a KV cache: each prompt's greedy answer in a batch of prompts of
    different lengths equals its answer alone (fp32; bf16 may differ in near-ties)."""
    eos = [i for i in range(llama_t.n_vocab) if llama_t.is_eog(i)]
    prompts = [
        _chat_ids(llama_t, q)
        for q in [
            "Answer with one word: what color is the sky?",
            "Write a haiku about rain.",
            "What is 2+2? Explain briefly why addition of small whole numbers works this way.",
        ]
    ]
    assert len({len(p) for p in prompts}) == 3
    batched = torch_t.generate_batch(prompts, 16, eos)
    for prompt, got in zip(prompts, batched, strict=True):
        assert got == torch_t.generate_batch([prompt], 16, eos)[0]
    answer, stop = batched[0]
    assert stop == "eos" and 0 < len(answer) < 16 and not set(answer) & set(eos)
    assert batched[1][1] == "length" and len(batched[1][0]) == 16


def test_torch_answers_name_their_generator_and_resume(torch_t, llama_t, tmp_path):
    """data generate --generator torch: rows in the corpus format that name their generator;
    a second run answers only the prompts the file lacks, and its rows start past a line cut
    by a kill (not glued to it) while the rows already written stay as they were."""
    from engine.bench.corpora import Prompt
    from engine.training.data_run import prompts_to_answer
    from engine.training.distill import load_answers
    from engine.training.torch_target import generate_answers

    eos = [i for i in range(llama_t.n_vocab) if llama_t.is_eog(i)]
    prompts = [
        Prompt("test", str(i), q)
        for i, q in enumerate(["Name a fruit.", "Count to five.", "Say hi.", "What is 3+4?"])
    ]
    out = tmp_path / "answers.jsonl"
    first = prompts_to_answer(llama_t, prompts[:2], out, 512)
    assert generate_answers(torch_t, first, out, batch=2, max_tokens=6, eos_ids=eos) == 2
    with open(out, "a", encoding="utf-8") as f:
        f.write('{"key": "test/2", "source": "te')  # killed mid-write
    written = out.read_text(encoding="utf-8")
    todo = prompts_to_answer(llama_t, prompts, out, 512)
    assert [p.key for p, _ in todo] == ["test/2", "test/3"]
    assert generate_answers(torch_t, todo, out, batch=2, max_tokens=6, eos_ids=eos) == 2
    assert out.read_text(encoding="utf-8").startswith(written)
    rows = load_answers(out)
    assert sorted(r["key"] for r in rows) == [p.key for p in prompts]
    for row in rows:
        ids = _chat_ids(llama_t, prompts[int(row["key"].split("/")[1])].text)
        answer, stop = torch_t.generate_batch([ids], 6, eos)[0]
        assert row["prompt_ids"] == ids and row["answer_ids"] == answer
        assert row["stop"] == stop and row["generator"] == "torch-fp32"
    assert prompts_to_answer(llama_t, prompts, out, 512) == []


def test_torch_feature_source_writes_a_cache_the_trainer_reads(
    torch_t, llama_t, model_path, tmp_path, monkeypatch
):
    from engine.training.features import cache_dir_for, feature_cache, resolve_source
    from engine.training.train import Sequences, make_batch

    assert resolve_source("torch", "fp32") == "torch-fp32"
    keys = ["a", "b"]
    assert cache_dir_for(model_path, keys, source="torch-fp32").parent.name == "torch-fp32"
    assert cache_dir_for(model_path, keys) != cache_dir_for(model_path, keys, source="torch-fp32")
    ids = _chat_ids(llama_t, TEXT)
    # prefixes out of length order: the torch source batches them sorted by length, and
    # each must come back at its own index
    tokens = [np.asarray(ids[:n], dtype=np.int64) for n in (len(ids), 30, 45)]
    # a llama.cpp cache of the same sequences beside it (same parent, a name the reuse scan
    # matches) must not be reused by the torch source
    llama_dir = tmp_path / f"{model_path.stem}-llama"
    torch_dir = tmp_path / f"{model_path.stem}-torch"
    llama_feats, _ = feature_cache(tokens, model_path, llama_dir, threads=1, with_labels=True)
    llama_t.reset()
    ref = llama_t.decode(ids)
    np.testing.assert_array_equal(llama_feats[0], ref.features.astype(np.float16))
    # the module's torch target, not a second 20-second load; feature_cache closes what it opens
    monkeypatch.setattr(torch_t, "close", lambda: None)
    monkeypatch.setattr(torch_target, "TorchTarget", lambda *a, **k: torch_t)
    feats, labels = feature_cache(
        tokens, model_path, torch_dir, with_labels=True, source="torch-fp32"
    )
    assert not np.array_equal(feats[0], llama_feats[0])
    assert _cosine(ref.features, np.asarray(feats[0], dtype=np.float32)).mean() >= 0.998
    assert labels[0][0] == ids[0] and np.mean(labels[0][1:] == ref.logits.argmax(1)[:-1]) >= 0.9
    for j, n in ((1, 30), (2, 45)):  # a causal target: a prefix's rows are the whole's
        np.testing.assert_array_equal(labels[j], labels[0][:n])
        np.testing.assert_allclose(feats[j], feats[0][:n], atol=2e-2)
    batch = make_batch(
        Sequences(tokens, feats, [10, 10, 10], labels), [0, 1], np.array([[20], [25]])
    )
    assert batch["features"].shape == (2, len(ids), 576) and batch["labels"].shape == (2, len(ids))
    assert torch.isfinite(batch["features"]).all()
    # cached: read back without computing (a target would be an error now)
    monkeypatch.setattr(torch_target, "TorchTarget", None)
    again, _ = feature_cache(tokens, model_path, torch_dir, with_labels=True, source="torch-fp32")
    assert all(np.array_equal(a, b) for a, b in zip(feats, again, strict=True))


def test_llama_rows_of_one_sequence_survive_the_next(llama_t):
    from engine.training.features import llama_rows

    first_ids = _chat_ids(llama_t, "The first of two sequences.")
    first, preds = llama_rows(llama_t, first_ids, True)
    kept = first.copy()
    second, _ = llama_rows(llama_t, _chat_ids(llama_t, "A different, second sequence here."), False)
    assert np.array_equal(first, kept)  # not a view of the target's reused feature store
    assert len(preds) == len(first_ids) and not np.array_equal(first[-1], second[-1])


def test_fused_feature_caches_agree_across_sources(
    torch_t, llama_t, model_path, tmp_path, monkeypatch
):
    """A fused-layer cache (layer LAYER's input, then the final state) from either source:
    rows as wide as the layers say, chunks that agree between llama.cpp and torch, and a
    cache of other layers beside it never reused."""
    from engine.training.features import cache_dir_for, feature_cache

    layers = (LAYER,)
    keys = ["a"]
    assert cache_dir_for(model_path, keys, layers=layers) != cache_dir_for(model_path, keys)
    ids = _chat_ids(llama_t, TEXT)
    tokens = [np.asarray(ids, dtype=np.int64)]
    e = llama_t.n_embd
    plain, _ = feature_cache(tokens, model_path, tmp_path / f"{model_path.stem}-plain", threads=1)
    fused, _ = feature_cache(
        tokens, model_path, tmp_path / f"{model_path.stem}-fused", threads=1, layers=layers
    )
    assert plain[0].shape == (len(ids), e) and fused[0].shape == (len(ids), 2 * e)
    np.testing.assert_array_equal(fused[0][:, e:], plain[0])
    llama_t.reset()
    ref = llama_t.decode(ids)  # the module's llama target captures LAYER itself
    np.testing.assert_array_equal(fused[0][:, :e], ref.layers[LAYER].astype(np.float16))
    monkeypatch.setattr(torch_t, "close", lambda: None)
    monkeypatch.setattr(torch_target, "TorchTarget", lambda *a, **k: torch_t)
    tfused, _ = feature_cache(
        tokens, model_path, tmp_path / "torch" / model_path.stem, source="torch-fp32", layers=layers
    )
    got = np.asarray(tfused[0], dtype=np.float32)
    want = np.asarray(fused[0], dtype=np.float32)
    for chunk in (slice(0, e), slice(e, 2 * e)):
        assert _cosine(want[:, chunk], got[:, chunk]).mean() >= 0.998


def test_auto_feature_source_takes_what_torch_check_measured_here(tmp_path, monkeypatch):
    """torch-check records the fastest source whose features agree with llama.cpp's; `auto`
    takes it on the same machine only, and torch (native dtype) where nothing was measured."""
    from engine.training import features
    from engine.training.torch_check import record_source_verdict

    verdict = tmp_path / "source.json"
    monkeypatch.setattr(features, "SOURCE_VERDICT", verdict)
    native = f"torch-{torch_target.resolve_dtype('auto')}"
    assert features.resolve_source("auto") == native  # nothing measured yet
    table = [
        {"source": "llama", "features_tok_s": 150.0},
        {"source": "torch-fp32", "features_tok_s": 140.0, "cosine_mean": 0.9997},
        {"source": "torch-bf16", "features_tok_s": 900.0, "cosine_mean": 0.95},  # disagrees
    ]
    assert record_source_verdict(table, "auto", verdict) == "llama"
    assert features.resolve_source("auto") == "llama"
    assert features.resolve_source("torch", "fp32") == "torch-fp32"  # explicit wins
    table[1]["features_tok_s"] = 370.0
    assert record_source_verdict(table, "auto", verdict) == "torch-fp32"
    assert features.resolve_source("auto") == "torch-fp32"
    # measured on another machine: not trusted here
    monkeypatch.setattr(features, "source_machine", lambda device="auto": "another CPU")
    assert features.resolve_source("auto") == native
