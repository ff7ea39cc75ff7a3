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
    assert "Per set, speedup [95% interval] (tau)" in out and "| hyflash (block 8) |" in out
    lo, hi = summary["ngram:4"]["speedup_ci"]
    assert lo <= hi and all(math.isfinite(x) for x in (lo, hi))
    assert summary["none:1"]["speedup_ci"] == [1.0, 1.0]  # plain against itself
    assert result["per_prompt"][0]["none:1"]["decode_s"] > 0
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
            "--top-p",
            "0.9",
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
    assert "sampling at temperature 0.7, top-p 0.9" in out and "n/a (sampled)" in out
    assert result["top_p"] == 0.9


def _rows(plain_s: list[float], config_s: list[float], tokens: int = 100) -> list[dict]:
    return [
        {
            "set": "x",
            "none:1": {"tokens": tokens, "decode_s": p},
            "c": {"tokens": tokens, "decode_s": c},
        }
        for p, c in zip(plain_s, config_s, strict=True)
    ]


def test_speedup_interval_on_synthetic_prompts():
    from engine.bench.speed import speedup_interval

    # exactly twice as fast on every prompt: no uncertainty
    assert speedup_interval(_rows([2.0] * 6, [1.0] * 6), "c") == [2.0, 2.0]
    # ratios that vary by prompt: the interval holds the pooled estimate and is not a point
    plain = [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    config = [1.0, 2.5, 1.2, 2.2, 1.0, 2.4, 1.1, 2.0]
    lo, hi = speedup_interval(_rows(plain, config), "c")
    pooled = sum(plain) / sum(config)
    assert lo < pooled < hi and hi - lo > 0.1
    # four times the prompts of the same kinds: a narrower interval
    lo4, hi4 = speedup_interval(_rows(plain * 4, config * 4), "c")
    assert hi4 - lo4 < 0.7 * (hi - lo)
    # a 90% interval sits inside the 95% one; no prompts, no interval
    lo9, hi9 = speedup_interval(_rows(plain, config), "c", level=0.9)
    assert lo <= lo9 <= hi9 <= hi
    assert all(math.isnan(x) for x in speedup_interval([], "c"))
