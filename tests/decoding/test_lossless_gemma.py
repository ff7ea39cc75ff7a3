"""Losslessness on a K-quant target: Gemma-3-270M Q4_K_M, whose CPU matmul switches kernels at
8 rows (engine.llama.kernels). In exact mode, greedy speculative output equals plain decoding at
every block size; the engine verifies in chunks no larger than the exact B the check found."""

from __future__ import annotations

import pytest
from generated import run

from engine.bench.prompts import CHAT_PROMPTS, RAW_PROMPTS
from engine.decoding.blocksize import BlockSizeChooser, CostModel

# Where whole 8- or 16-token verifies left plain decoding at token 26 (issue 14).
TUTORIAL = (
    "Write a detailed, step-by-step tutorial about building a web server in Python, with code "
    "for every step."
)
CHAT = [*CHAT_PROMPTS[::3], CHAT_PROMPTS[19], CHAT_PROMPTS[20]]
RAW = RAW_PROMPTS[::2]


@pytest.fixture(scope="module")
def gemma(gemma_path):
    from engine.engine import Engine

    # by catalog id (gemma_path unpacked it), so "hyflash" finds the drafter shipped for it
    eng = Engine("gemma-3-270m", drafter="ngram", n_ctx=2048, n_threads=2, verify_mode="auto")
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def plain(gemma):
    gemma.set_drafter("none")
    chat = {p: run(gemma, p) for p in CHAT}
    raw = {p: run(gemma, p, raw=True) for p in RAW}
    tutorial = run(gemma, TUTORIAL, max_tokens=300)
    return chat, raw, tutorial


def test_the_check_found_where_rows_stop_being_exact(gemma):
    verdict = gemma.kernels
    assert verdict.exact_upto is not None and verdict.exact_upto >= 1
    info = gemma.info()
    if verdict.exact_upto < gemma.max_block:  # this CPU's K-quant kernels switch (x86: at 8)
        assert (info.verify_mode, info.verify_chunk) == ("exact", verdict.exact_upto)
        assert f"chunks of {verdict.exact_upto}" in info.verify_reason
    else:
        assert (info.verify_mode, info.verify_chunk) == ("exact", 0)


@pytest.mark.parametrize("block_size", [1, 4, 8, 16, "auto"])
def test_gemma_greedy_equals_plain_in_exact_mode(gemma, plain, block_size):
    chat, raw, tutorial = plain
    gemma.set_drafter("ngram")
    gemma.set_verify_mode("auto")
    if block_size == "auto":  # a GPU-like cost curve, so auto verifies large blocks too
        gemma.chooser = BlockSizeChooser(CostModel({1: 0.010, 16: 0.011}, ema=0.0), 16)
    accepted = 0
    for prompt, ref in chat.items():
        out = run(gemma, prompt, block_size=block_size)
        assert out.token_ids == ref.token_ids, f"block {block_size}: {prompt!r}"
        accepted += sum(out.stats.slot_accept_counts)
    for prompt, ref in raw.items():
        out = run(gemma, prompt, raw=True, block_size=block_size)
        assert out.token_ids == ref.token_ids, f"block {block_size} raw: {prompt!r}"
    out = run(gemma, TUTORIAL, block_size=block_size, max_tokens=300)
    assert out.token_ids == tutorial.token_ids, f"block {block_size}: the tutorial"
    assert out.stats.verify_mode == "exact"
    if block_size != 1:
        accepted += sum(out.stats.slot_accept_counts)
        assert accepted > 50  # drafts really were verified (and chunked, past the exact B)


@pytest.mark.parametrize("block_size", [4, 16, "auto"])
def test_shipped_gemma_drafter_greedy_equals_plain(gemma, plain, block_size):
    """The HyFlash drafter shipped for Gemma-3-270M (resources/drafters/hyflash-gemma-3-270m)
    keeps greedy output identical to plain decoding, its drafts verified in exact chunks."""
    chat, _, tutorial = plain
    gemma.set_drafter("hyflash")
    gemma.set_verify_mode("auto")
    if block_size == "auto":
        gemma.chooser = BlockSizeChooser(CostModel({1: 0.010, 16: 0.011}, ema=0.0), 16)
    try:
        assert gemma.drafter.name == "hyflash"
        accepted = 0
        for prompt, ref in chat.items():
            out = run(gemma, prompt, block_size=block_size)
            assert out.token_ids == ref.token_ids, f"block {block_size}: {prompt!r}"
            accepted += sum(out.stats.slot_accept_counts)
        out = run(gemma, TUTORIAL, block_size=block_size, max_tokens=300)
        assert out.token_ids == tutorial.token_ids, f"block {block_size}: the tutorial"
        accepted += sum(out.stats.slot_accept_counts)
        assert accepted > 50  # its drafts were really used
    finally:
        gemma.set_drafter("ngram")
