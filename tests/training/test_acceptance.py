"""The acceptance benchmark's walk reproduces the engine's tau; the n-gram/learned hybrid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.decoding.drafter_protocol import Draft
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.ngram import NgramDrafter
from engine.events import Finished, GenerationSettings
from engine.training.acceptance import walk_answer

PROMPTS = [
    "List the days of the week, then list them again in reverse order.",
    "Write a Python function that returns the squares of 1 to 10, and call it twice.",
    "What is the capital of France? Answer in one sentence.",
]


@pytest.mark.parametrize("block", [2, 4, 8])
def test_walk_equals_engine_greedy_run(ngram_engine, block):
    """Walking the engine's own greedy answer with the same (deterministic) drafter takes the
    same steps and accepts the same drafts: tau is the engine's statistic, not an estimate."""
    for prompt in PROMPTS:
        prompt_ids = ngram_engine.chat_tokens([{"role": "user", "content": prompt}])
        settings = GenerationSettings(max_tokens=96, block_size=block)
        finished = [
            e for e in ngram_engine.generate(prompt, settings=settings) if isinstance(e, Finished)
        ][0]
        answer = list(finished.token_ids)
        if finished.stop_reason == "eos":  # the engine counts the end-of-text token it verified
            answer.append(ngram_engine.target.eos_token)
        tokens = np.asarray(prompt_ids + answer, dtype=np.int64)
        walk = walk_answer(NgramDrafter(), tokens, None, len(prompt_ids), block)
        assert walk.steps > 0
        assert walk.committed == len(answer)
        assert walk.steps == finished.stats.step
        assert walk.tau == pytest.approx(finished.stats.tau_mean, abs=1e-9)
        assert max(walk.accepted) <= block - 1


class _Constant:
    """A stand-in learned drafter (never met by users) that always proposes one token."""

    name = "constant"
    wants_features = False
    feature_layers: tuple[int, ...] = ()
    pays_per_draft = False

    def __init__(self) -> None:
        self.seen: list[int] = []

    def reset(self) -> None:
        self.seen = []

    def observe(self, tokens, features) -> None:
        self.seen += list(tokens)

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        return Draft(np.full(max_tokens, 7, dtype=np.int32), bucket="constant")

    def memory_bytes(self) -> int:
        return 0


def test_hybrid_uses_ngram_only_on_a_long_match():
    learned = _Constant()
    hybrid = HybridDrafter(learned, min_match=3)
    hybrid.observe([1, 2, 3, 4, 5, 1, 2], None)
    assert learned.seen == [1, 2, 3, 4, 5, 1, 2]  # both sides see every committed token
    long_match = hybrid.propose(3, 2)  # "1 2 3" occurred: copy what followed it
    assert long_match.tokens.tolist() == [4, 5] and long_match.bucket == "ngram3"
    short_match = hybrid.propose(5, 2)  # "1 2 5" never occurred: the learned drafter
    assert short_match.tokens.tolist() == [7, 7] and short_match.bucket == "constant"


def test_acceptance_command_on_stored_answers(tmp_path, capsys):
    from engine.commands.cli import main

    code = main(
        [
            "acceptance",
            "--drafter",
            "ngram",
            "--limit",
            "3",
            "--blocks",
            "2,4",
            "--cache",
            str(tmp_path / "cache"),
            "--out",
            str(tmp_path / "out"),
            "--threads",
            "1",
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "out" / "acceptance.json").read_text())
    assert result["sequences"] == 3 and result["answer_tokens"] > 0
    prov = result["provenance"]
    assert prov["target"]["id"] == "smollm2-135m-instruct" and prov["threads"] == 1
    assert prov["drafters"][0]["spec"] == "ngram" and prov["command"].startswith(
        "hyflash acceptance --drafter ngram --limit 3"
    )
    rows = {r["block"]: r for r in result["rows"]}
    assert set(rows) == {2, 4}
    for r in rows.values():
        assert 1.0 <= r["tau"] <= r["block"]
        assert sum(r["accepted_histogram"]) > 0
        reach = r["accepted_by_reach"]
        assert set(reach) <= {"near", "distant", "novel"} and "novel" in reach
        assert sum(v["steps"] for v in reach.values()) > 0 and 0 <= r["late_slot_accept"] <= 1
    assert "| ngram |" in capsys.readouterr().out
    for name in ("acceptance_per_slot.png", "tau_by_block.png"):
        png = (tmp_path / "out" / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_acceptance_over_several_answers_files_reports_each(tmp_path, monkeypatch, capsys):
    """One column per answers file (the long-context table): tau, mean context and draft
    memory per file, and the context plots."""
    from engine.commands.cli import main
    from engine.paths import EVAL_CORPUS

    rows = Path(EVAL_CORPUS).resolve().read_text().splitlines()
    short, longer = tmp_path / "short.jsonl", tmp_path / "longer.jsonl"
    by_len = sorted(rows, key=lambda r: len(json.loads(r)["prompt_ids"]))
    short.write_text("\n".join(by_len[:2]) + "\n")
    longer.write_text("\n".join(by_len[-2:]) + "\n")
    monkeypatch.chdir(tmp_path)  # feature caches go to ./runs/features
    code = main(
        [
            "acceptance",
            "--drafter",
            "ngram",
            "--drafter",
            "hyflash",
            "--blocks",
            "4",
            "--answers",
            str(short),
            "--answers",
            str(longer),
            "--out",
            "out",
            "--threads",
            "1",
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "out" / "acceptance.json").read_text())
    assert result["sequences"] == 4
    for r in result["rows"]:
        per = r["per_file"]
        assert set(per) == {"short", "longer"}
        assert per["short"]["context_tokens_mean"] < per["longer"]["context_tokens_mean"]
        assert all(1.0 <= v["tau"] <= 4 for v in per.values())
    hyflash = next(r for r in result["rows"] if r["drafter"] == "hyflash")["per_file"]
    # a fixed window and state: the same draft memory at both context lengths
    assert hyflash["short"]["memory_bytes_max"] == hyflash["longer"]["memory_bytes_max"] > 0
    assert "Per answers file" in capsys.readouterr().out
    for name in ("tau_vs_context.png", "memory_vs_context.png"):
        assert (tmp_path / "out" / name).read_bytes()[:4] == b"\x89PNG"


def test_continuation_reach_classifies_repeats_by_distance():
    from engine.training.acceptance import continuation_reach

    filler = list(range(100, 200))  # 100 distinct tokens
    seq = np.array([1, 2, 3, 4, 5, *filler, 1, 2, 3, 4, 9, 8, 7, 1, 2, 3, 4])
    reach = continuation_reach(seq, near=64)
    first, second, third = 0, 105, 112
    assert reach[first] == "novel"  # nothing before it
    assert reach[second] == "distant"  # 1 2 3 4 last seen 105 tokens back
    assert reach[third] == "near"  # ... and 7 tokens back
    assert reach[second + 1] == "novel"  # 2 3 4 9 never occurred (2 3 4 5 did)
    assert reach[50] == "novel"
    assert reach[-1] == "novel"  # too close to the end to hold 4 tokens
