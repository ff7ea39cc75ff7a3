"""The n-gram drafter: the continuation of the most recent match, within the draft length."""

from __future__ import annotations

from engine.drafters import NgramDrafter


def test_ngram_proposes_continuation_of_most_recent_match():
    d = NgramDrafter(max_ngram=3)
    d.observe([1, 2, 3, 4, 5, 9, 2, 3, 7, 8])
    # anchor 3 after history ending in ...7, 8: 3-gram (7,8,3) unseen, 2-gram (8,3) unseen,
    # 1-gram (3,) last seen before 7 -> 7, 8 reach the present (the anchor 3), so the copy
    # runs on through the proposal: the loop 7, 8, 3 repeats to the draft length
    draft = d.propose(3, 4)
    assert draft.tokens.tolist() == [7, 8, 3, 7] and draft.bucket == "ngram1"
    d.observe([3])  # anchor committed; history ...7, 8, 3
    draft = d.propose(7, 3)  # (8, 3, 7) unseen; (3, 7) seen: continuation 8, 3, 7
    assert draft.tokens.tolist() == [8, 3, 7] and draft.bucket == "ngram2"
    d.observe([7])
    draft = d.propose(8, 7)  # (3, 7, 8) seen: continuation 3, 7, 8, 3, 7, 8, 3
    assert draft.tokens.tolist() == [3, 7, 8, 3, 7, 8, 3] and draft.bucket == "ngram3"
    assert d.propose(8, 2).tokens.tolist() == [3, 7]
    assert d.propose(42, 4).tokens.size == 0
    assert d.memory_bytes() > 0
    d.reset()
    assert d.propose(3, 4).tokens.size == 0


def test_ngram_respects_max_tokens():
    d = NgramDrafter()
    d.observe(list(range(10)) + [0, 1])
    assert d.propose(2, 3).tokens.tolist() == [3, 4, 5]
    assert d.propose(2, 0).tokens.size == 0
