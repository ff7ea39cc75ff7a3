"""Losslessness on the real model: greedy speculative output == plain decoding, token for token."""

from __future__ import annotations

import pytest
from generated import MAX_TOKENS, run

from engine.bench.prompts import CHAT_PROMPTS, RAW_PROMPTS
from engine.decoding.blocksize import BlockSizeChooser, CostModel

BLOCK_SIZES = [1, 2, 4, 8, 16, "auto"]


@pytest.fixture(scope="module")
def plain_outputs(engine):
    engine.set_drafter("none")
    chat = {p: run(engine, p) for p in CHAT_PROMPTS}
    raw = {p: run(engine, p, raw=True) for p in RAW_PROMPTS}
    return chat, raw


def test_prompt_set_is_large_and_drafter_proposes_a_lot(plain_outputs, engine):
    chat, raw = plain_outputs
    assert len(chat) + len(raw) >= 25
    engine.set_drafter("ngram")
    accepted = sum(run(engine, p, block_size=8).stats.tau_mean > 1.5 for p in CHAT_PROMPTS)
    assert accepted >= 5, "too few prompts where n-gram drafts are accepted often"


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_ngram_greedy_equals_plain(plain_outputs, engine, block_size):
    chat, raw = plain_outputs
    engine.set_drafter("ngram")
    if block_size == "auto":
        # On this CPU auto rightly verifies almost nothing (a 2-token verify costs 2x); give it
        # a GPU-like cost curve, where verifying 16 tokens costs about one, so the auto path
        # drafts, verifies and rolls back a lot.
        engine.chooser = BlockSizeChooser(CostModel({1: 0.010, 16: 0.011}, ema=0.0), 16)
    total_accepted = 0
    for prompt, ref in chat.items():
        out = run(engine, prompt, block_size=block_size)
        assert out.token_ids == ref.token_ids, f"block {block_size}: {prompt!r}"
        assert out.text == ref.text
        total_accepted += sum(out.stats.slot_accept_counts)
    for prompt, ref in raw.items():
        out = run(engine, prompt, raw=True, block_size=block_size)
        assert out.token_ids == ref.token_ids, f"block {block_size} raw: {prompt!r}"
    if block_size != 1:
        assert total_accepted > 50  # the drafter really was exercised


def high_level_llama(model_path, target):
    """llama-cpp-python's high-level Llama with LlamaTarget's model and attention parameters:
    the kernel configuration the check chose (extra buffer types; on some CPUs on means a
    crash), flash attention on and a q8_0 KV cache (see LlamaTarget why), none of which the
    high-level class uses by default. It reads the model defaults inside its constructor."""
    import llama_cpp.llama_cpp as low_level
    from llama_cpp import Llama

    defaults = low_level.llama_model_default_params

    def with_kernels():
        params = defaults()
        params.use_extra_bufts = target.kernels.extra_bufts
        return params

    low_level.llama_model_default_params = with_kernels
    try:
        return Llama(
            str(model_path),
            n_ctx=1024,
            n_threads=target.n_threads,
            verbose=False,
            flash_attn=True,
            type_k=8,
            type_v=8,
        )
    finally:
        low_level.llama_model_default_params = defaults


def test_plain_decoding_equals_llama_cpp_python_high_level(plain_outputs, model_path, engine):
    _, raw = plain_outputs
    llm = high_level_llama(model_path, engine.target)
    try:
        for prompt, ref in raw.items():
            tokens = engine.raw_tokens(prompt)
            out = llm.create_completion(
                tokens, max_tokens=MAX_TOKENS, temperature=0.0, top_k=1, echo=False
            )
            assert out["choices"][0]["text"] == ref.text, prompt
    finally:
        llm.close()


def test_long_greedy_run_keeps_kv_bookkeeping(engine):
    """2,000 tokens through many accept/rollback cycles must equal plain decoding."""
    prompt = "Count upwards, one number per line:\n1\n2\n3\n"
    engine.set_drafter("none")
    ref = run(engine, prompt, raw=True, max_tokens=2000, ignore_eos=True)
    engine.set_drafter("ngram")
    out = run(engine, prompt, raw=True, block_size=8, max_tokens=2000, ignore_eos=True)
    assert len(ref.token_ids) == 2000
    assert out.token_ids == ref.token_ids
    assert out.stats.tau_mean > 1.2  # the rollback path really ran many times
    assert engine.target.n_past == out.prompt_tokens - 1 + 2000
