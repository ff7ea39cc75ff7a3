"""Long-context benchmark prompts: in their token bucket, deterministic, from offline data."""

from __future__ import annotations

import pytest

from engine.paths import REPO


@pytest.fixture(scope="module")
def tokenizer_target(model_path):
    from engine.llama.target import LlamaTarget

    with LlamaTarget(model_path, n_ctx=64) as t:
        yield t


@pytest.mark.parametrize("bucket", [(2048, 4096), (4096, 8192)])
def test_long_prompts_fall_in_their_bucket(tokenizer_target, bucket):
    from engine.bench.longctx import long_prompts
    from engine.llama.chat_template import ChatTemplate

    lo, hi = bucket
    prompts = long_prompts(tokenizer_target, lo, hi, per_set=2, seed=3)
    assert {p.prompt.source for p in prompts} == {"hotpotqa", "essay"}
    assert len(prompts) == 4 and len({p.prompt.key for p in prompts}) == 4
    template = ChatTemplate.for_target(tokenizer_target)
    for p in prompts:
        ids = template.tokenize(tokenizer_target, [{"role": "user", "content": p.prompt.text}])
        assert len(ids) == p.n_tokens and lo <= p.n_tokens < hi
    again = long_prompts(tokenizer_target, lo, hi, per_set=2, seed=3)
    assert [p.prompt.text for p in again] == [p.prompt.text for p in prompts]
    hotpot = next(p for p in prompts if p.prompt.source == "hotpotqa").prompt.text
    assert hotpot.startswith("Documents:") and "Question:" in hotpot


def test_long_training_prompts_never_reuse_a_benchmark_question(tokenizer_target):
    from engine.bench.longctx import long_prompts, long_training_prompts

    lo, hi = 2048, 4096
    train = long_training_prompts(tokenizer_target, lo, hi, n=3)
    bench = long_prompts(tokenizer_target, lo, hi, per_set=3)
    assert len(train) == 3 and {p.prompt.source for p in train} == {"hotpotqa"}
    assert all(lo <= p.n_tokens < hi for p in train)
    questions = {p.prompt.text.rsplit("Question:", 1)[1] for p in train}
    bench_questions = {
        p.prompt.text.rsplit("Question:", 1)[1] for p in bench if p.prompt.source == "hotpotqa"
    }
    assert len(questions) == 3 and len(bench_questions) == 3
    assert not questions & bench_questions
    assert not {p.prompt.key for p in train} & {p.prompt.key for p in bench}


def test_answer_files_default_to_the_committed_names_per_target():
    from engine.paths import DEFAULT_CORPUS, conversations_path, default_answers_path

    # Benchmarks and RESULTS read these files: regenerating without --out must extend them,
    # not leave the committed ones stale beside a differently named new file.
    committed = [("long", "2048-4096"), ("long", "4096-7936"), ("long-train", "2048-4096")]
    for split, bucket in committed:
        assert (REPO / default_answers_path("smollm2-135m-instruct", split, bucket)).is_file()
    assert default_answers_path("smollm2-135m-instruct", "train", "2048-4096") == DEFAULT_CORPUS
    # answers are appended by key: another target's must go to its own folder
    gemma = default_answers_path("gemma-3-270m-q4_k_m", "long", "2048-4096")
    assert gemma.parent.name == "gemma-3-270m-q4_k_m" and gemma.name == "long_2048-4096.jsonl"
    # ShareGPT's answers in each target's tokens: the committed SmolLM2 file, Gemma's beside
    # its own answers (the catalog's gemma-3-270m trains its shipped drafter from them)
    assert (REPO / conversations_path("smollm2-135m-instruct")).is_file()
    for split in ("train", "eval"):
        assert (REPO / default_answers_path("gemma-3-270m", split, "")).is_file()
    assert (REPO / conversations_path("gemma-3-270m")).is_file()
