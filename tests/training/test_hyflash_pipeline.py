"""The HyFlash pipeline end to end on the real target, at smoke size: self-distilled corpus ->
features by prefill -> training (loss falls, resume, 2-process DDP == 1 process) -> ONNX export
-> the engine decodes with the drafter, greedy output token-identical to plain decoding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.bench.corpora import Prompt
from engine.bench.prompts import CHAT_PROMPTS, RAW_PROMPTS
from engine.events import ErrorEvent, Finished, GenerationSettings

TINY = [
    "--d-model",
    "64",
    "--heads",
    "2",
    "--layers",
    "1",
    "--window",
    "16",
    "--block-size",
    "4",
    "--draft-vocab",
    "512",
    "--batch",
    "4",
    "--anchors",
    "8",
    "--lr",
    "3e-3",
    "--val-frac",
    "0",
    "--quiet",
    "--threads",
    "1",
]


# the trained, exported drafter below reads fused target features (three layers' inputs and
# the final state): the CLI, the cache, export and the lossless loop all see them; the DDP
# and conversations runs train on the final state only
FUSED = ["--feature-layers", "4,15,26"]


def cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "engine.commands.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out


def losses(run: Path) -> list[float]:
    return [h["loss"] for h in json.loads((run / "history.json").read_text())]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, model_path):
    from engine.llama.target import LlamaTarget
    from engine.training.distill import generate_corpus, load_answers

    path = tmp_path_factory.mktemp("corpus") / "answers.jsonl"
    prompts = [Prompt("test", str(i), p) for i, p in enumerate(CHAT_PROMPTS[:10])]
    with LlamaTarget(model_path, n_ctx=256) as target:
        written = generate_corpus(target, prompts, path, streams=4, max_tokens=40)
        assert written == 10
        # resumable: a second call finds everything done
        assert generate_corpus(target, prompts, path, streams=4, max_tokens=40) == 0
    rows = load_answers(path)
    assert len(rows) == 10 and all(r["answer_ids"] for r in rows)
    return path


def train_tiny(corpus: Path, run: Path, cache: Path, steps: int):
    """`hyflash train` of the tiny test drafter (resumes when `run` holds a checkpoint), with
    the copy-trust loss on."""
    args = ["--corpus", str(corpus), "--out", str(run), "--cache", str(cache)]
    args += ["--copy-trust", "0.5"]
    return cli("train", *args, "--steps", str(steps), "--eval-every", "30", *TINY, *FUSED)


@pytest.fixture(scope="module")
def trained_run(corpus, tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    cache = run.parent / "features"
    train_tiny(corpus, run, cache, steps=60)
    return run, cache


def test_training_loss_falls_and_resumes(trained_run, corpus):
    run, cache = trained_run
    first = losses(run)
    assert len(first) == 60
    assert sum(first[-10:]) / 10 < 0.8 * sum(first[:10]) / 10
    assert json.loads((run / "data.json").read_text())["copy_trust"] == 0.5
    out = train_tiny(corpus, run, cache, steps=70)
    assert "resumed from step 60" in out.stdout
    resumed = losses(run)
    assert len(resumed) == 70 and resumed[:60] == first


def test_two_process_ddp_matches_one_process(corpus, tmp_path):
    # final-state features: six full-rate steps of the fused tiny model are chaotic enough
    # (a loss spike at step 4) that summation order alone moves the losses past 1e-4
    common = [
        "--corpus",
        str(corpus),
        "--cache",
        str(tmp_path / "features"),
        "--steps",
        "6",
        "--eval-every",
        "100",
        *TINY,
    ]
    cli("train", "--out", str(tmp_path / "one"), *common)
    ddp = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            "29517",
            "-m",
            "engine.commands.cli",
            "train",
            "--out",
            str(tmp_path / "two"),
            *common,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ddp.returncode == 0, ddp.stderr[-4000:]
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert len(one) == len(two) == 6
    for a, b in zip(one, two, strict=True):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), (one, two)


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    run, _ = trained_run
    out = tmp_path_factory.mktemp("drafter") / "tiny-hyflash"
    cli("export", "--run", str(run), "--out", str(out), "--name", "tiny-test")
    card = json.loads((out / "card.json").read_text())
    assert card["target"]["vocab_size"] == 49152 and "metrics" in card
    assert card["config"]["feature_layers"] == [4, 15, 26]
    assert card["config"]["feature_dim"] == 4 * 576
    return out


def test_hyflash_greedy_output_equals_plain_decoding(engine, exported):
    prompts = CHAT_PROMPTS[:22] + RAW_PROMPTS[:4]
    assert len(prompts) >= 25

    def run(prompt, block, raw):
        settings = GenerationSettings(max_tokens=24, block_size=block)
        for event in engine.generate(prompt, raw=raw, settings=settings):
            assert not isinstance(event, ErrorEvent), event.message
            if isinstance(event, Finished):
                return event

    engine.set_drafter("none")
    plain = {p: run(p, 1, p in RAW_PROMPTS).token_ids for p in prompts}
    engine.set_drafter(str(exported))
    assert engine.drafter.name == "hyflash" and engine.drafter.feature_layers == (4, 15, 26)
    proposed = 0
    for block in (2, 4, 8, 16):
        for p in prompts:
            out = run(p, block, p in RAW_PROMPTS)
            assert out.token_ids == plain[p], f"block {block}: {p!r}"
            proposed += sum(out.stats.slot_propose_counts)
            assert out.stats.draft_memory_bytes > 0
    assert proposed > 500  # the drafter really proposed
    engine.set_drafter("ngram")


def test_prefill_labels_are_the_targets_greedy_predictions(corpus, model_path, tmp_path):
    """Labels from one prefill with logits on every row: on the target's own greedy answers
    they equal the answer tokens (up to rare near-ties of batched generation)."""
    from engine.training.features import feature_cache, load_corpus

    tokens, prompt_lens, _ = load_corpus(corpus, 1024)
    feats, labels = feature_cache(tokens, model_path, tmp_path / "cache", with_labels=True)
    assert labels is not None and len(labels) == len(tokens)
    agree = total = 0
    for t, f, lab, p in zip(tokens, feats, labels, prompt_lens, strict=True):
        assert lab.shape == t.shape and f.shape == (len(t), 576) and lab[0] == t[0]
        agree += int((lab[p:] == t[p:]).sum())
        total += len(t) - p
    assert agree / total > 0.95
    # prompts are not the target's writing: there the labels differ from the tokens
    prompt_agree = np.mean(
        [np.mean(lab[1:p] == t[1:p]) for t, lab, p in zip(tokens, labels, prompt_lens, strict=True)]
    )
    assert prompt_agree < 0.9
    # cached: a second call reads the same numbers without a target
    again, labels2 = feature_cache(tokens, model_path, tmp_path / "cache", with_labels=True)
    assert all(np.array_equal(a, b) for a, b in zip(labels, labels2, strict=True))


def test_grown_corpus_copies_cached_sequences_and_prefills_only_new_ones(
    corpus, model_path, tmp_path
):
    from engine.training.features import cache_dir_for, feature_cache, load_corpus

    tokens, _, keys = load_corpus(corpus, 1024)
    assert len(tokens) >= 3
    root = tmp_path / "features"
    old_dir = root / cache_dir_for(model_path, keys[:2]).name
    old, _ = feature_cache(tokens[:2], model_path, old_dir)
    # mark the cached copy: a copy keeps the mark, a fresh prefill would not
    old[0][:] = 7.0
    old[0].base.flush()
    grown_dir = root / cache_dir_for(model_path, keys).name
    grown, _ = feature_cache(tokens, model_path, grown_dir)
    assert np.all(grown[0] == 7.0)
    fresh, _ = feature_cache(tokens[2:3], model_path, tmp_path / "alone" / "fresh")
    assert np.array_equal(grown[2], fresh[0])
    assert json.loads((grown_dir / "index.json").read_text())["done"] == len(tokens)


def test_a_cache_of_other_tokens_with_the_same_lengths_is_not_reused(corpus, model_path, tmp_path):
    from engine.training.features import feature_cache, load_corpus

    tokens, _, _ = load_corpus(corpus, 1024)
    cache = tmp_path / "cache"
    first_last = np.array(feature_cache(tokens[:1], model_path, cache)[0][0][-1])  # a copy
    changed = tokens[0].copy()
    changed[-1] = (changed[-1] + 1) % 1000  # same length, one token different
    second, _ = feature_cache([changed], model_path, cache)
    fresh, _ = feature_cache([changed], model_path, tmp_path / "fresh")
    assert np.array_equal(second[0], fresh[0])
    assert not np.array_equal(second[0][-1], first_last)


def test_an_interrupted_cache_keeps_what_it_saved_by_time(corpus, model_path, tmp_path):
    from engine.training.features import feature_cache, load_corpus

    tokens, _, _ = load_corpus(corpus, 1024)

    def stop_after_two(done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        feature_cache(tokens[:4], model_path, cache, progress=stop_after_two, save_every_s=0)
    assert json.loads((cache / "index.json").read_text())["done"] == 2
    resumed, _ = feature_cache(tokens[:4], model_path, cache)
    fresh, _ = feature_cache(tokens[:4], model_path, tmp_path / "fresh")
    assert all(np.array_equal(a, b) for a, b in zip(resumed, fresh, strict=True))


def test_torch_batches_group_sequences_of_like_length():
    """The torch source computes a window of sequences ahead, sorted by length: every
    sequence still to compute is in exactly one batch, none another cache holds, batches fit
    batch_tokens once padded (a longer sequence alone), and padding stays small."""
    from engine.training.features import _window_batches

    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 900, size=300)
    tokens = [np.zeros(n, dtype=np.int64) for n in lengths]
    digests = [f"d{j}" for j in range(len(tokens))]
    reuse = {f"d{j}": None for j in range(0, len(tokens), 7)}
    start = 5
    batches = _window_batches(start, tokens, digests, reuse, batch_tokens=2048, window=128)
    got = sorted(j for b in batches for j in b)
    todo = [j for j in range(start, len(tokens)) if j % 7][:128]
    assert got == todo
    padded = 0
    for b in batches:
        longest = max(lengths[j] for j in b)
        assert len(b) == 1 or longest * len(b) <= 2048
        padded += longest * len(b)
    assert padded <= 1.15 * sum(lengths[j] for j in todo)  # in arrival order: 1.35x here
    assert _window_batches(len(tokens), tokens, digests, reuse, 2048) == []


def test_conversations_corpus_and_training_on_target_labels(tmp_path):
    from engine.training.distill import load_answers

    out = tmp_path / "conv.jsonl"
    cli("data", "conversations", "--limit", "6", "--max-tokens", "64", "--out", str(out))
    rows = load_answers(out)
    assert len(rows) == 6 and len({r["key"] for r in rows}) == 6
    assert all(r["source"] == "sharegpt-answer" and 8 <= len(r["answer_ids"]) <= 65 for r in rows)
    run = tmp_path / "run"
    cli(
        "train",
        "--corpus",
        str(out),
        "--out",
        str(run),
        "--cache",
        str(tmp_path / "cache"),
        "--labels",
        "target",
        "--steps",
        "30",
        "--eval-every",
        "30",
        *TINY,
    )
    hist = losses(run)
    assert len(hist) == 30 and np.mean(hist[-5:]) < np.mean(hist[:5])


def test_training_on_chosen_prompt_sources(corpus, tmp_path):
    """--sources keeps the answers to those sources' prompts, --max-answers counts among them;
    a source no training prompt has is refused before any work."""
    rows = [json.loads(line) for line in corpus.read_text().splitlines()]
    for i, row in enumerate(rows):
        row["key"] = f"{'gsm8k' if i % 2 else 'sharegpt'}/{i}"
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    args = ["--corpus", str(mixed), "--out", str(run), "--cache", str(tmp_path / "cache")]
    cli("train", *args, "--sources", "gsm8k", "--max-answers", "3", "--steps", "2", *TINY)
    info = json.loads((run / "data.json").read_text())
    assert info["answers"] == 3 and info["sources"] == "gsm8k"
    assert info["tokens"] == sum(len(r["prompt_ids"]) + len(r["answer_ids"]) for r in rows[1:6:2])
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.commands.cli",
            "train",
            *args,
            "--sources",
            "gsm8k,poems",
            *TINY,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "no training prompts from poems" in bad.stderr
