"""The generated tables of docs/RESULTS.md (engine/results_render.py): the committed file
matches its raw files, and a number edited by hand in a table is caught and named."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import main
from engine.results_render import RESULTS, render_text, tables

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
