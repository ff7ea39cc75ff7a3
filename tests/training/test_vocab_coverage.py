"""`hyflash data vocab-coverage`: the draft vocabulary chosen as training chooses it, and the
share of held-out answer tokens it holds."""

from __future__ import annotations

import json

import numpy as np

from engine.commands.cli import main
from engine.paths import DISTILL_ROOT
from engine.training.vocab_coverage import coverage_rows


def test_coverage_counts_the_heldout_tokens_inside_the_chosen_ids():
    train = np.array([5, 5, 5, 7, 7, 9, 9, 1])
    heldout = np.array([5, 7, 9, 9, 2, 0])
    rows = coverage_rows(train, heldout, [1, 3, 4], vocab_size=10, always=[0])
    # size 1: only the always-id 0; size 3: 0, 5, 7; size 4: 0, 5, 7, 9
    assert [r["heldout_coverage"] for r in rows] == [1 / 6, 3 / 6, 5 / 6]
    assert [r["train_coverage"] for r in rows] == [0.0, 5 / 8, 7 / 8]


def test_the_command_reads_a_real_corpus_and_writes_its_table(tmp_path, capsys):
    folder = DISTILL_ROOT / "smollm2-135m-instruct"
    args = ["data", "vocab-coverage", "--sizes", "256,2048,49152", "--max-answers", "300"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "vocab_coverage.json").read_text(encoding="utf-8"))
    assert result["train_answers"] == 300 and result["provenance"]["command"]
    small, mid, whole = (r["heldout_coverage"] for r in result["rows"])
    assert small < mid <= whole <= 1.0
    # a vocabulary as large as the target's holds every held-out token
    assert result["rows"][-1]["size"] == result["vocab_size"] and whole == 1.0
    held = np.concatenate(
        [json.loads(line)["answer_ids"] for line in open(folder / "eval_answers.jsonl")]
    )
    assert result["heldout_tokens"] == held.size
    assert "| 2,048 |" in capsys.readouterr().out
