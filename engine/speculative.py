"""The draft -> verify -> accept loop (DESIGN.md, "The decoding loop").

Invariant: the target's KV cache holds every committed token except the anchor (the last
committed token). Each step decodes [anchor, d_1..d_k] in one batch, accepts a drafts, keeps
positions of the anchor and the accepted drafts, rolls back the rest, and the correction (or
bonus) token becomes the new anchor. The drafter folds in committed tokens only when it is
about to propose (catch_up), so steps without a proposal cost it nothing. Under greedy
decoding the committed tokens are exactly plain decoding's; under sampling their distribution
is.
"""

from __future__ import annotations

import codecs
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from engine.blocksize import MAX_BLOCK_SIZE, BlockSizeChooser
from engine.drafters.base import Drafter
from engine.events import (
    ErrorEvent,
    Event,
    Finished,
    GenerationSettings,
    StepStats,
    TextDelta,
)
from engine.sampling import Warp, accept_greedy, accept_sampling, sample, warp_probs
from engine.target import LlamaTarget


def validate_block_size(block_size: int | str) -> int | None:
    """None for auto; otherwise the fixed block size. Raises ValueError with a clear message."""
    if block_size == "auto":
        return None
    try:
        value = int(block_size)
    except (TypeError, ValueError):
        raise ValueError(
            f"block size must be 'auto' or 1..{MAX_BLOCK_SIZE}, not {block_size!r}"
        ) from None
    if not 1 <= value <= MAX_BLOCK_SIZE:
        raise ValueError(f"block size must be 'auto' or 1..{MAX_BLOCK_SIZE}, not {value}")
    return value


class _TextStream:
    """Bytes -> text, UTF-8 safe across token boundaries, holding back a possible stop string."""

    def __init__(self, stop: Sequence[str]) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stop = [s for s in stop if s]
        self.text = ""  # all text decoded so far
        self.emitted = 0  # chars of self.text already handed out
        self.stopped = False

    def feed(self, data: bytes, final: bool = False) -> str:
        if self.stopped:
            return ""
        self.text += self.decoder.decode(data, final)
        limit = len(self.text)
        for s in self.stop:
            idx = self.text.find(s, max(0, self.emitted - len(s)))
            if idx != -1:
                self.text = self.text[:idx]
                self.stopped = True
                limit = idx
                break
        if not self.stopped and not final:
            # do not emit a tail that could be the start of a stop string
            for s in self.stop:
                for n in range(min(len(s) - 1, len(self.text)), 0, -1):
                    if self.text.endswith(s[:n]):
                        limit = min(limit, len(self.text) - n)
                        break
        limit = max(limit, self.emitted)
        out = self.text[self.emitted : limit]
        self.emitted = limit
        return out


def _position_rng(seed: int, position: int, stream: int = 0) -> np.random.Generator:
    """Randomness for one output position, independent of how the steps were blocked."""
    return np.random.default_rng([seed, position, stream])


@dataclass
class _Counters:
    steps: int = 0
    committed: int = 0
    slot_accept: np.ndarray | None = None
    slot_propose: np.ndarray | None = None
    draft_s: float = 0.0
    verify_s: float = 0.0


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


def catch_up(drafter: Drafter, target: LlamaTarget, observed: int) -> int:
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
    target: LlamaTarget,
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


def generate_tokens(
    target: LlamaTarget,
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
    batch whose rows equal single-token decodes; engine.kernels), None for whole blocks;
    verify_mode names that choice in the stats."""
    t_start = time.perf_counter()
    try:
        fixed_block = validate_block_size(settings.block_size)
    except ValueError as exc:
        yield ErrorEvent(str(exc), kind="input")
        return
    if fixed_block is None and chooser is None:
        yield ErrorEvent("block size 'auto' needs a measured cost model", kind="input")
        return
    if not prompt_tokens:
        yield ErrorEvent("the prompt is empty", kind="input")
        return
    if settings.max_tokens < 1:
        yield ErrorEvent("max tokens must be at least 1", kind="input")
        return
    if len(prompt_tokens) >= target.n_ctx:
        yield ErrorEvent(
            f"the prompt is {len(prompt_tokens)} tokens but the context holds {target.n_ctx}; "
            "shorten it, start a new chat, or raise the context length",
            kind="context",
        )
        return

    warp = Warp(settings.temperature, settings.top_k, settings.top_p)
    seed = settings.seed if settings.seed is not None else secrets.randbits(63)
    block_mode = "auto" if fixed_block is None else "fixed"
    max_block = chooser.max_block if fixed_block is None else fixed_block

    # --- prefill: everything but the last prompt token, reusing the cached prefix ----------
    target.set_features(drafter.wants_features)
    context = list(prompt_tokens[:-1])
    reused = target.reuse_prefix(context)
    if drafter.wants_features and target.features_known_upto() < reused:
        reused = target.reuse_prefix(context[: target.features_known_upto()])
    target.prefill(context[reused:], cancel)
    if cancel is not None and cancel.is_set():
        yield Finished("", (), "cancelled", None, len(prompt_tokens), time.perf_counter() - t_start)
        return
    t_prefill_end = time.perf_counter()
    prefill_count = len(context) - reused
    prefill_s = t_prefill_end - t_start
    drafter.reset()
    observed = 0  # cached positions folded into the drafter (catch_up, before it proposes)

    stream_tokens = list(prompt_tokens)  # committed stream, for shadow acceptance estimates
    anchor = int(prompt_tokens[-1])
    generated: list[int] = []
    text = _TextStream(settings.stop)
    counters = _Counters(
        slot_accept=np.zeros(MAX_BLOCK_SIZE - 1, dtype=np.int64),
        slot_propose=np.zeros(MAX_BLOCK_SIZE - 1, dtype=np.int64),
    )
    ttft = None
    stop_reason = "length"
    stats = None

    while True:
        if cancel is not None and cancel.is_set():
            stop_reason = "cancelled"
            break
        remaining = settings.max_tokens - len(generated)
        room = target.n_ctx - target.n_past
        if remaining <= 0:
            stop_reason = "length"
            break
        if room < 1:
            stop_reason = "context"
            break

        # --- draft ----------------------------------------------------------------------
        max_draft = min(max_block - 1, room - 1, remaining - 1)
        t0 = time.perf_counter()
        draft_tokens = np.zeros(0, dtype=np.int32)
        draft_probs = None  # warped q rows, sampling with a probabilistic drafter only
        if max_draft > 0 and (fixed_block is not None or chooser.worth_drafting()):
            observed = catch_up(drafter, target, observed)
            draft = drafter.propose(anchor, max_draft, with_logits=not warp.greedy)
            draft_tokens = np.asarray(draft.tokens[:max_draft], dtype=np.int32)
            if fixed_block is None:
                bucket = chooser.bucket(draft.bucket)
                chooser.propose_made(bucket, draft_tokens, len(stream_tokens))
                k = chooser.choose(bucket, len(draft_tokens))
            else:
                k = len(draft_tokens)
            draft_tokens = draft_tokens[:k]
            if draft.logits is not None and not warp.greedy and k:
                # Sampling verifies draws d_i ~ q_i, warped like the target's rows; only the k
                # verified rows are warped (a row costs a pass over the vocabulary). k was
                # chosen from the drafter's most likely tokens, not from these draws, so the
                # rejection rule stays exact.
                draft_probs = np.stack([warp_probs(r, warp) for r in draft.logits[:k]])
                draft_tokens = np.array(
                    [
                        sample(q, _position_rng(seed, len(generated) + i, 1))
                        for i, q in enumerate(draft_probs)
                    ],
                    dtype=np.int32,
                )
            if chooser is not None:
                chooser.observe_draft_time(time.perf_counter() - t0)
        t1 = time.perf_counter()

        # --- verify ---------------------------------------------------------------------
        start = target.n_past
        k = len(draft_tokens)
        judge = _judge(warp, seed, len(generated), draft_tokens, draft_probs)
        a, next_token, rows = verify_block(
            target, [anchor, *draft_tokens.tolist()], judge, verify_chunk
        )
        t2 = time.perf_counter()
        if chooser is not None and rows == k + 1:  # an early stop timed fewer rows
            chooser.cost.observe(k + 1, t2 - t1)

        # --- rollback and commit ----------------------------------------------------------
        target.truncate(start + a + 1)
        accepted = draft_tokens[:a].tolist()
        new_tokens = [*accepted, next_token]
        stream_tokens.extend(new_tokens)
        if chooser is not None:
            chooser.committed(stream_tokens)
        counters.steps += 1
        counters.slot_propose[:k] += 1
        counters.slot_accept[:a] += 1
        counters.draft_s += t1 - t0  # catching up on committed tokens included
        counters.verify_s += t2 - t1
        anchor = next_token

        # --- emit -------------------------------------------------------------------------
        finished = False
        kept = []
        for token in new_tokens:
            if target.is_eog(token) and not settings.ignore_eos:
                stop_reason, finished = "eos", True
                break
            if len(generated) + len(kept) >= settings.max_tokens:
                stop_reason, finished = "length", True
                break
            kept.append(token)
        generated.extend(kept)
        # tokens past an end-of-text or the length limit were verified but are not output
        counters.committed += len(kept) + (stop_reason == "eos" and finished)
        pieces = []
        # accepted drafts first (the GUI may tint them), then the target's own token
        for tokens, drafted in ((kept[:a], True), (kept[a:], False)):
            if tokens:
                piece = text.feed(b"".join(target.token_bytes(t) for t in tokens))
                pieces.append(TextDelta(piece, tuple(tokens), drafted))
        if text.stopped:
            stop_reason, finished = "stop", True
        now = time.perf_counter()
        if ttft is None and generated:
            ttft = now - t_start
        yield from pieces
        decode_elapsed = now - t_prefill_end
        stats = StepStats(
            step=counters.steps,
            block_size=k + 1,
            proposed=k,
            accepted=a,
            committed=a + 1,
            tau_mean=counters.committed / counters.steps,
            slot_accept_counts=counters.slot_accept[: max_block - 1].tolist(),
            slot_propose_counts=counters.slot_propose[: max_block - 1].tolist(),
            tokens_generated=len(generated),
            tokens_per_s=len(generated) / decode_elapsed if decode_elapsed > 0 else 0.0,
            ttft_s=ttft if ttft is not None else now - t_start,
            prefill_tokens=prefill_count,
            prefill_tokens_per_s=prefill_count / prefill_s if prefill_s > 0 else 0.0,
            target_kv_bytes=target.kv_bytes_used(),
            target_kv_alloc_bytes=target.kv_bytes_allocated(),
            draft_memory_bytes=drafter.memory_bytes(),
            draft_ms=1000 * counters.draft_s / counters.steps,
            verify_ms=1000 * counters.verify_s / counters.steps,
            block_size_mode=block_mode,
            verify_mode=verify_mode,
            verify_chunk=verify_chunk or 0,
        )
        yield stats
        if finished:
            break

    tail = text.feed(b"", final=True)
    if tail:
        yield TextDelta(tail, (), False)
    yield Finished(
        text=text.text,
        token_ids=tuple(generated),
        stop_reason=stop_reason,
        stats=stats,
        prompt_tokens=len(prompt_tokens),
        elapsed_s=time.perf_counter() - t_start,
    )
