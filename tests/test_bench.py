"""`hyflash bench --quick` (the CI-sized speed benchmark) runs and checks its own sanity."""

from __future__ import annotations

import json
import math


def test_bench_quick_on_held_out_sets(tmp_path, capsys):
    from engine.cli import main

    configs = "ngram:auto,ngram:4,hyflash:auto,hyflash:8,hybrid:hyflash:8"
    code = main(["bench", "--quick", "--prompt-set", "eval", "--configs", configs,
                 "--threads", "2", "--out", str(tmp_path)])
    assert code == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert result["prompts"] == 6  # one prompt of every held-out set
    summary = {s["key"]: s for s in result["summary"]}
    assert set(summary) == {"none:1", *configs.split(",")}
    for s in summary.values():
        assert s["identical"], s["config"]  # greedy output == plain decoding
        assert math.isfinite(s["tok_s"]) and s["tok_s"] > 0
        assert 1.0 <= s["tau"] <= 8.0
        assert set(s["per_set"]) == {"gsm8k", "humaneval", "mtbench", "math500", "aime2025",
                                     "mbpp"}
    assert summary["hyflash:8"]["bound"] is not None and summary["hyflash:auto"]["bound"] is None
    assert summary["hyflash:8"]["tau"] > 1.2  # its drafts were accepted
    ratios = result["cost_ratio"]
    assert abs(ratios["1"] - 1.0) < 1e-9 and ratios["8"] > 1.0
    assert (tmp_path / "cost_curve.png").read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    assert "Per set, speedup (tau)" in out and "| hyflash (block 8) |" in out
