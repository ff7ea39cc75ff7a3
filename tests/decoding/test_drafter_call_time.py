"""Block size auto weighs a drafter's time per step against what verifying saves. Folding the
prompt into the drafter happens once per answer and must not count as that time: if it did,
a long prompt would make any drafter look too dear to call (issue 54: a right prediction was
decoded at tau 1.3 because the n-gram fold of the prompt cost ten proposals' time)."""

from __future__ import annotations

import time

from engine.drafters.ngram import NgramDrafter
from engine.events import ErrorEvent, GenerationSettings

OBSERVE_S_PER_TOKEN = 0.002  # a drafter whose observe pays per token, as HyFlash's does


class SlowObserveNgram(NgramDrafter):
    name = "ngram-slow-observe"
    proposals = 0

    def propose(self, anchor, max_tokens, *, with_logits=True):
        self.proposals += 1
        return super().propose(anchor, max_tokens, with_logits=with_logits)

    def observe(self, tokens, features=None) -> None:
        time.sleep(OBSERVE_S_PER_TOKEN * len(tokens))
        super().observe(tokens, features)


def test_the_prompt_fold_is_not_timed_as_a_drafter_call(engine):
    saved = engine.drafter, engine.chooser
    drafter = SlowObserveNgram()
    engine._use(drafter)
    try:
        prompt = "Repeat after me, word for word: " + "the quick brown fox jumps. " * 40
        settings = GenerationSettings(max_tokens=32, block_size="auto")
        events = list(engine.generate(prompt, settings=settings))
        assert not any(isinstance(e, ErrorEvent) for e in events), events
        prompt_tokens = events[-1].prompt_tokens
        assert prompt_tokens > 200  # the fold alone would cost > 0.4 s
        # a step folds at most a block's tokens: 16 x 2 ms, plus the proposal
        per_step_bound = OBSERVE_S_PER_TOKEN * engine.max_block + 0.02
        assert 0.0 < engine.chooser.draft_seconds < per_step_bound
        assert drafter.proposals >= 2  # timed after its first call, it was asked again
    finally:
        engine.drafter, engine.chooser = saved
