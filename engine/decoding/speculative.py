"""The draft -> verify -> accept loop (README.md, "How it works").

Invariant: the target's KV cache holds every committed token except the anchor (the last
committed token). Each step decodes [anchor, d_1..d_k] in one batch, accepts a drafts, keeps
positions of the anchor and the accepted drafts, rolls back the rest, and the correction (or
bonus) token becomes the new anchor. The drafter folds in committed tokens only when it is
about to propose (catch_up), so steps without a proposal cost it nothing. Under greedy
decoding the committed tokens are exactly plain decoding's; under sampling their distribution
is.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from engine.decoding.blocksize import MAX_BLOCK_SIZE, BlockSizeChooser, FixedBlock
from engine.decoding.drafter_protocol import Drafter
from engine.decoding.sampling import (
    Warp,
    accept_greedy,
    accept_sampling,
    sample,
    warp_probs,
)
from engine.decoding.target_protocol import Target
from engine.decoding.text_stream import TextStream
from engine.events import (
    ErrorEvent,
    Event,
    Finished,
    GenerationSettings,
    StepStats,
    TextDelta,
)


def _position_rng(seed: int, position: int, stream: int = 0) -> np.random.Generator:
    """Randomness for one output position, independent of how the steps were blocked."""
    return np.random.default_rng([seed, position, stream])


def _judge(
    warp: Warp,
    seed: int,
    position: int,
    draft_tokens: np.ndarray,
    draft_probs: np.ndarray | None,
) -> Callable[[np.ndarray, int, int], tuple[int, int | None]]:
    """The acceptance test for verify_block: rows i.. against drafts d_{i+1}..d_{i+n}, each
    output position with its own randomness, so chunking never changes a decision."""

    def judge(logits: np.ndarray, i: int, n: int) -> tuple[int, int | None]:
        drafts = draft_tokens[i : i + n]
        if warp.greedy:
            return accept_greedy(logits, drafts)
        probs = np.stack([warp_probs(row, warp) for row in logits])
        rngs = [_position_rng(seed, position + i + j) for j in range(len(logits))]
        q = draft_probs[i : i + n] if draft_probs is not None else None
        return accept_sampling(probs, drafts, q, rngs)

    return judge


def catch_up(drafter: Drafter, target: Target, observed: int) -> int:
    """Fold the committed tokens the drafter has not seen yet (cached positions observed..
    n_past-1, with their stored features) into it in one call; return the new count. The loop
    calls this only before a proposal, so a drafter that block size auto leaves idle costs
    nothing per step, and catches up in one chunked observe when drafting resumes."""
    upto = target.n_past
    if upto > observed:
        features = target.features(observed, upto) if drafter.wants_features else None
        drafter.observe(target.tokens[observed:upto], features)
    return upto


def verify_block(
    target: Target,
    block: Sequence[int],
    judge: Callable[[np.ndarray, int, int], tuple[int, int | None]],
    chunk: int | None = None,
) -> tuple[int, int, int]:
    """Decode block = [anchor, d_1..d_k] in target decodes of at most `chunk` rows (None:
    one decode) and accept drafts. judge(logits, i, n) tests drafts d_{i+1}..d_{i+n} against
    rows i..; it returns (accepted, token): token is the correction at the first rejection, the
    bonus when the rows include the last one, else None (all passed, more rows to come). A
    chunk with a rejection ends the step: later drafts are never decoded. Returns (accepted,
    next token, rows decoded)."""
    k = len(block) - 1
    step = chunk or len(block)
    accepted = 0
    for i in range(0, len(block), step):
        logits = target.decode(list(block[i : i + step])).logits
        n = min(len(logits), k - i)  # drafts these rows test; one fewer with the bonus row
        a, token = judge(logits, i, n)
        accepted += a
        if token is not None:
            return accepted, token, i + len(logits)
    raise AssertionError("the last chunk always yields a token")  # pragma: no cover


@dataclass(frozen=True)
class Step:
    """What one decoding step did: `proposed` drafts verified, the first `accepted` of them
    taken, then the target's own token; `tokens` are the step's committed tokens."""

    proposed: int
    accepted: int
    tokens: list[int]
    draft_s: float
    verify_s: float


class SpeculativeDecoder:
    """One step at a time: propose -> decode [anchor, drafts] -> accept -> truncate. The
    block policy (FixedBlock or BlockSizeChooser) decides whether to draft and how much to
    verify, and learns from what each step cost and committed."""

    def __init__(
        self,
        target: Target,
        drafter: Drafter,
        policy: FixedBlock | BlockSizeChooser,
        warp: Warp,
        seed: int,
        verify_chunk: int | None,
    ) -> None:
        self.target, self.drafter, self.policy = target, drafter, policy
        self.warp, self.seed, self.verify_chunk = warp, seed, verify_chunk
        self.observed = 0  # cached positions folded into the drafter (catch_up)

    def step(self, anchor: int, position: int, max_draft: int) -> Step:
        """Commit the tokens after `anchor` (output position `position`), verifying at most
        max_draft drafts."""
        t0 = time.perf_counter()
        drafts, draft_probs = np.zeros(0, dtype=np.int32), None
        if max_draft > 0 and self.policy.worth_drafting():
            if self.drafter.pays_per_draft:
                max_draft = self.policy.draft_budget(max_draft)
            folded = self.target.n_past - self.observed
            self.observed = catch_up(self.drafter, self.target, self.observed)
            drafts, draft_probs = self.draft(anchor, position, max_draft)
            # Folding more than one step's tokens (the prompt, or steps the chooser left the
            # drafter idle) is a one-off: timed as a call, it would make drafting look too
            # dear to resume (a prompt's fold cost the prediction drafter ten calls' time).
            if folded <= self.policy.max_block:
                self.policy.observe_draft_time(time.perf_counter() - t0)
        t1 = time.perf_counter()
        start, k = self.target.n_past, len(drafts)
        judge = _judge(self.warp, self.seed, position, drafts, draft_probs)
        a, next_token, rows = verify_block(
            self.target, [anchor, *drafts.tolist()], judge, self.verify_chunk
        )
        t2 = time.perf_counter()
        if rows == k + 1:  # an early stop timed fewer rows
            self.policy.observe_verify(k + 1, t2 - t1)
        self.target.truncate(start + a + 1)
        tokens = [*drafts[:a].tolist(), next_token]
        self.policy.committed(tokens)
        return Step(k, a, tokens, t1 - t0, t2 - t1)

    def draft(
        self, anchor: int, position: int, max_draft: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The drafts to verify, and under sampling their warped q rows (None: greedy, or a
        deterministic drafter)."""
        greedy = self.warp.greedy
        draft = self.drafter.propose(anchor, max_draft, with_logits=not greedy)
        tokens = np.asarray(draft.tokens[:max_draft], dtype=np.int32)
        k = self.policy.choose_drafts(draft.bucket, tokens, draft.prior)
        if draft.logits is None or greedy or not k:
            return tokens[:k], None
        # Sampling verifies draws d_i ~ q_i, warped like the target's rows; only the k
        # verified rows are warped (a row costs a pass over the vocabulary). k was chosen from
        # the drafter's most likely tokens, not from these draws, so the rule stays exact.
        probs = np.stack([warp_probs(r, self.warp) for r in draft.logits[:k]])
        rngs = [_position_rng(self.seed, position + i, 1) for i in range(k)]
        draws = np.array([sample(q, rng) for q, rng in zip(probs, rngs, strict=True)])
        return draws.astype(np.int32), probs


def _input_error(
    target: Target,
    prompt_tokens: Sequence[int],
    settings: GenerationSettings,
    chooser: BlockSizeChooser | None,
) -> ErrorEvent | None:
    # the settings checked themselves when made (GenerationSettings)
    if settings.fixed_block is None and chooser is None:
        return ErrorEvent("block size 'auto' needs a measured cost model", kind="input")
    if not prompt_tokens:
        return ErrorEvent("the prompt is empty", kind="input")
    if len(prompt_tokens) >= target.n_ctx:
        return ErrorEvent(
            f"the prompt is {len(prompt_tokens)} tokens but the context holds {target.n_ctx}; "
            "shorten it, start a new chat, or raise the context length",
            kind="context",
        )
    return None


def _prefill(
    target: Target,
    prompt_tokens: Sequence[int],
    drafter: Drafter,
    cancel: threading.Event | None,
) -> int:
    """Decode all but the last prompt token into the cache, reusing the cached prefix (and,
    for a drafter that reads features, only as much of it as has them); returns the count
    decoded."""
    wants_features = drafter.wants_features
    target.set_features(wants_features, drafter.feature_layers)
    context = list(prompt_tokens[:-1])
    reused = target.reuse_prefix(context)
    if wants_features and target.features_known_upto() < reused:
        reused = target.reuse_prefix(context[: target.features_known_upto()])
    target.prefill(context[reused:], cancel)
    return len(context) - reused


class _Emitter:
    """Committed tokens -> the tokens that are output (none past end-of-text, the length
    limit or a stop string) and their text deltas."""

    def __init__(self, target: Target, settings: GenerationSettings) -> None:
        self.target, self.settings = target, settings
        self.text = TextStream(settings.stop)
        self.generated: list[int] = []
        self.stop_reason = "length"
        self.finished = False

    def emit(self, tokens: list[int], accepted: int) -> tuple[int, list[TextDelta]]:
        """Output a step's tokens (the first `accepted` were drafts); returns how many count
        as committed (an end-of-text token counts, tokens past the limit do not) and the
        deltas, drafted text first (the GUI may tint it)."""
        kept = []
        for token in tokens:
            if self.target.is_eog(token) and not self.settings.ignore_eos:
                self.stop_reason, self.finished = "eos", True
                break
            if len(self.generated) + len(kept) >= self.settings.max_tokens:
                self.stop_reason, self.finished = "length", True
                break
            kept.append(token)
        self.generated.extend(kept)
        deltas = []
        for part, drafted in ((kept[:accepted], True), (kept[accepted:], False)):
            if part:
                piece = self.text.feed(b"".join(self.target.token_bytes(t) for t in part))
                deltas.append(TextDelta(piece, tuple(part), drafted))
        if self.text.stopped:
            self.stop_reason, self.finished = "stop", True
        return len(kept) + (self.stop_reason == "eos" and self.finished), deltas


@dataclass
class _Counters:
    """Running totals behind the StepStats of a generation."""

    max_block: int
    block_mode: str
    verify_mode: str
    verify_chunk: int
    prefill_count: int
    prefill_s: float
    steps: int = 0
    committed: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0

    def __post_init__(self) -> None:
        self.slot_accept = np.zeros(MAX_BLOCK_SIZE - 1, dtype=np.int64)
        self.slot_propose = np.zeros(MAX_BLOCK_SIZE - 1, dtype=np.int64)

    def add(self, step: Step, committed: int) -> None:
        self.steps += 1
        self.committed += committed
        self.slot_propose[: step.proposed] += 1
        self.slot_accept[: step.accepted] += 1
        self.draft_s += step.draft_s  # catching up on committed tokens included
        self.verify_s += step.verify_s

    def stats(
        self,
        step: Step,
        generated: int,
        decode_s: float,
        ttft: float,
        target: Target,
        drafter: Drafter,
    ) -> StepStats:
        return StepStats(
            step=self.steps,
            block_size=step.proposed + 1,
            proposed=step.proposed,
            accepted=step.accepted,
            committed=step.accepted + 1,
            tau_mean=self.committed / self.steps,
            slot_accept_counts=self.slot_accept[: self.max_block - 1].tolist(),
            slot_propose_counts=self.slot_propose[: self.max_block - 1].tolist(),
            tokens_generated=generated,
            tokens_per_s=generated / decode_s if decode_s > 0 else 0.0,
            ttft_s=ttft,
            prefill_tokens=self.prefill_count,
            prefill_tokens_per_s=self.prefill_count / self.prefill_s if self.prefill_s else 0.0,
            target_kv_bytes=target.kv_bytes_used(),
            target_kv_alloc_bytes=target.kv_bytes_allocated(),
            draft_memory_bytes=drafter.memory_bytes(),
            draft_ms=1000 * self.draft_s / self.steps,
            verify_ms=1000 * self.verify_s / self.steps,
            block_size_mode=self.block_mode,
            verify_mode=self.verify_mode,
            verify_chunk=self.verify_chunk,
        )


def _halted(
    out: _Emitter,
    target: Target,
    settings: GenerationSettings,
    cancel: threading.Event | None,
) -> bool:
    """Whether the answer ends before another step (the reason set where it is not the
    emitter's own: end of generation, a stop string or the token limit)."""
    if out.finished:
        return True
    if cancel is not None and cancel.is_set():
        out.stop_reason = "cancelled"
        return True
    if len(out.generated) >= settings.max_tokens:
        return True  # the last step ended exactly at the limit ("length")
    if target.n_ctx - target.n_past < 1:
        out.stop_reason = "context"
        return True
    return False


def generate_tokens(
    target: Target,
    drafter: Drafter,
    prompt_tokens: Sequence[int],
    settings: GenerationSettings,
    *,
    chooser: BlockSizeChooser | None = None,
    cancel: threading.Event | None = None,
    verify_chunk: int | None = None,
    verify_mode: str = "exact",
) -> Iterator[Event]:
    """Generate a continuation of prompt_tokens; yields TextDelta, StepStats, then Finished
    (or ErrorEvent for bad input). verify_chunk: most rows per target decode (the largest
    batch whose rows equal single-token decodes; engine.llama.kernels), None for whole blocks;
    verify_mode names that choice in the stats."""
    t_start = time.perf_counter()
    error = _input_error(target, prompt_tokens, settings, chooser)
    if error is not None:
        yield error
        return
    fixed_block = settings.fixed_block
    policy = chooser if fixed_block is None else FixedBlock(fixed_block)
    policy.start()

    prefill_count = _prefill(target, prompt_tokens, drafter, cancel)
    if cancel is not None and cancel.is_set():
        yield Finished("", (), "cancelled", None, len(prompt_tokens), time.perf_counter() - t_start)
        return
    t_decode = time.perf_counter()
    drafter.reset()
    policy.committed(prompt_tokens)
    seed = settings.seed if settings.seed is not None else secrets.randbits(63)
    warp = Warp(settings.temperature, settings.top_k, settings.top_p)
    decoder = SpeculativeDecoder(target, drafter, policy, warp, seed, verify_chunk)
    out = _Emitter(target, settings)
    counters = _Counters(
        policy.max_block,
        "auto" if fixed_block is None else "fixed",
        verify_mode,
        verify_chunk or 0,
        prefill_count,
        t_decode - t_start,
    )
    anchor, ttft, stats = int(prompt_tokens[-1]), None, None
    while not _halted(out, target, settings, cancel):
        remaining = settings.max_tokens - len(out.generated)
        room = target.n_ctx - target.n_past
        max_draft = min(policy.max_block - 1, room - 1, remaining - 1)
        step = decoder.step(anchor, len(out.generated), max_draft)
        anchor = step.tokens[-1]
        committed, deltas = out.emit(step.tokens, step.accepted)
        counters.add(step, committed)
        now = time.perf_counter()
        if ttft is None and out.generated:
            ttft = now - t_start
        yield from deltas
        stats = counters.stats(
            step,
            len(out.generated),
            now - t_decode,
            ttft if ttft is not None else now - t_start,
            target,
            drafter,
        )
        yield stats

    tail = out.text.feed(b"", final=True)
    if tail:
        yield TextDelta(tail, (), False)
    yield Finished(
        text=out.text.text,
        token_ids=tuple(out.generated),
        stop_reason=out.stop_reason,
        stats=stats,
        prompt_tokens=len(prompt_tokens),
        elapsed_s=time.perf_counter() - t_start,
    )
