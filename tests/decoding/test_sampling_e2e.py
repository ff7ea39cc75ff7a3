"""End to end on the real model: with sampling, the drafter must not change what is sampled.

Over many seeds, the tokens at positions 2-6 of answers sampled with the n-gram drafter on
(fixed block 4) and off must come from the same distribution (chi-square homogeneity)."""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy.stats import chi2_contingency

from engine.events import Finished, GenerationSettings

PROMPT = "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat."
SEEDS = 240
POSITIONS = range(1, 6)  # 0-based: the 2nd..6th generated token


def sample_answers(engine, drafter: str, block_size: int, seed_offset: int):
    engine.set_drafter(drafter)
    answers, accepted = [], 0
    for seed in range(SEEDS):
        settings = GenerationSettings(
            max_tokens=6,
            temperature=1.0,
            top_p=0.95,
            seed=seed_offset + seed,
            block_size=block_size,
            ignore_eos=True,
        )
        for event in engine.generate(PROMPT, raw=True, settings=settings):
            if isinstance(event, Finished):
                answers.append(event.token_ids)
                accepted += sum(event.stats.slot_accept_counts)
    return answers, accepted


def homogeneity_pvalue(a: list[int], b: list[int], min_count: int = 5) -> float:
    ca, cb = Counter(a), Counter(b)
    keys = [k for k in set(ca) | set(cb) if ca[k] + cb[k] >= min_count]
    rows = [[ca[k] for k in keys], [cb[k] for k in keys]]
    rows[0].append(len(a) - sum(rows[0]))
    rows[1].append(len(b) - sum(rows[1]))
    table = np.array(rows)
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 1.0  # one category only on both sides: identical
    return float(chi2_contingency(table).pvalue)


def test_sampled_tokens_are_indistinguishable_with_and_without_drafter(engine):
    plain, _ = sample_answers(engine, "none", 1, seed_offset=0)
    spec, accepted = sample_answers(engine, "ngram", 4, seed_offset=100_000)
    assert accepted > SEEDS, "the drafter was hardly exercised"
    pvalues = [homogeneity_pvalue([t[i] for t in plain], [t[i] for t in spec]) for i in POSITIONS]
    assert min(pvalues) > 0.01 / len(POSITIONS), pvalues
    # and the answers really vary (the test would be vacuous on a deterministic prompt)
    assert len({t[1:6] for t in plain}) > 5


def test_seeded_sample_with_ngram_equals_seeded_plain_sample(engine):
    """One-hot drafts use the coupled rule, so a seed fixes the answer whatever the drafter
    and block size (randomness is drawn per output position)."""
    outs = []
    for drafter, block in (("none", 1), ("ngram", 4), ("ngram", "auto"), ("ngram", 16)):
        engine.set_drafter(drafter)
        settings = GenerationSettings(max_tokens=40, temperature=0.9, seed=99, block_size=block)
        for event in engine.generate(PROMPT, raw=True, settings=settings):
            if isinstance(event, Finished):
                outs.append(event.token_ids)
    assert all(o == outs[0] for o in outs[1:])


def test_same_seed_gives_same_sample(engine):
    engine.set_drafter("ngram")
    settings = GenerationSettings(max_tokens=24, temperature=0.8, seed=1234, block_size=4)
    runs = []
    for _ in range(2):
        for event in engine.generate("Tell me a fun fact.", settings=settings):
            if isinstance(event, Finished):
                runs.append(event.token_ids)
    assert runs[0] == runs[1]
