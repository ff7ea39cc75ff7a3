"""The model manager's "Speed up this model…" dialog: the child's JSON-lines protocol, what
the dialog says where the training extra is missing, and the dialog driving a real `hyflash
speedup` child on the tiny budget: progress moves, pause and cancel stop the child and leave
a resumable state, the end state names the result."""

from __future__ import annotations

import json
import os
import sys

import pytest
from PySide6.QtCore import Qt

from app import speedup_job
from app.speedup_dialog import SpeedupDialog, result_text
from app.speedup_job import (
    JobError,
    Loss,
    Plan,
    Progress,
    Result,
    StageEvent,
    parse_event,
    train_extra_missing,
    unfinished_job,
)
from engine.models.catalog import default_target_id

MINUTES_10 = 600_000

PLAN = {
    "event": "plan",
    "model": "smollm2-135m-instruct",
    "gguf": "/x/SmolLM2-135M-Instruct.Q4_1.gguf",
    "gguf_sha256": "ab" * 32,
    "architecture": "llama",
    "budget": "quick",
    "device": "cpu",
    "job_dir": "/x/jobs/smollm2",
    "stages": [{"name": "answers", "eta_s": 600.0}, {"name": "train", "eta_s": 300.0}],
    "eta_s": 900.0,
    "disk_bytes": 123_000_000,
    "ram_bytes": 2_000_000_000,
    "done_stages": ["answers"],
}
RESULT = {
    "event": "result",
    "drafter_dir": "/x/drafters/smollm2",
    "tau": 2.41,
    "ngram_tau": 2.05,
    "installed": True,
    "reason": "beats n-gram lookup",
    "stage_seconds": {"answers": 610.5, "train": 290.0},
    "expected_speedup": 1.31,
}


def test_parse_protocol_lines():
    plan = parse_event(json.dumps(PLAN))
    assert isinstance(plan, Plan)
    assert plan.budget == "quick" and plan.done_stages == ("answers",)
    assert [(s.name, s.eta_s) for s in plan.stages] == [("answers", 600.0), ("train", 300.0)]
    assert plan.disk_bytes == 123_000_000 and plan.device == "cpu"
    line = '{"event": "stage", "stage": "train", "status": "done", "seconds": 12.5}'
    assert parse_event(line) == StageEvent("train", "done", 12.5)
    line = (
        '{"event": "progress", "stage": "answers", "done": 3, "total": 40, "unit": "answers", '
        '"eta_s": null}'
    )
    assert parse_event(line) == Progress("answers", 3.0, 40.0, "answers", None)
    assert parse_event('{"event": "loss", "step": 7, "steps": 50, "loss": 3.25}') == Loss(
        7, 50, 3.25
    )
    result = parse_event(json.dumps(RESULT) + "\n")
    assert isinstance(result, Result) and result.installed and result.expected_speedup == 1.31
    assert result.stage_seconds == {"answers": 610.5, "train": 290.0}
    assert parse_event(json.dumps({**RESULT, "expected_speedup": None})).expected_speedup is None
    line = '{"event": "error", "message": "another job holds it", "kind": "locked"}'
    assert parse_event(line) == JobError("another job holds it", "locked")
    # anything else on stdout (a stray library print, an unknown or broken event) is skipped
    for line in ("", "loading model...", "[1, 2]", '{"event": "hello"}', '{"event": "loss"}'):
        assert parse_event(line) is None


def test_result_text_names_the_outcome():
    installed = parse_event(json.dumps(RESULT))
    assert result_text(installed) == (
        "HyFlash drafter installed: τ 2.41 vs n-gram 2.05 at block 16, "
        "expected ~1.31x on this machine.\nBeats n-gram lookup."
    )
    kept = parse_event(
        json.dumps({**RESULT, "installed": False, "reason": "", "expected_speedup": None})
    )
    assert result_text(kept) == (
        "No drafter installed: τ 2.41 vs n-gram 2.05 at block 16. The trained files are kept "
        "in /x/drafters/smollm2."
    )


def test_missing_train_extra_says_what_to_install(qtbot, monkeypatch):
    monkeypatch.setattr(speedup_job, "missing_train_extra", lambda: ["torch"])
    text = train_extra_missing()
    assert "torch" in text and "bootstrap.py install train" in text
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # an installer's app
    assert 'pip install "hyflash-chat[train]"' in train_extra_missing()

    started = []
    monkeypatch.setattr(speedup_job.SpeedupJob, "start", lambda self, argv: started.append(argv))
    dialog = SpeedupDialog(default_target_id(), "SmolLM2")
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.state == "unavailable" and not started  # no child where it cannot train
    assert "bootstrap.py install train" in dialog.message.text()
    assert not dialog.start_button.isVisible() and dialog.close_button.isVisible()


def _pid(dialog: SpeedupDialog) -> int:
    assert dialog.job.process is not None
    return dialog.job.process.processId()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _click(qtbot, button) -> None:
    assert button.isVisible() and button.isEnabled(), button.text()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.skipif(train_extra_missing() is not None, reason="needs the [train] extra")
def test_a_stopped_job_is_found_by_its_model_id_or_its_file(tmp_path, monkeypatch):
    """A job for a model given as a file names it by the file's stem: the app asks by path."""
    from engine.speedup.job import Job, speedup_root
    from engine.speedup.plan import BUDGETS

    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path / "data"))
    gguf = tmp_path / "models" / "mine.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    link = tmp_path / "link.gguf"
    link.symlink_to(gguf)
    assert unfinished_job(str(gguf)) is None
    folder = speedup_root() / "0123456789abcdef"
    Job(folder, folder / "corpus", BUDGETS["quick"]).create(gguf.stem, gguf.resolve(), "ab" * 32)
    assert unfinished_job(str(gguf)) == unfinished_job(str(link)) == "quick"
    assert unfinished_job(str(tmp_path / "other" / "mine.Q4_1.gguf")) is None  # same stem
    blob = tmp_path / "blobs" / "sha256-0a1b"  # Ollama's files have no .gguf suffix
    blob.parent.mkdir()
    blob.write_bytes(b"GGUF")
    assert unfinished_job(str(blob)) is None
    folder = speedup_root() / "fedcba9876543210"
    Job(folder, folder / "corpus", BUDGETS["standard"]).create(blob.stem, blob, "cd" * 32)
    assert unfinished_job(str(blob)) == "standard"


def test_dialog_runs_pauses_cancels_and_resumes_a_real_job(qtbot, tmp_path, monkeypatch):
    """`hyflash speedup --budget tiny` on the embedded model, in a child process: about 10
    minutes on 2 CPU cores (a third of it the plan's one-off measurement of this machine)."""
    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path / "data"))  # job, calibration, drafter
    model = default_target_id()
    dialog = SpeedupDialog(model, "SmolLM2", budgets=("tiny",))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.state != "planning", timeout=MINUTES_10)
    assert dialog.state == "ready", dialog.message.text()
    assert dialog.start_button.text() == "Start"
    assert dialog.eta.text().endswith("on this computer") and dialog.device.text() == "cpu"
    assert "of disk" in dialog.needs.text() and "Training the drafter" in dialog.stages.text()

    # progress moves: the bar, the stage and its ETA follow the child's events
    bar = []
    dialog.bar.valueChanged.connect(bar.append)
    _click(qtbot, dialog.start_button)
    qtbot.waitUntil(lambda: dialog.stage == "answers" and bar and bar[-1] > 0, timeout=MINUTES_10)
    assert dialog.stage_label.text().startswith("Step 1 of 7: The model answers")
    assert dialog.remaining.text().endswith("left")
    qtbot.waitUntil(lambda: "answers" in dialog.finished_stages, timeout=MINUTES_10)
    assert sorted(bar) == bar and len(set(bar)) >= 2

    # pause: the child stops with its state saved; Resume goes on from there
    pid = _pid(dialog)
    _click(qtbot, dialog.pause_button)
    qtbot.waitUntil(lambda: dialog.state == "paused", timeout=60_000)
    assert _gone(pid) and dialog.pause_button.text() == "Resume"
    assert unfinished_job(model) == "tiny"
    skipped = []
    dialog.job.event.connect(
        lambda e: (
            skipped.append(e.stage) if isinstance(e, StageEvent) and e.status == "skipped" else None
        )
    )
    _click(qtbot, dialog.pause_button)
    qtbot.waitUntil(lambda: dialog.stage == "heldout", timeout=MINUTES_10)
    assert "answers" in skipped  # not made again

    # cancel: the child stops, the dialog closes, the job stays resumable
    said = []
    dialog.closedWith.connect(lambda _model, message: said.append(message))
    pid = _pid(dialog)
    _click(qtbot, dialog.cancel_button)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=60_000)
    assert _gone(pid) and not dialog.job.running
    assert said and "Resume speed-up" in said[0]
    assert unfinished_job(model) == "tiny"

    # opened again (as after a restart of the app): Resume runs the rest to the end state
    again = SpeedupDialog(model, "SmolLM2", budgets=("tiny",))
    qtbot.addWidget(again)
    again.show()
    qtbot.waitUntil(lambda: again.state != "planning", timeout=MINUTES_10)
    assert again.state == "ready" and again.start_button.text() == "Resume"
    assert "answers" in again.plan.done_stages
    _click(qtbot, again.start_button)
    qtbot.waitUntil(lambda: again.state in ("finished", "failed"), timeout=3 * MINUTES_10)
    assert again.state == "finished", again.message.text()
    result = again.result
    assert again.message.text() == result_text(result)
    assert f"τ {result.tau:.2f} vs n-gram {result.ngram_tau:.2f} at block 16" in result_text(result)
    if result.installed:
        assert again.message.text().startswith("HyFlash drafter installed")
    else:  # tiny's drafter is not meant to beat n-gram lookup: where its files were kept
        assert result.reason and result.drafter_dir in again.message.text()
    assert again.loss_plot.points and again.loss.text().startswith("Training loss: ")
    assert again.bar.value() == 1000 and again.stage_label.text() == "Done"
    assert unfinished_job(model) is None
