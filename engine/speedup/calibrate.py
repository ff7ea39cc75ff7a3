"""This machine's throughput for one model, measured in a short run before a speed-up job
(torch; the [train] extra): llama.cpp's prefill and its batched and single-stream greedy
steps, the same GGUF in torch (load time, batched forward, batched greedy steps), and the
training step of the shipped recipe's drafter. plan.py turns the numbers into each
stage's time and picks the faster generator and feature source.

A greedy step is timed as the difference of two runs of the same prompts (SHORT and LONG new
tokens, after a warm-up run), so prompt prefill and context set-up cancel out; prompts are the
shortest of the first training prompts."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

SHORT, LONG = 4, 24  # new tokens of the two timed generation runs
FEATURE_TOKENS = 256  # one sequence for the prefill / forward timing
TRAIN_STEPS = 4  # timed training steps (the first is a warm-up)
TRAIN_SEQ = 380  # tokens per random training sequence (prompt ~90 + answer ~290)
N_MEASUREMENTS = 3  # llama.cpp, torch, training: the progress callback's total


def _timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _step_s(run: Callable[[int], int], streams: int) -> float:
    """Seconds of one batched greedy step of `streams` sequences: run(n) generates up to n
    tokens per prompt and returns the tokens made."""
    run(SHORT)  # warm-up: the first steps allocate
    made_short, t_short = _timed(lambda: run(SHORT))
    made_long, t_long = _timed(lambda: run(LONG))
    steps = max((made_long - made_short) / streams, 1.0)
    return max(t_long - t_short, 1e-6) / steps


def _run_greedy(gen, todo: list, n: int) -> int:
    return gen.run(todo, n, lambda *_: None)


def _llama(gguf: Path, prompts: list[list[int]], seq: list[int], threads: int) -> dict:
    from engine.bench.corpora import Prompt
    from engine.llama.target import LlamaTarget
    from engine.training.distill import BatchedGreedy
    from engine.training.features import llama_rows

    out: dict = {}
    width = max(len(p) for p in prompts) + LONG + 2
    with LlamaTarget(gguf, n_ctx=len(seq) + 8, features=True, n_threads=threads) as target:
        llama_rows(target, seq[:16], False)  # warm-up: the first decode allocates
        _, took = _timed(lambda: llama_rows(target, seq, False))
        rate = len(seq) / took
        todo = [(Prompt("calibration", str(i), ""), p) for i, p in enumerate(prompts)]
        for key, streams in (("llama", 8), ("llama1", 1)):
            gen = BatchedGreedy(target, streams, width, threads)
            try:
                step = _step_s(partial(_run_greedy, gen, todo[:streams]), streams)
            finally:
                gen.close()
            out[key] = {
                "prefill_tok_s": rate,
                "features_tok_s": rate,
                "step_s": step,
                "streams": streams,
            }
        eos = [i for i in range(target.n_vocab) if target.is_eog(i)]
    return out | {"eos": eos}


def _torch(
    gguf: Path, prompts: list[list[int]], seq: list[int], eos: list[int], device: str, threads: int
) -> dict:
    from engine.training.torch_target import TorchTarget

    target, load_s = _timed(lambda: TorchTarget(gguf, device=device, threads=threads))
    try:
        target.forward([seq[:16]], next_tokens=False)  # warm-up
        _, took = _timed(lambda: target.forward([seq] * 4, next_tokens=False))
        batch = 64 if target.device == "cuda" else 16
        todo = (prompts * batch)[:batch]

        def run(n: int) -> int:
            return sum(len(a) for a, _ in target.generate_batch(todo, n, eos))

        step = _step_s(run, batch)
    finally:
        target.close()
    rate = 4 * len(seq) / took
    return {
        "load_s": load_s,
        "dtype": target.dtype,
        "device": target.device,
        "prefill_tok_s": rate,
        "features_tok_s": rate,
        "step_s": step,
        "streams": batch,
    }


def _training(gguf: Path, threads: int) -> dict:
    """The recipe's drafter (block 16, causal slots, copy trust 0.2) on random features of
    answer-sized sequences: its set-up (target embedding and head from the GGUF) and step."""
    from engine.drafters.hyflash_card import DrafterConfig
    from engine.llama.gguf_file import GGUFIndex
    from engine.speedup.plan import draft_vocab_size
    from engine.training.model import HyFlashModel
    from engine.training.train import Sequences, train
    from engine.training.train_config import TrainConfig

    with GGUFIndex(gguf) as index:
        vocab, hidden = index.embedding_shape()
    cfg = DrafterConfig(
        hidden_size=hidden,
        feature_dim=hidden,
        vocab_size=vocab,
        block_size=16,
        causal_slots=True,
        draft_vocab_size=draft_vocab_size(vocab),
    )
    draft_ids = np.arange(cfg.draft_vocab_size, dtype=np.int64)
    model, setup_s = _timed(lambda: HyFlashModel.from_gguf(cfg, gguf, draft_ids))
    rng = np.random.default_rng(0)
    data = Sequences(
        [rng.integers(0, vocab, TRAIN_SEQ) for _ in range(16)],
        [rng.standard_normal((TRAIN_SEQ, hidden)).astype(np.float16) for _ in range(16)],
        [90] * 16,
    )
    tcfg = TrainConfig(
        steps=TRAIN_STEPS,
        eval_every=10**9,
        ckpt_every=10**9,
        threads=threads,
        copy_trust=0.2,
    )
    stamps: list[float] = []
    with tempfile.TemporaryDirectory() as out:
        train(
            model,
            data,
            None,
            tcfg,
            Path(out),
            show_progress=False,
            on_step=lambda _: stamps.append(time.perf_counter()),
        )
    return {"setup_s": setup_s, "step_s": float(np.median(np.diff(stamps)))}


def calibrate(
    gguf: Path, *, device: str, threads: int, progress: Callable[[int, int], None]
) -> dict:
    """The measurements plan.stage_seconds reads (keys llama, llama1, torch, train)."""
    from engine.bench.corpora import train_prompts
    from engine.llama.chat_template import ChatTemplate
    from engine.llama.target import LlamaTarget

    start = time.perf_counter()
    with LlamaTarget(gguf, n_ctx=64) as probe:
        template = ChatTemplate.for_target(probe)
        ids = [
            template.tokenize(probe, [{"role": "user", "content": p.text}])
            for p in train_prompts()[:64]
        ]
    prompts = sorted(ids, key=len)[:8]
    seq = [t for p in ids for t in p][:FEATURE_TOKENS]
    progress(0, N_MEASUREMENTS)
    result = _llama(gguf, prompts, seq, threads)
    eos = result.pop("eos")
    progress(1, N_MEASUREMENTS)
    result["torch"] = _torch(gguf, prompts, seq, eos, device, threads)
    progress(2, N_MEASUREMENTS)
    result["train"] = _training(gguf, threads)
    progress(3, N_MEASUREMENTS)
    result["seconds"] = time.perf_counter() - start
    return result
