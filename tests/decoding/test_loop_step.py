"""One decoding step (SpeculativeDecoder.step) on a small fake target whose next token is a
known function of the last one, and on the real model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from engine.decoding.blocksize import SHADOW_SLACK, BlockSizeChooser, CostModel, FixedBlock
from engine.decoding.drafter_protocol import Draft
from engine.decoding.sampling import Warp
from engine.decoding.speculative import SpeculativeDecoder
from engine.decoding.target_protocol import DecodeOutput

VOCAB = 50


def successor(token: int) -> int:
    return (3 * token + 1) % VOCAB


class FakeTarget:
    """A cache of tokens; each row's logits put the successor of its token on top."""

    def __init__(self, context: Sequence[int]) -> None:
        self.tokens = list(context)
        self.decoded_rows = 0

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def decode(self, tokens: Sequence[int]) -> DecodeOutput:
        logits = np.zeros((len(tokens), VOCAB), dtype=np.float32)
        logits[np.arange(len(tokens)), [successor(t) for t in tokens]] = 10.0
        self.tokens.extend(tokens)
        self.decoded_rows += len(tokens)
        return DecodeOutput(logits=logits, features=None, layers={})

    def truncate(self, n_keep: int) -> None:
        del self.tokens[n_keep:]


class ScriptedDrafter:
    """Proposes the true continuation of the anchor, wrong from slot `wrong_from` on."""

    name = "scripted"
    wants_features = False
    feature_layers: tuple[int, ...] = ()

    def __init__(self, wrong_from: int | None = None, pays_per_draft: bool = False) -> None:
        self.wrong_from = wrong_from
        self.pays_per_draft = pays_per_draft
        self.observed: list[int] = []
        self.calls = 0
        self.asked: list[int] = []  # max_tokens of every propose

    def reset(self) -> None:
        self.observed = []

    def observe(self, tokens: Sequence[int], features: np.ndarray | None) -> None:
        self.observed.extend(int(t) for t in tokens)

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        self.calls += 1
        self.asked.append(max_tokens)
        tokens, t = [], anchor
        for i in range(max_tokens):
            t = successor(t)
            tokens.append(
                (t + 1) % VOCAB if self.wrong_from is not None and i >= self.wrong_from else t
            )
        return Draft(np.array(tokens, dtype=np.int32), bucket="b")

    def memory_bytes(self) -> int:
        return 0


def truth(anchor: int, n: int) -> list[int]:
    out, t = [], anchor
    for _ in range(n):
        t = successor(t)
        out.append(t)
    return out


def decoder(target, drafter, policy) -> SpeculativeDecoder:
    return SpeculativeDecoder(target, drafter, policy, Warp(), seed=0, verify_chunk=None)


@pytest.mark.parametrize("wrong_from", [None, 0, 2, 5])
def test_step_accepts_the_right_prefix_and_keeps_the_cache_invariant(wrong_from):
    context, anchor = [1, 2, 3], 7
    target, drafter = FakeTarget(context), ScriptedDrafter(wrong_from)
    step = decoder(target, drafter, FixedBlock(8)).step(anchor, position=0, max_draft=7)
    accepted = 7 if wrong_from is None else wrong_from
    assert (step.proposed, step.accepted) == (7, accepted)
    assert step.tokens == truth(anchor, accepted + 1)  # drafts, then the target's own token
    # the cache holds every committed token but the new anchor; rejected rows are gone
    assert target.tokens == [*context, anchor, *step.tokens[:-1]]
    assert target.decoded_rows == 8
    assert drafter.observed == context  # caught up before proposing, the anchor not yet


def test_step_without_drafting_is_one_plain_decode_and_the_drafter_catches_up_later():
    cost = CostModel({1: 0.010, 2: 0.030, 16: 0.300}, ema=0.0)
    chooser = BlockSizeChooser(cost, max_block=16)
    chooser.observe_draft_time(1.0)  # a drafter this slow never pays
    chooser.start()
    target, drafter = FakeTarget([4]), ScriptedDrafter(wrong_from=0)
    dec = decoder(target, drafter, chooser)
    anchor, calls = 5, []
    for position in range(40):
        step = dec.step(anchor, position, max_draft=15)
        assert step.tokens == truth(anchor, step.accepted + 1)
        calls.append(drafter.calls)
        anchor = step.tokens[-1]
    asked = sorted(set(calls))
    assert 2 <= len(asked) <= 3  # asked only to explore
    # when it was asked again it had folded in every token committed while idle at once
    assert drafter.observed == target.tokens[: len(drafter.observed)]
    assert len(drafter.observed) > 30


def _run_auto(drafter: ScriptedDrafter, steps: int) -> list[tuple[int, int]]:
    """(proposed, accepted) of each step under block size auto on a CPU-like cost curve."""
    cost = CostModel({1: 0.010, 2: 0.017, 4: 0.026, 8: 0.048, 16: 0.085}, ema=0.0)
    chooser = BlockSizeChooser(cost, max_block=16)
    chooser.observe_draft_time(0.0001)
    chooser.start()
    dec = decoder(FakeTarget([4]), drafter, chooser)
    anchor, blocks = 5, []
    for position in range(steps):
        step = dec.step(anchor, position, max_draft=15)
        assert step.tokens == truth(anchor, step.accepted + 1)
        blocks.append((step.proposed, step.accepted))
        anchor = step.tokens[-1]
    return blocks


def test_a_drafter_that_pays_per_draft_is_asked_only_for_what_may_be_verified():
    # every proposal has 4 right drafts, then wrong ones; drafting pays once explored
    free, paying = ScriptedDrafter(4), ScriptedDrafter(4, pays_per_draft=True)
    blocks = _run_auto(free, 300)
    assert blocks[-20:] == [(4, 4)] * 20
    assert set(free.asked) == {15}  # a free drafter is asked for all: the shadow sees all
    # asked for fewer, the chooser picks the very same blocks...
    assert _run_auto(paying, 300) == blocks
    # ...asking for all until the shadow has evidence, then the chosen block + SHADOW_SLACK
    assert paying.asked[0] == 15 and set(paying.asked[-20:]) == {4 + SHADOW_SLACK}


def test_step_on_the_real_model_matches_plain_decoding(engine):
    """The step on llama.cpp: drafts from the model's own greedy continuation are all taken,
    and a wrong draft is replaced by the model's token."""
    target = engine.target
    target.set_features(False)
    prompt = engine.raw_tokens("The capital of France is")
    target.reuse_prefix([])
    target.prefill(prompt[:-1])
    start = target.n_past

    class Replay(ScriptedDrafter):
        def __init__(self, tokens: list[int]) -> None:
            super().__init__()
            self.tokens = tokens

        def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
            return Draft(np.array(self.tokens[:max_tokens], dtype=np.int32))

    plain = []
    anchor = prompt[-1]
    for position in range(6):
        step = decoder(target, Replay([]), FixedBlock(1)).step(anchor, position, 0)
        plain.append(anchor := step.tokens[-1])
    target.truncate(start)
    step = decoder(target, Replay(plain[:5]), FixedBlock(6)).step(prompt[-1], 0, 5)
    assert (step.accepted, step.tokens) == (5, plain)
    target.truncate(start)
    wrong = [plain[0], (plain[1] + 1) % target.n_vocab, *plain[2:5]]
    step = decoder(target, Replay(wrong), FixedBlock(6)).step(prompt[-1], 0, 5)
    assert (step.accepted, step.tokens) == (1, plain[:2])
    assert target.n_past == start + 2  # the anchor and the one accepted draft
