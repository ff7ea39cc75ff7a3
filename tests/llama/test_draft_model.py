"""A draft model as drafter (engine.llama.draft_model): a small GGUF of the target's vocabulary
drafts token by token in its own llama.cpp context. Greedy output equals plain decoding at
every block size, on the embedded model drafting for itself (cheap, many prompts) and on the
real pair: Qwen2.5-Coder-0.5B drafting for the 1.5B. A pair whose vocabularies differ is
refused with one line naming the first difference, in the engine, the CLI and the server."""

from __future__ import annotations

import subprocess
import sys

import pytest
from generated import run

from engine.events import DrafterMismatchError
from engine.llama.draft_model import DraftModelDrafter, pairing_problem
from engine.models.catalog import load_catalog
from engine.models.resolve import resolve_target
from engine.paths import REPO

SMALL = "model:smollm2-135m-instruct"
PROMPTS = [
    "List the first ten prime numbers, separated by commas.",
    "Write a Python function that reverses a string.",
    "Count from one to twelve in words.",
    "What is the capital of France? Answer in one sentence.",
    "Repeat the word 'blue' eight times.",
]


@pytest.fixture(scope="module")
def paths():
    return {
        name: resolve_target(name)[1]
        for name in (
            "smollm2-135m-instruct",
            "gemma-3-270m",
            "qwen2.5-coder-0.5b-instruct",
            "qwen2.5-coder-1.5b-instruct",
        )
    }


def test_pairing_reads_the_headers_and_names_the_first_difference(paths):
    assert (
        pairing_problem(paths["qwen2.5-coder-1.5b-instruct"], paths["qwen2.5-coder-0.5b-instruct"])
        is None
    )
    gemma = pairing_problem(paths["qwen2.5-coder-1.5b-instruct"], paths["gemma-3-270m"])
    assert gemma is not None and "\n" not in gemma
    assert "gemma-3-270m" in gemma and "262,144 tokens" in gemma and "151,936" in gemma
    smol = pairing_problem(paths["qwen2.5-coder-0.5b-instruct"], paths["smollm2-135m-instruct"])
    assert smol is not None and "\n" not in smol and "49,152" in smol


def test_same_size_vocabularies_differing_in_one_token_are_refused(tmp_path, paths):
    """Counts alone are not enough: one token's text changed in a copy of the header."""
    src = paths["smollm2-135m-instruct"]
    data = bytearray(src.read_bytes())
    at = data.find(b"<|im_start|>")  # a chat-template token, in the vocabulary array
    assert at > 0
    data[at + 2 : at + 4] = b"IM"
    changed = tmp_path / "changed.gguf"
    changed.write_bytes(bytes(data))
    problem = pairing_problem(src, changed)
    assert problem is not None and "token " in problem and "<|IM_start|>" in problem


def test_greedy_output_equals_plain_at_every_block_size(engine):
    engine.set_drafter("none")
    plain = {p: run(engine, p, max_tokens=48) for p in PROMPTS}
    engine.set_drafter(SMALL)
    try:
        drafter = engine.drafter
        assert isinstance(drafter, DraftModelDrafter) and drafter.name == SMALL
        accepted = 0
        for block_size in (2, 4, 8, "auto"):
            for prompt, ref in plain.items():
                out = run(engine, prompt, block_size=block_size, max_tokens=48)
                assert out.token_ids == ref.token_ids, (block_size, prompt)
                accepted += sum(out.stats.slot_accept_counts)
        # the model drafting for itself: nearly every confident draft is its own next token
        assert accepted > 100
        # weights and its KV are reported as the drafter's memory
        assert drafter.memory_bytes() > drafter.model.model_size_bytes() > 50 * 2**20
    finally:
        engine.set_drafter("ngram")


def test_sampling_with_a_draft_model_drafts_and_repeats_with_its_seed(engine):
    engine.set_drafter(SMALL)
    try:
        out = run(engine, PROMPTS[2], block_size=4, max_tokens=48, temperature=0.7, seed=11)
        again = run(engine, PROMPTS[2], block_size=4, max_tokens=48, temperature=0.7, seed=11)
        assert out.token_ids == again.token_ids and len(out.token_ids) > 10
        assert sum(out.stats.slot_propose_counts) > 0
    finally:
        engine.set_drafter("ngram")


def test_a_mismatched_draft_model_is_refused_in_one_line_and_the_engine_falls_back(engine):
    with pytest.raises(DrafterMismatchError) as info:
        engine.set_drafter("model:gemma-3-270m")
    assert "\n" not in str(info.value) and "262,144" in str(info.value)
    note = engine.set_drafter("model:gemma-3-270m", fallback="ngram")
    assert engine.drafter.name == "ngram" and "262,144" in note
    with pytest.raises(DrafterMismatchError, match="no-such-model"):
        engine.set_drafter("model:no-such-model")
    with pytest.raises(DrafterMismatchError, match="after model:"):
        engine.set_drafter("model:")


def test_the_cli_refuses_a_mismatched_pair_in_one_line():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.commands.cli",
            "generate",
            "--prompt",
            "Hi",
            "--drafter",
            "model:gemma-3-270m",
            "--max-tokens",
            "4",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if "262,144" in line]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_the_15b_catalog_model_is_assembled_from_its_parts_in_order(paths):
    entry = load_catalog()["qwen2.5-coder-1.5b-instruct"]
    from engine.models.pypi_parts import part_files

    parts = part_files(entry.source)
    assert [p.name for p in parts] == [f"part{i:02d}.bin" for i in range(1, 23)]
    assert [p.stat().st_size for p in parts] == [52_428_800] * 21 + [16_315_968]
    path = paths["qwen2.5-coder-1.5b-instruct"]
    assert path.stat().st_size == entry.size_bytes == 1_117_320_768
    record = path.with_name(path.name + ".sha256").read_text().split()[0]
    assert record == entry.source["sha256"]  # written only after the sha256 check passed


@pytest.fixture(scope="module")
def coder15():
    from engine.engine import Engine

    eng = Engine("qwen2.5-coder-1.5b-instruct", drafter="none", n_ctx=2048, n_threads=2)
    yield eng
    eng.close()


def test_the_05b_draft_model_keeps_the_15bs_greedy_output(coder15):
    from engine.decoding.blocksize import BlockSizeChooser, CostModel

    prompts = PROMPTS[:2]
    plain = {p: run(coder15, p, max_tokens=40) for p in prompts}
    coder15.set_drafter("model:qwen2.5-coder-0.5b-instruct")
    accepted = 0
    for block_size in (4, "auto"):
        if block_size == "auto":  # a GPU-like cost curve, so auto verifies large blocks too
            coder15.chooser = BlockSizeChooser(CostModel({1: 0.010, 16: 0.011}, ema=0.0), 16)
        for prompt, ref in plain.items():
            out = run(coder15, prompt, block_size=block_size, max_tokens=40)
            assert out.token_ids == ref.token_ids, (block_size, prompt)
            accepted += sum(out.stats.slot_accept_counts)
    assert accepted > 20  # the 0.5B predicts the 1.5B's tokens most of the time


def test_a_draft_model_stays_loaded_while_another_drafter_runs(engine):
    engine.set_drafter(SMALL)
    first = engine.drafter
    engine.set_drafter("ngram")
    engine.set_drafter(SMALL)
    assert engine.drafter is first  # not loaded again
    engine.set_drafter("ngram")
