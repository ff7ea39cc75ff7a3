"""`hyflash bench --quick` (the CI-sized speed benchmark) runs and checks its own sanity."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest

from engine.paths import REPO

CUDA_CURVE = REPO / "docs/bench/curves/cuda-llama7b-f16-pr3749.json"


def test_bench_quick_on_held_out_sets(tmp_path, capsys):
    from engine.commands.cli import main

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
            "--cost-curve",
            str(CUDA_CURVE),
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
    # where it ran: the model file, the drafters by their cards, threads, the command line
    prov = result["provenance"]
    assert prov["target"]["path"] == result["model_path"] and len(prov["target"]["sha256"]) == 64
    assert [d["spec"] for d in prov["drafters"]] == ["ngram", "hyflash", "hybrid:hyflash"]
    assert prov["drafters"][1]["card_sha256"] and prov["threads"] == 2
    # main(argv) called in this process records its own argv, not pytest's
    assert prov["command"].startswith("hyflash bench ") and "machine" not in result
    out = capsys.readouterr().out
    assert "Per set, speedup [95% interval] (tau)" in out and "| hyflash (block 8) |" in out
    lo, hi = summary["ngram:4"]["speedup_ci"]
    assert lo <= hi and all(math.isfinite(x) for x in (lo, hi))
    assert summary["none:1"]["speedup_ci"] == [1.0, 1.0]  # plain against itself
    assert result["per_prompt"][0]["none:1"]["decode_s"] > 0
    assert "Bandwidth bound of plain decoding" in out
    # the projection replays this run's verify sizes on a memory-bound GPU's curve
    projection = {r["key"]: r for r in result["projection"]["rows"]}
    assert projection["none:1"]["projected_drafter_free"] == 1.0
    block8 = projection["hyflash:8"]
    assert block8["projected_drafter_free"] > block8["measured"]  # T(8)/T(1) 1.85 vs ~5 here
    assert block8["projected"] is None  # another model's curve: the drafter is not counted
    assert sum(summary["hyflash:8"]["blocks"].values()) > 0
    for s in summary.values():  # each set's block-size histogram adds up to the whole run's
        by_set = [p["blocks"] for p in s["per_set"].values()]
        assert sum(sum(b.values()) for b in by_set) == sum(s["blocks"].values()), s["key"]
    assert "Projection onto a CUDA GPU" in out
    assert "Block size auto: target decodes by block size (B:count), per set:" in out


def test_bench_with_sampling_reports_tau_without_identity_claim(tmp_path, capsys):
    from engine.commands.cli import main

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


def _summary(blocks_by_config: dict[str, dict[int, int]], tokens: dict[str, int]) -> list[dict]:
    return [
        {
            "key": key,
            "config": key,
            "tau": tokens[key] / sum(blocks.values()),
            "speedup": 1.0,
            "tokens": tokens[key],
            "blocks": blocks,
            "draft_ms_total": 0.0 if key == "none:1" else 50.0,
        }
        for key, blocks in blocks_by_config.items()
    ]


def test_projection_replays_verify_sizes_on_another_curve(tmp_path):
    from engine.bench.projection import load_curve, project

    curve_file = tmp_path / "curve.json"
    curve_file.write_text(
        json.dumps(
            {"source": "flat", "cost_ratio": {"1": 1, "4": 1.5, "8": 2}, "t1_ms": 5.0, "model": "m"}
        )
    )
    curve = load_curve(curve_file)
    assert curve.ratios(2) == pytest.approx(1 + 0.5 / 3)  # interpolated between 1 and 4
    # plain: 100 tokens in 100 one-token decodes; B=4: 100 tokens in 40 decodes of 4
    summary = _summary({"none:1": {1: 100}, "c:4": {4: 40}}, {"none:1": 100, "c:4": 100})
    rows = {r["key"]: r for r in project(summary, curve, "m")["rows"]}
    assert rows["none:1"]["projected_drafter_free"] == pytest.approx(1.0)
    assert rows["c:4"]["projected_drafter_free"] == pytest.approx(100 / (40 * 1.5))
    # the drafter's 50 ms here cost 10 T(1) of that machine
    assert rows["c:4"]["projected"] == pytest.approx(100 / (40 * 1.5 + 10))
    assert project(summary, curve, "other")["rows"][1]["projected"] is None


def test_projection_reads_a_bench_result_and_refuses_bad_curves(tmp_path):
    from engine.bench.projection import load_curve

    bench = tmp_path / "speed.json"
    bench.write_text(
        json.dumps(
            {
                "cost_ratio": {"1": 1.0, "2": 1.9},
                "cost_curve_ms": {"1": 11.0},
                "model": "m",
                "machine": {"cpu": "Some CPU"},
            }
        )
    )
    curve = load_curve(bench)
    assert curve.t1_ms == 11.0 and curve.model == "m" and "Some CPU" in curve.source
    assert curve.ratios(4) == pytest.approx(1.0 + 3 * 0.9)  # extended with the last slope
    assert load_curve(CUDA_CURVE).ratios(8) == pytest.approx(8 * 228.57 / 987.82, rel=1e-3)
    for bad in ("not json", json.dumps({"x": 1}), json.dumps({"cost_ratio": {"1": 2.0}})):
        bench.write_text(bad)
        with pytest.raises(ValueError):
            load_curve(bench)
    with pytest.raises(ValueError):
        load_curve(tmp_path / "missing.json")


def test_drafter_time_reports_each_block_beside_the_target(tmp_path, capsys):
    from engine.commands.cli import main

    args = ["drafter-time", "--blocks", "4,8", "--calls", "3", "--rounds", "1"]
    assert main([*args, "--threads", "2", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "drafter-time.json").read_text())
    assert result["drafter"] == "hyflash" and result["context_tokens"] > 20
    prov = result["provenance"]
    assert prov["drafters"][0]["name"] == "hyflash-smollm2-135m" and prov["threads"] == 2
    assert [r["block"] for r in result["rows"]] == [4, 8]
    for r in result["rows"]:
        assert 0 < r["greedy_ms"] < 1000 and 0 < r["sampling_ms"] < 1000
        assert r["greedy_pct_t1"] == pytest.approx(100 * r["greedy_ms"] / result["target_t1_ms"])
    assert result["rows"][1]["target_ms"] > 0 and result["observe_ms"] > 0
    assert result["features"] and 0 < result["target_t1_features_off_ms"] < 1000
    out = capsys.readouterr().out
    assert "| 8 |" in out and "hidden-state output on; off:" in out


def test_gpu_recording_script_is_valid_bash_with_valid_hyflash_commands():
    import subprocess

    from engine.commands.cli import build_parser

    script = REPO / "scripts/record_gpu.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text().replace("\\\n", " ")
    commands = [line.strip() for line in text.splitlines() if line.strip().startswith('"$HF"')]
    assert len(commands) >= 5
    for command in commands:
        words = shlex.split(command.replace('"$HF"', "").split(">")[0])
        words = [w.replace("$OUT", "out").replace("$PER_SET", "2") for w in words]
        words = [w.replace("$MAX_TOKENS", "256").replace("$GEMMA", "g.gguf") for w in words]
        build_parser().parse_args(words)  # argparse exits on an unknown flag or bad value


def test_bench_prompt_keeps_the_fastest_of_its_runs(monkeypatch):
    """--runs N: every configuration runs N times per prompt in alternating order and the
    fastest run counts (an interruption only slows a run down)."""
    from collections import Counter
    from types import SimpleNamespace

    from engine.bench import speed

    times = iter([3.0, 2.0, 1.0, 4.0, 5.0, 0.5])  # run order: plain, c, | c, plain, | plain, c
    calls = []

    class FakeEngine:
        def set_drafter(self, name: str) -> None:
            calls.append(name)

    def fake_run(engine, prompt, block, *rest):
        return speed.RunResult("x", (1, 2), next(times), 2, 1.0, 0.0, 1.0, Counter({1: 2}))

    monkeypatch.setattr(speed, "run_once", fake_run)
    args = SimpleNamespace(runs=3, max_tokens=8, temperature=0.0, top_p=1.0)
    totals = {(k, s): speed.ConfigTotals(k) for k in ("none:1", "ngram:4") for s in ("x", "all")}
    row = speed.bench_prompt(FakeEngine(), args, 0, "x", "hi", [("ngram", 4)], totals)
    assert calls == ["none", "ngram", "ngram", "none", "none", "ngram"]
    assert row["none:1"]["decode_s"] == 3.0 and row["ngram:4"]["decode_s"] == 0.5
    assert totals[("ngram:4", "all")].decode_s == 0.5 and totals[("none:1", "x")].decode_s == 3.0


def test_bench_refuses_zero_runs(capsys):
    from engine.commands.cli import main

    assert main(["bench", "--quick", "--runs", "0"]) == 2
    assert "--runs must be at least 1" in capsys.readouterr().err


def test_grounded_set_gives_every_task_kind_its_input_in_a_fenced_block():
    import json

    from engine.bench.prompts import GROUNDED_FILE
    from engine.bench.speed import bench_prompts

    rows = [json.loads(line) for line in GROUNDED_FILE.read_text().splitlines() if line]
    pairs = bench_prompts("grounded", None, 4)
    assert len(pairs) == len(rows) >= 20
    assert {kind for kind, _ in pairs} == {r["kind"] for r in rows}
    for (kind, prompt), row in zip(pairs, rows, strict=True):
        assert kind == row["kind"] and prompt.startswith(row["instruction"])
        assert f"```{row['language']}\n" in prompt and row["input"].rstrip() in prompt
        assert 20 <= len(row["input"].splitlines()) <= 80
    assert len(bench_prompts("grounded", 5, 4)) == 5
