"""`hyflash bench --quick` (the CI-sized speed benchmark) runs and checks its own sanity."""

from __future__ import annotations

import json
import math
from pathlib import Path


def test_bench_quick_on_held_out_sets(tmp_path, capsys):
    from engine.cli import main

    configs = "ngram:auto,ngram:4,hyflash:auto,hyflash:8,hybrid:hyflash:8"
    code = main(
        [
            "bench",
            "--quick",
            "--prompt-set",
            "eval",
            "--configs",
            configs,
            "--threads",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert result["prompts"] == 7  # one prompt of every held-out set + an MT-Bench 2nd turn
    summary = {s["key"]: s for s in result["summary"]}
    assert set(summary) == {"none:1", *configs.split(",")}
    for s in summary.values():
        assert s["identical"], s["config"]  # greedy output == plain decoding
        assert math.isfinite(s["tok_s"]) and s["tok_s"] > 0
        assert 1.0 <= s["tau"] <= 8.0
        assert set(s["per_set"]) == {
            "gsm8k",
            "humaneval",
            "mtbench",
            "math500",
            "aime2025",
            "mbpp",
            "mtbench-t2",
        }
    assert summary["hyflash:8"]["bound"] is not None and summary["hyflash:auto"]["bound"] is None
    assert summary["hyflash:8"]["tau"] > 1.2  # its drafts were accepted
    ratios = result["cost_ratio"]
    assert abs(ratios["1"] - 1.0) < 1e-9 and ratios["8"] > 1.0
    assert (tmp_path / "cost_curve.png").read_bytes()[:4] == b"\x89PNG"
    bw = result["bandwidth"]
    file_bytes = Path(result["model_path"]).stat().st_size
    assert 0.8 * file_bytes < bw["weight_bytes"] < file_bytes
    assert bw["read_gb_s"] > 0.1 and bw["bound_tok_s"] == bw["read_gb_s"] * 1e9 / bw["weight_bytes"]
    out = capsys.readouterr().out
    assert "Per set, speedup (tau)" in out and "| hyflash (block 8) |" in out
    assert "Bandwidth bound of plain decoding" in out


def test_bench_with_sampling_reports_tau_without_identity_claim(tmp_path, capsys):
    from engine.cli import main

    code = main(
        [
            "bench",
            "--quick",
            "--prompts",
            "2",
            "--configs",
            "ngram:4",
            "--temperature",
            "0.7",
            "--threads",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert result["temperature"] == 0.7
    ngram = result["summary"][1]
    assert math.isfinite(ngram["tok_s"]) and 1.0 <= ngram["tau"] <= 4.0
    out = capsys.readouterr().out
    assert "sampling at temperature 0.7" in out and "n/a (sampled)" in out
