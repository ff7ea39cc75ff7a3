"""Layer inputs (fused-layer features) on architectures whose llama.cpp graph does not record
them: llama.cpp would abort the process (GGML_ASSERT); the engine asks a child first and
refuses in one clear line, the model stays usable, and a fused-layer drafter made for such a
model is a drafter that does not fit (so the engine falls back)."""

from __future__ import annotations

import sys

import pytest

from engine.drafters.hyflash import check_card
from engine.events import DrafterMismatchError, EngineError
from engine.llama.layer_capture import layer_capture_works
from engine.llama.target import LlamaTarget

FAILS = [sys.executable, "-c", "import sys; sys.exit(1)"]


@pytest.fixture()
def fresh_cache(gemma_path, monkeypatch, tmp_path):
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_gemma_layer_inputs_are_refused_and_the_model_keeps_working(gemma_path, fresh_cache):
    with pytest.raises(EngineError, match="cannot read the layer inputs of a gemma3 model"):
        LlamaTarget(gemma_path, n_ctx=256, features=True, capture_layers=(3,))
    target = LlamaTarget(gemma_path, n_ctx=256, features=True)
    try:
        with pytest.raises(EngineError, match="layer inputs"):
            target.set_features(True, (3,))
        out = target.decode([2, 3, 4])  # this process was not aborted and still decodes
        assert out.features.shape == (3, target.n_embd)
        card = {
            "name": "fused-for-gemma",
            "target": {"vocab_size": target.n_vocab, "hidden_size": target.n_embd},
            "config": {"feature_layers": [3, 9]},
        }
        with pytest.raises(DrafterMismatchError, match="final layer only, or the n-gram"):
            check_card(card, target)
    finally:
        target.close()
    assert list((fresh_cache / "layer-capture").glob("*.json"))  # the child's answer is kept


def test_the_childs_answer_is_remembered_per_layers(model_path, fresh_cache):
    # SmolLM2 (llama) records layer inputs: the real child says so once
    assert layer_capture_works(model_path, (10,), extra_bufts=False)
    # remembered: a child that would fail is not asked again for the same question
    assert layer_capture_works(model_path, (10,), extra_bufts=False, command=FAILS)
    # another set of layers is another question
    assert not layer_capture_works(model_path, (4, 10), extra_bufts=False, command=FAILS)
