"""The generated tables of docs/RESULTS.md (engine/commands/results.py): the committed file
matches its raw files, and a number edited by hand in a table is caught and named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.commands.cli import main
from engine.commands.results import RESULTS, render_table, render_text, tables
from engine.paths import REPO

QWEN_WALK = (
    "acceptance docs/bench/qwen-coder/speedup-standard/validate.json cols=tau,vs-ngram,sets,ms"
)


def test_every_generated_table_in_results_matches_its_raw_files(capsys):
    assert main(["results", "render", "--check"]) == 0, capsys.readouterr().err
    assert len(tables(RESULTS.read_text(encoding="utf-8"))) >= 20


def test_a_cell_edited_by_hand_fails_the_check_naming_its_table(tmp_path, capsys):
    text = RESULTS.read_text(encoding="utf-8")
    qwen = next(t for t in tables(text) if t.spec == QWEN_WALK)
    row = next(line for line in qwen.body.splitlines() if line.startswith("| hyflash |"))
    assert "| 2.09 |" in row  # the shipped Qwen drafter's tau at B=16 in validate.json
    edited = tmp_path / "RESULTS.md"
    edited.write_text(text.replace(row, row.replace("| 2.09 |", "| 2.19 |", 1)), encoding="utf-8")

    assert main(["results", "render", "--check", "--file", str(edited)]) == 1
    err = capsys.readouterr().err
    assert QWEN_WALK in err and f"line {qwen.line}" in err
    assert err.count("table differs") == 1  # only the edited one

    # render puts the raw file's number back, and then the check passes
    assert main(["results", "render", "--file", str(edited)]) == 0
    assert edited.read_text(encoding="utf-8") == text
    assert main(["results", "render", "--check", "--file", str(edited)]) == 0


def test_a_table_is_written_between_its_markers_and_bad_specs_are_refused(tmp_path, capsys):
    spec = "speed-cost-curve docs/bench/speed/speed.json"
    new, changed = render_text(f"before\n<!-- table: {spec} -->\n<!-- /table -->\nafter\n")
    lines = new.splitlines()
    assert lines[0] == "before" and lines[-1] == "after" and len(changed) == 1
    assert lines[2].startswith("| B | 1 | 2 |") and lines[4].startswith("| T(B)/T(1) | 1.00 |")
    assert render_text(new) == (new, [])  # rendering twice changes nothing

    unclosed = f"<!-- table: {spec} -->\n| x |\n<!-- table: {spec} -->\n<!-- /table -->\n"
    with pytest.raises(ValueError, match="no <!-- /table -->"):
        render_text(unclosed)

    bad = tmp_path / "bad.md"
    for body in ("no-such-renderer x.json", "speed docs/bench/none/speed.json"):
        bad.write_text(f"<!-- table: {body} -->\n<!-- /table -->\n", encoding="utf-8")
        assert main(["results", "render", "--check", "--file", str(bad)]) == 2
        assert Path(body.split()[-1]).name in capsys.readouterr().err


NEW_RENDERERS = [
    "app-speed",
    "app-render",
    "projection",
    "kernels",
    "generate-runs",
    "validation",
    "torch-check",
]


@pytest.mark.parametrize("renderer", [*NEW_RENDERERS, "speed-runs"])
def test_each_renderer_draws_its_committed_table_and_a_hand_edit_fails(renderer, tmp_path, capsys):
    text = RESULTS.read_text(encoding="utf-8")
    table = next(t for t in tables(text) if t.spec.split()[0] == renderer)
    assert render_table(table.spec) == table.body
    # change the first digit after the last row's label, as a hand edit of a number would
    last = table.body.splitlines()[-1]
    cells = last.index("|", 1)
    bumped = re.sub(r"\d", lambda m: str((int(m[0]) + 1) % 10), last[cells:], count=1)
    edited_row = last[:cells] + bumped
    edited = tmp_path / "RESULTS.md"
    edited.write_text(text.replace(table.body, table.body.replace(last, edited_row)), "utf-8")
    assert main(["results", "render", "--check", "--file", str(edited)]) == 1
    err = capsys.readouterr().err
    assert err.count("table differs") == 1 and f"line {table.line}:" in err


def _rows(spec: str) -> list[list[str]]:
    body = render_table(spec).splitlines()[2:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in body]


def test_app_speed_groups_runs_by_kind_against_their_own_command_line():
    files = [f"docs/bench/app-speed-kinds/session2-{r}/app-speed.json" for r in ("before", "after")]
    rows = _rows(f"app-speed {' '.join(files)} runs=before|after")
    assert [r[:2] for r in rows if r[2].startswith("command line")] == [
        [k, run] for k in ("chat", "code", "long") for run in ("before", "after")
    ]
    before = json.loads((REPO / files[0]).read_text(encoding="utf-8"))["rows"]
    long_window = next(r for r in before if r["kind"] == "long" and r["config"] != rows[0][2])
    row = next(r for r in rows if r[:3] == ["long", "before", long_window["config"]])
    assert row[3:6] == [
        str(long_window["tokens"]),
        f"{long_window['tok_s']:.1f}",
        f"{long_window['vs_cli']:.2f}x",
    ]
    with pytest.raises(ValueError, match="runs= names 1 files"):
        render_table(f"app-speed {' '.join(files)} runs=before")


def test_kernels_say_up_to_which_block_rows_are_exact():
    files = ["smollm2", "gemma"]
    rows = _rows("kernels " + " ".join(f"docs/bench/kernels/doctor-{f}.json" for f in files))
    gemma = json.loads((REPO / "docs/bench/kernels/doctor-gemma.json").read_text("utf-8"))
    upto = next(r for r in gemma["kernels"]["verdict"]["results"] if r["outcome"] == "works")
    assert upto["exact_upto"] < upto["checked_rows"]  # Gemma's tiled kernel from B=8
    assert rows[0][0] == "smollm2-135m-instruct" and rows[0][2] == "every B (32)"
    assert rows[1][2] == f"B={upto['exact_upto']}"


def test_generate_runs_count_the_tokens_equal_to_plain():
    k = "docs/bench/kernels/gemma-tutorial"
    rows = _rows(
        f"generate-runs {k}-plain.json {k}-ngram16-exact.json {k}-ngram16-fast.json labels=a|b"
    )
    fast = json.loads((REPO / f"{k}-ngram16-fast.json").read_text("utf-8"))
    plain = json.loads((REPO / f"{k}-plain.json").read_text("utf-8"))
    diverged = [
        i for i, (x, y) in enumerate(zip(plain["tokens"], fast["tokens"], strict=True)) if x != y
    ]
    assert rows[0][1] == f"all {len(plain['tokens'])}"  # exact mode: greedy output unchanged
    assert rows[1][1] == f"first {diverged[0]}"


def test_validation_fills_only_the_steps_a_file_has():
    spec = (
        "validation resources/drafters/hyflash-smollm2-135m/card.json "
        "docs/bench/v4-baselines-fused/validation-v4-fused.json labels=card|run steps=250,2750"
    )
    card, run = _rows(spec)
    assert card[1] == "" and card[2] != ""  # a card keeps its best checkpoint's step only
    assert run[1] != "" and run[2] != ""


def test_app_speed_pooled_sums_every_answer_of_every_run():
    files = [f"docs/bench/app-speed-kinds/session4-final-r{r}/app-speed.json" for r in (1, 2, 3)]
    rows = _rows(f"app-speed {' '.join(files)} pooled=yes")
    runs = [json.loads((REPO / f).read_text(encoding="utf-8")) for f in files]
    answers = [a for run in runs for a in run["answers"] if a["kind"] == "long"]

    def speed(config_start: str) -> tuple[int, float]:
        mine = [a for a in answers if a["config"].startswith(config_start)]
        tokens = sum(a["tokens"] for a in mine)
        return tokens, tokens / sum(a["decode_s"] for a in mine)

    (tokens, window), (_, cli) = speed("window"), speed("command line")
    row = next(r for r in rows if r[0] == "long" and r[1].startswith("window"))
    assert row[2:4] == [str(3 * 3), "0"]  # 3 long answers a run, all equal to the command line's
    assert row[4:7] == [str(tokens), f"{window:.1f}", f"{window / cli:.2f}x"]
    worst = max(r["max_gap_ms"] for run in runs for r in run["rows"] if r["config"] == row[1])
    assert row[8] == f"{worst:.0f}"
