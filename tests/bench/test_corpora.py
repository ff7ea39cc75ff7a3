"""Prompt corpora from the offline PyPI data packages, and the fixed train/eval split."""

from __future__ import annotations

from engine.bench.corpora import GSM8K_EVAL, eval_prompts, gsm8k, mbpp, train_prompts


def test_corpora_load_with_expected_sizes():
    ev = eval_prompts()
    assert {k: len(v) for k, v in ev.items()} == {
        "gsm8k": GSM8K_EVAL,
        "humaneval": 164,
        "mtbench": 80,
        "math500": 311,
        "aime2025": 30,
        "mbpp": 500,
    }
    assert len(gsm8k()) == 1319
    train = train_prompts(sharegpt_limit=500)
    assert {p.source for p in train} == {"sharegpt", "gsm8k", "ifbench", "mbpp"}
    assert all(p.text.strip() for p in train)


def test_evaluation_prompts_never_reach_training():
    train = train_prompts(sharegpt_limit=500)
    eval_keys = {p.key for group in eval_prompts().values() for p in group}
    eval_texts = {p.text for group in eval_prompts().values() for p in group}
    assert not eval_keys & {p.key for p in train}
    assert not eval_texts & {p.text for p in train}


def test_training_order_is_fixed_and_mixed():
    a = [p.key for p in train_prompts(sharegpt_limit=300)]
    b = [p.key for p in train_prompts(sharegpt_limit=300)]
    assert a == b
    assert len({k.split("/")[0] for k in a[:100]}) >= 3  # any prefix mixes sources


def test_training_prompts_of_chosen_sources_keep_their_order():
    every = train_prompts(sharegpt_limit=300)
    in_domain = train_prompts(sharegpt_limit=300, sources=frozenset({"gsm8k", "mbpp"}))
    assert in_domain == [p for p in every if p.source in {"gsm8k", "mbpp"}]
    assert len(in_domain) == len(gsm8k()) - GSM8K_EVAL + len(mbpp("train")) + 90
    # MBPP validation joined the training prompts after the others: older prefixes unchanged
    keys = [p.key for p in every]
    validation = {p.key for p in mbpp("validation")}
    assert set(keys[-90:]) == validation and not validation & set(keys[:-90])
