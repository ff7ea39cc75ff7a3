"""LlamaTarget on the real GGUF: batched verify == 1-token decodes, features, prefix reuse,
rollback, KV accounting, layer capture, chat template."""

from __future__ import annotations

import re

import numpy as np
import pytest

from engine.llama.target import LlamaTarget, recent_llama_log


@pytest.fixture(scope="module")
def target(model_path):
    t = LlamaTarget(model_path, n_ctx=1024, features=True, capture_layers=(10,))
    yield t
    t.close()


@pytest.mark.parametrize("context", [10, 600])
def test_batched_verify_rows_equal_single_token_decodes(target, context):
    """The strict invariant behind greedy losslessness, also past 512 attended cells where
    an f16 KV cache would switch 1-token decodes to another attention kernel."""
    target.reset()
    text = " ".join(f"item {i}," for i in range(400))
    tokens = target.tokenize(text)[: context + 16]
    target.prefill(tokens[:context])
    block = tokens[context : context + 16]
    start = target.n_past
    batched = target.decode(block)
    target.truncate(start)
    for i, token in enumerate(block):
        single = target.decode([token])
        np.testing.assert_array_equal(single.logits[0], batched.logits[i])
        np.testing.assert_array_equal(single.features[0], batched.features[i])
    assert target.n_past == start + len(block)


def test_features_and_lm_head_shapes(target):
    target.reset()
    out = target.decode(target.tokenize("Hello there"))
    n = out.logits.shape[0]
    assert out.logits.shape == (n, target.n_vocab) and target.n_vocab == 49152
    assert out.features.shape == (n, target.n_embd) and target.n_embd == 576
    assert np.isfinite(out.features).all() and np.abs(out.features).sum() > 0
    assert out.layers[10].shape == (n, 576)
    assert not np.allclose(out.layers[10], out.features)  # a middle layer, not the output


def test_fused_features_are_layer_inputs_then_the_final_state(target):
    """set_features(True, layers): each row is those layers' inputs in order, then the final
    state (what a fused-layer drafter reads); changing the layers forgets stored features,
    and a layer the target captures for itself stays captured when the drafter drops it."""
    tokens = target.tokenize("The quick brown fox jumps over the lazy dog")
    target.reset()
    plain = target.decode(tokens)
    target.reset()
    target.set_features(True, (3, 10))
    assert target.features_known_upto() == 0
    fused = target.decode(tokens)
    e = target.n_embd
    assert fused.features.shape == (len(tokens), 3 * e)
    np.testing.assert_array_equal(fused.features[:, e : 2 * e], fused.layers[10])
    np.testing.assert_array_equal(fused.features[:, 2 * e :], plain.features)
    np.testing.assert_array_equal(target.features(0, len(tokens)), fused.features)
    assert not np.allclose(fused.features[:, :e], fused.layers[10])  # layer 3 is its own
    target.set_features(True, (3, 10))  # unchanged: the stored features stay
    assert target.features_known_upto() == len(tokens)
    target.set_features(True)
    assert target.features_known_upto() == 0 and target.feature_layers == ()
    target.reset()
    again = target.decode(tokens)
    assert again.features.shape == (len(tokens), e)
    np.testing.assert_array_equal(again.layers[10], fused.layers[10])


def test_rollback_and_prefix_reuse(target):
    target.reset()
    a = target.tokenize("One two three four five six")
    target.prefill(a)
    full = target.features(0, len(a)).copy()
    b = a[:4] + target.tokenize(" seven eight", add_special=False)
    reused = target.reuse_prefix(b)
    assert reused == 4 and target.n_past == 4 and target.tokens == a[:4]
    np.testing.assert_array_equal(target.features(0, 4), full[:4])
    assert target.features(0, 5) is None
    target.prefill(b[4:])
    assert target.tokens == b
    # the reused cache gives the same next-token logits as a fresh decode of b
    cached = target.decode([1]).logits[-1]
    target.reset()
    target.prefill(b)
    fresh = target.decode([1]).logits[-1]
    np.testing.assert_array_equal(cached, fresh)


def test_kv_bytes_match_llama_cpp_own_report(model_path):
    t = LlamaTarget(model_path, n_ctx=512)
    try:
        log = recent_llama_log(200)
        sizes = re.findall(r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells", log)
        assert sizes, log[-2000:]
        mib, cells = float(sizes[-1][0]), int(sizes[-1][1])
        assert cells == t.n_ctx
        assert abs(t.kv_bytes_allocated() / 2**20 - mib) < 0.01
        assert t.kv_bytes_used() == 0
        t.prefill(t.tokenize("Hello world, how are you today?"))
        assert t.kv_bytes_used() == t.kv_bytes_per_token() * t.n_past > 0
    finally:
        t.close()


def test_chat_template_renders_chatml(engine):
    tokens = engine.chat_tokens([{"role": "user", "content": "Hi!"}])
    text = engine.target.detokenize(tokens, special=True)
    assert engine.target.chat_template() is not None
    assert text.count("<|im_start|>") >= 2 and text.rstrip().endswith("<|im_start|>assistant")
    assert "Hi!" in text


def test_gemma_fallback_uses_its_control_tokens_and_folds_the_system_message():
    from engine.llama.chat_template import CHATML, GEMMA_TURNS, ChatTemplate, fallback_template

    gemma_vocab = {"<start_of_turn>", "<end_of_turn>"}
    assert fallback_template(lambda text: text in gemma_vocab) == GEMMA_TURNS
    assert fallback_template(lambda text: text == "<start_of_turn>") == CHATML
    text = ChatTemplate(GEMMA_TURNS, bos_token="<bos>").render(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Bye?"},
        ]
    )
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye?<end_of_turn>\n<start_of_turn>model\n"
    )


def test_a_vocabulary_without_gemma_markers_falls_back_to_chatml(engine):
    from engine.llama.chat_template import CHATML, fallback_template

    target = engine.target
    assert target.is_control_token("<|im_start|>") and target.is_control_token("<|im_end|>")
    assert not target.is_control_token("<start_of_turn>")
    assert not target.is_control_token("Hello")  # one ordinary token is not a control token
    assert len(target.tokenize("Hello", add_special=False)) == 1
    assert fallback_template(target.is_control_token) == CHATML
