"""The speed-up job's folder (engine.speedup.job): files cut short by a crash or a full disk
never block a rerun, and another model's job is still refused."""

from __future__ import annotations

import pytest

from engine.speedup.job import Job
from engine.speedup.plan import BUDGETS, SpeedupError

SHA = "ab" * 32


def _job(folder) -> Job:
    return Job(folder, folder / "corpus", BUDGETS["quick"])


def test_a_state_file_cut_short_means_every_stage_is_checked_again(tmp_path):
    job = _job(tmp_path)
    job.create("m", tmp_path / "m.gguf", SHA)
    job.finish("answers", 1.0, {"answers": 3})
    assert _job(tmp_path).stages == {"answers": {"seconds": 1.0, "result": {"answers": 3}}}
    job.state_path.write_bytes(b"")  # what a crash while writing used to leave
    again = _job(tmp_path)
    assert again.stages == {} and "unreadable" in again.notice
    again.check_owner(SHA)
    again.finish("answers", 2.0, {"answers": 3})  # the stage redone lands as before
    assert _job(tmp_path).stages["answers"]["seconds"] == 2.0 and _job(tmp_path).notice is None


def test_a_job_file_cut_short_is_written_again_and_another_models_job_still_refused(tmp_path):
    job = _job(tmp_path)
    job.create("m", tmp_path / "m.gguf", SHA)
    (tmp_path / "job.json").write_text('{"model": "m", "gg', encoding="utf-8")
    job.check_owner(SHA)  # ours still: no refusal
    job.create("m", tmp_path / "m.gguf", SHA)
    job.check_owner(SHA)
    with pytest.raises(SpeedupError, match="another model"):
        job.check_owner("cd" * 32)
