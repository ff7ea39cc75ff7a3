"""`hyflash speedup --project`: stage times projected onto another device from a profile, on
the embedded SmolLM2's real GGUF header (nothing is loaded or run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.commands.cli import main
from engine.models.resolve import resolve_target
from engine.paths import REPO
from engine.speedup.plan import STAGES, SpeedupError, inspect_gguf
from engine.speedup.projection import (
    PROFILE_KEYS,
    drafter_step_flops,
    load_profile,
    project,
)

CUDA = REPO / "docs/bench/curves/projection-cuda-rtx4090.json"
APPLE = REPO / "docs/bench/curves/projection-apple-m3max.json"


@pytest.fixture(scope="module")
def shape():
    return inspect_gguf(resolve_target(None)[1])


def _write(tmp_path: Path, raw: dict, name: str = "profile.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def _scaled(raw: dict, factor: float) -> dict:
    """The same device `factor` times faster in every rate, limit and fixed cost."""
    out = json.loads(json.dumps(raw))
    for key in ("decode_ref_tok_s", "prefill_ref_tok_s", "prefill_cap_tok_s"):
        out[key]["value"] *= factor
    for key in ("decode_floor_s", "train_step_floor_s", "train_setup_s", "calibration_fixed_s"):
        out[key]["value"] /= factor
    return out


@pytest.mark.parametrize("path", [CUDA, APPLE])
def test_shipped_profiles_load_and_name_their_assumptions(path):
    profile = load_profile(path)
    assert set(profile["values"]) == set(PROFILE_KEYS)
    raw = json.loads(path.read_text(encoding="utf-8"))
    # the published rates carry a source, not an assumption
    for key in ("decode_ref_tok_s", "prefill_ref_tok_s"):
        assert raw[key]["source"] and key not in profile["assumed"]
    assert "train_utilisation" in profile["assumed"]


def test_a_faster_device_gives_shorter_stages(shape, tmp_path):
    raw = json.loads(CUDA.read_text(encoding="utf-8"))
    slow = project(shape, "quick", load_profile(_write(tmp_path, raw, "slow.json")))
    fast = project(shape, "quick", load_profile(_write(tmp_path, _scaled(raw, 4.0), "f.json")))
    slow_s = {s["name"]: s["eta_s"] for s in slow["stages"]}
    fast_s = {s["name"]: s["eta_s"] for s in fast["stages"]}
    for stage in ("plan", "answers", "heldout", "features", "train", "validate"):
        assert fast_s[stage] < slow_s[stage], stage
    # export and install are the plan's fixed host-side costs: the device does not move them
    assert fast_s["export"] == slow_s["export"] and fast_s["install"] == slow_s["install"]
    assert fast["eta_s"] < slow["eta_s"]


def test_projection_is_labelled_and_complete(shape):
    result = project(shape, "quick", load_profile(CUDA))
    assert result["label"] == "projection"
    assert [s["name"] for s in result["stages"]] == list(STAGES)
    assert result["eta_s"] == pytest.approx(sum(s["eta_s"] for s in result["stages"]))
    assert result["generator"] == "llama" and result["feature_source"] == "llama"
    assert set(result["set_by_assumed_limit"]) <= set(result["assumed_inputs"])


def test_larger_budget_and_larger_target_cost_more(shape):
    profile = load_profile(APPLE)
    assert project(shape, "standard", profile)["eta_s"] > project(shape, "quick", profile)["eta_s"]
    wide = shape.__class__(**(vars(shape) | {"vocab_size": 151_936, "hidden_size": 896}))
    # the frozen head over a 16K draft vocabulary of width 896 outweighs 8K x 576
    assert drafter_step_flops(wide) > 1.5 * drafter_step_flops(shape)


def test_command_prints_a_projection(capsys):
    assert main(["speedup", "--budget", "quick", "--project", str(CUDA)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PROJECTION (not measured): smollm2-135m-instruct")
    assert "(projection)" in out.splitlines()[-1]
    assert main(["speedup", "--budget", "tiny", "--project", str(CUDA), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["label"] == "projection" and result["budget"] == "tiny"
    assert result["model"] == "smollm2-135m-instruct"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda raw: raw.pop("decode_ref_tok_s"), "'decode_ref_tok_s' needs a positive 'value'"),
        (lambda raw: raw["train_utilisation"].update(value=-0.1), "'train_utilisation' needs"),
        (lambda raw: raw["decode_floor_s"].update(value="2 ms"), "'decode_floor_s' needs"),
        (
            lambda raw: raw["prefill_ref_tok_s"].pop("source"),
            "'prefill_ref_tok_s' has neither a 'source' nor an 'assumption'",
        ),
        (lambda raw: raw.pop("device"), "no 'device' name"),
    ],
)
def test_malformed_profile_is_a_clear_error(tmp_path, capsys, change, message):
    raw = json.loads(CUDA.read_text(encoding="utf-8"))
    change(raw)
    path = _write(tmp_path, raw)
    with pytest.raises(SpeedupError, match=message) as caught:
        load_profile(path)
    assert caught.value.kind == "bad_profile"
    assert main(["speedup", "--project", str(path), "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["kind"] == "bad_profile" and message in error["error"]


def test_unreadable_profile_is_a_clear_error(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(SpeedupError, match="not a device profile.*unreadable"):
        load_profile(path)


def test_results_table_marks_measured_and_projected_rows(shape, tmp_path):
    from engine.commands.results import render_table

    measured = {"stage_seconds": dict.fromkeys(STAGES, 10.0)}
    projected = project(shape, "quick", load_profile(CUDA))
    _write(tmp_path, measured, "result.json")
    _write(tmp_path, projected, "projection.json")
    lines = render_table(
        'speedup-stages result.json projection.json measured="2-core CPU"', tmp_path
    ).splitlines()
    assert lines[0].startswith("| machine | plan (s) |") and lines[0].endswith("total (s) |")
    assert lines[2] == "| 2-core CPU (measured) | " + "10 | " * len(STAGES) + "80 |"
    row = lines[3].split(" | ")
    assert row[0] == "| NVIDIA GeForce RTX 4090 (CUDA) (projection)"
    assert row[-1] == f"{projected['eta_s']:,.0f} |"
