"""Block size `auto`: verify as many draft tokens as maximise expected tokens per second.

Cost: T(n), the time of an n-token target decode, is timed on this machine at load and then
tracked online (EMA of the real verify times). Benefit: conditional per-slot acceptance rates
c_j = P(slot j accepted | slots < j accepted), kept per draft bucket (the n-gram match length,
say). They are learnt from every proposal, verified or not, by comparing it with the tokens the
target actually committed afterwards ("shadow" evaluation), so choosing to verify nothing
never starves the estimate. Verifying k drafts commits E(k) = 1 + sum_j prod_{i<=j} c_i tokens
in T(k+1) seconds; plain decoding commits 1 in T(1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.options import DEFAULT_MAX_BLOCK, MAX_BLOCK_SIZE  # the settings' table owns them

PROFILE_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)
EXPLORE_EVERY = 32  # steps between drafter calls even when drafting does not seem to pay
# Bucket suffix for proposals made right after one the target took whole (2+ tokens): on
# repeated, quoted or edited text one full match predicts the next far better than the
# average of its kind, and on novel text such runs are rare, so the split costs little there.
RUN_SUFFIX = "|run"
SAVING_REFRESH = 16  # cost-model updates before the expected saving per call is recomputed
# Drafts asked of a drafter that pays per draft beyond the largest block now chosen: only the
# shadow estimate judges them, so a block can grow by this many slots per proposal.
SHADOW_SLACK = 2
# Verify drafts only where the expected speed beats plain decoding by this fraction: on a
# compute-bound CPU (T(2)/T(1) near 1.7) the gain of a short verify is within the noise of
# the estimates, and a wrong call costs a whole extra row.
MIN_SPEEDUP = 0.05
# Slot-1 outcomes (decayed) a kind of proposal needs before its estimate can make the drafter
# worth calling every step; before that the Beta prior (0.5 per slot) speaks, and exploration
# (every EXPLORE_EVERY steps, after full matches) gathers the evidence.
MIN_EVIDENCE = 4.0
# P(slot accepted) assumed of a kind of proposal nothing is known about yet.
BLANK_PRIOR = 0.5
# One verify time may move the cost model's estimate by at most this factor: a decode that a
# scheduler hiccup made twice as slow says nothing about the next one.
COST_CLIP = 1.25


class CostModel:
    """T(n) in seconds for n = 1..MAX_BLOCK_SIZE, linear between measured sizes."""

    def __init__(self, measured: dict[int, float], ema: float = 0.1) -> None:
        if 1 not in measured:
            raise ValueError("the cost model needs T(1)")
        self.measured = dict(measured)
        self.ema = ema
        self._table: np.ndarray | None = None
        self.version = 0  # bumped by every observation, so users can tell the table moved

    @property
    def table(self) -> np.ndarray:
        """T(1..MAX_BLOCK_SIZE); rebuilt when read after an observation (a verify every step
        observes, the table is read only when drafting is considered)."""
        if self._table is None:
            sizes = sorted(self.measured)
            xs = np.arange(1, MAX_BLOCK_SIZE + 1)
            times = np.interp(xs, sizes, [self.measured[s] for s in sizes])
            if sizes[-1] < MAX_BLOCK_SIZE and len(sizes) > 1:
                # beyond the last measured size, extend with the slope of the last segment
                s0, s1 = sizes[-2], sizes[-1]
                slope = (self.measured[s1] - self.measured[s0]) / (s1 - s0)
                beyond = xs > s1
                times[beyond] = self.measured[s1] + slope * (xs[beyond] - s1)
            self._table = np.maximum.accumulate(times)  # a longer batch never costs less
        return self._table

    def __call__(self, n: int) -> float:
        return float(self.table[n - 1])

    def observe(self, n: int, seconds: float) -> None:
        if self.ema <= 0.0:
            return  # a fixed model (e.g. another machine's curve, simulated)
        old = self.measured.get(n)
        if old is not None:
            seconds = min(max(seconds, old / COST_CLIP), old * COST_CLIP)
        self.measured[n] = seconds if old is None else (1 - self.ema) * old + self.ema * seconds
        self._table = None
        self.version += 1

    def ratios(self) -> dict[int, float]:
        return {n: self(n) / self(1) for n in range(1, MAX_BLOCK_SIZE + 1)}


def profile_costs(
    decode_n: Callable[[int], None], sizes: Sequence[int] = PROFILE_SIZES, repeats: int = 3
) -> dict[int, float]:
    """Time decode_n(n) (which must decode n tokens and roll them back) for each size."""
    decode_n(1)  # warm-up: first decode allocates buffers
    result = {}
    for n in sizes:
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            decode_n(n)
            samples.append(time.perf_counter() - start)
        result[n] = float(np.median(samples))
    return result


@dataclass
class _SlotStats:
    accepted: np.ndarray
    trials: np.ndarray
    prior: float  # P(slot accepted) before any outcome; worth prior_trials outcomes


@dataclass
class _Pending:
    bucket: str
    tokens: list[int]
    start: int  # index in the committed stream of the token slot 1 should equal


@dataclass
class AcceptanceEstimator:
    """Per-bucket conditional acceptance rates with a Beta prior and exponential forgetting.
    The prior is BLANK_PRIOR per slot unless the drafter said better for the bucket (a
    caller's prediction, say) when it first proposed one."""

    max_slots: int = MAX_BLOCK_SIZE - 1
    prior_trials: float = 2.0
    decay: float = 0.98
    buckets: dict[str, _SlotStats] = field(default_factory=dict)

    def _stats(self, bucket: str, prior: float | None = None) -> _SlotStats:
        if bucket not in self.buckets:
            zeros = np.zeros(self.max_slots)
            self.buckets[bucket] = _SlotStats(
                zeros, zeros.copy(), BLANK_PRIOR if prior is None else prior
            )
        return self.buckets[bucket]

    def declare(self, bucket: str, prior: float | None) -> None:
        """A bucket's prior, kept from its first proposal on (None: the blank prior)."""
        self._stats(bucket, prior)

    def has_prior(self, bucket: str) -> bool:
        s = self.buckets.get(bucket)
        return s is not None and s.prior != BLANK_PRIOR

    def rates(self, bucket: str) -> np.ndarray:
        s = self._stats(bucket)
        return (s.accepted + s.prior * self.prior_trials) / (s.trials + self.prior_trials)

    def evidence(self, bucket: str) -> float:
        """Decayed count of this bucket's resolved proposals (its slot-1 trials)."""
        s = self.buckets.get(bucket)
        return 0.0 if s is None else float(s.trials[0])

    def record(self, bucket: str, n_matched: int, n_tried: int) -> None:
        """Slots 1..n_matched were accepted; slot n_matched+1 rejected if n_matched < n_tried."""
        s = self._stats(bucket)
        s.accepted *= self.decay
        s.trials *= self.decay
        upto = min(n_tried, n_matched + 1, self.max_slots)
        s.trials[:upto] += 1
        s.accepted[: min(n_matched, self.max_slots)] += 1


class FixedBlock:
    """A fixed block size: verify every draft token the drafter offers, learn nothing. The
    loop talks to it as it talks to BlockSizeChooser."""

    def __init__(self, size: int) -> None:
        self.max_block = size

    def start(self) -> None:
        pass

    def worth_drafting(self) -> bool:
        return True

    def choose_drafts(self, kind: str, tokens: np.ndarray, prior: float | None = None) -> int:
        return len(tokens)

    def draft_budget(self, max_draft: int) -> int:
        return max_draft

    def observe_draft_time(self, seconds: float) -> None:
        pass

    def observe_verify(self, n_rows: int, seconds: float) -> None:
        pass

    def committed(self, tokens: Sequence[int]) -> None:
        pass


class BlockSizeChooser:
    def __init__(self, cost: CostModel, max_block: int = DEFAULT_MAX_BLOCK) -> None:
        self.cost = cost
        self.max_block = max_block
        self.estimator = AcceptanceEstimator()
        self._stream: list[int] = []  # tokens committed in this generation
        self._pending: list[_Pending] = []
        self._bucket_counts: dict[str, float] = {}  # how often each kind of proposal comes
        self._steps_since_draft = 0
        self.draft_seconds = 0.0  # EMA of the drafter's call time
        self._run = False  # local evidence: the last proposal resolved was taken whole
        self._saving: float | None = None  # cached expected saving per drafter call
        self._saving_cost = 0  # the cost model's version it was computed with
        self._budget: int | None = None  # cached draft_budget before clipping
        self._budget_cost = 0

    def start(self) -> None:
        """A new generation: what was learnt stays; proposals of the last one are dropped."""
        self._stream = []
        self._pending = []
        self._run = False

    def bucket(self, kind: str) -> str:
        """The statistics key of a proposal of this kind (the drafter's bucket), split by
        whether the last proposal resolved matched in full."""
        return kind + RUN_SUFFIX if self._run else kind

    def choose_drafts(self, kind: str, tokens: np.ndarray, prior: float | None = None) -> int:
        """How many of a proposal's tokens to verify; the proposal is remembered and judged
        against the tokens the target commits (the shadow estimate). prior: the drafter's
        P(slot accepted) for this kind before any evidence (Draft.prior)."""
        bucket = self.bucket(kind)
        self.estimator.declare(bucket, prior)
        self.propose_made(bucket, tokens, len(self._stream))
        return self.choose(bucket, len(tokens))

    def expected_tokens(self, bucket: str, k: int) -> float:
        c = self.estimator.rates(bucket)[:k]
        return 1.0 + float(np.sum(np.cumprod(c)))

    def choose(self, bucket: str, n_available: int) -> int:
        """How many of n_available draft tokens to verify (0 = plain decoding this step)."""
        n = min(n_available, self.max_block - 1)
        if n <= 0:
            return 0
        c = np.cumprod(self.estimator.rates(bucket)[:n])
        expected = 1.0 + np.concatenate(([0.0], np.cumsum(c)))  # E(0..n)
        speeds = expected / self.cost.table[: n + 1]
        best = int(np.argmax(speeds))
        return best if speeds[best] >= (1.0 + MIN_SPEEDUP) * speeds[0] else 0

    def worth_drafting(self) -> bool:
        """Whether calling the drafter is expected to save more time than the call costs:
        the expected saving per call is the mix, over the kinds of proposal the drafter makes
        (its buckets, an empty proposal included, a bucket only once it has MIN_EVIDENCE
        outcomes), of the best block's time saved against plain decoding beyond the
        MIN_SPEEDUP margin. A drafter that does not pay is still asked every EXPLORE_EVERY steps,
        so the shadow estimates can notice when the text becomes predictable, and right after
        a proposal that matched in full."""
        self._steps_since_draft += 1
        if self._run or self.draft_seconds <= 0.0 or self._steps_since_draft >= EXPLORE_EVERY:
            return True  # after a full match the next proposal is worth a look
        return self._expected_saving() > self.draft_seconds

    def _expected_saving(self) -> float:
        """Kept until a proposal is made or resolved, or the cost model has moved for
        SAVING_REFRESH steps: this runs every step, the numbers behind it move rarely."""
        if self._saving is None or self.cost.version - self._saving_cost >= SAVING_REFRESH:
            self._saving_cost = self.cost.version
            # empty proposals save nothing; kinds with too little evidence are left to
            # exploration
            buckets = self._known_buckets()
            if not buckets:
                self._saving = 0.0
                return 0.0
            n = self.max_block - 1
            counts = np.array([self._bucket_counts[b] for b in buckets])
            rates = np.stack([self.estimator.rates(b)[:n] for b in buckets])
            expected = 1.0 + np.cumsum(np.cumprod(rates, axis=1), axis=1)  # E(1..n)
            # the time a verify saves, counted only beyond choose()'s margin
            gains = expected * self.cost(1) / (1.0 + MIN_SPEEDUP) - self.cost.table[1 : n + 1]
            mix = counts / sum(self._bucket_counts.values())
            self._saving = float(mix @ np.maximum(gains.max(axis=1), 0.0))
        return self._saving

    def _known_buckets(self) -> list[str]:
        """The kinds of (non-empty) proposal seen with MIN_EVIDENCE outcomes, or whose
        drafter gave a prior for them (it speaks for the evidence not gathered yet)."""
        est = self.estimator
        return [
            b
            for b in self._bucket_counts
            if b and (est.evidence(b) >= MIN_EVIDENCE or est.has_prior(b))
        ]

    def draft_budget(self, max_draft: int) -> int:
        """How many drafts to ask of a drafter whose call time grows with them: the largest
        block any kind of proposal with MIN_EVIDENCE outcomes would verify now, plus
        SHADOW_SLACK; all max_draft until some kind has the evidence. Cached like the
        expected saving (this runs every drafting step)."""
        if self._budget is None or self.cost.version - self._budget_cost >= SAVING_REFRESH:
            self._budget_cost = self.cost.version
            n = self.max_block - 1
            best = max((self.choose(b, n) for b in self._known_buckets()), default=n)
            self._budget = min(n, best + SHADOW_SLACK)
        return min(max_draft, self._budget)

    def observe_verify(self, n_rows: int, seconds: float) -> None:
        self.cost.observe(n_rows, seconds)

    def observe_draft_time(self, seconds: float) -> None:
        self.draft_seconds = (
            seconds if self.draft_seconds == 0 else 0.9 * self.draft_seconds + 0.1 * seconds
        )

    def propose_made(self, bucket: str, tokens: Sequence[int], start: int) -> None:
        self._steps_since_draft = 0
        self._saving = self._budget = None
        for key in self._bucket_counts:
            self._bucket_counts[key] *= self.estimator.decay
        key = bucket if len(tokens) else ""
        self._bucket_counts[key] = self._bucket_counts.get(key, 0.0) + 1.0
        if len(tokens):
            self._pending.append(_Pending(bucket, [int(t) for t in tokens], start))

    def committed(self, tokens: Sequence[int]) -> None:
        """Resolve pending proposals against the tokens the target committed."""
        self._stream.extend(tokens)
        stream = self._stream
        still = []
        for p in self._pending:
            available = len(stream) - p.start
            matched = 0
            while (
                matched < min(available, len(p.tokens))
                and stream[p.start + matched] == p.tokens[matched]
            ):
                matched += 1
            if matched == len(p.tokens) or matched < available:
                self.estimator.record(p.bucket, matched, len(p.tokens))
                self._saving = self._budget = None
                self._run = matched == len(p.tokens) >= 2
            else:
                still.append(p)
        self._pending = still
