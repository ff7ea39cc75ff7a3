"""`hyflash speedup` on the real SmolLM2 GGUF at the tiny budget, run as the app runs it (a
child process, JSON lines on stdout). One job, shared by the slow tests, is killed after
every stage and stopped inside training, and each time run again: it resumes where it
stopped, runs every stage once, and installs a drafter that `hyflash generate` finds for that
file, with output identical to plain decoding. A second job on the model is refused while the
first holds the lock; bad input gets one clear error and leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.speedup.plan import BUDGETS, STAGES, SUPPORTED_ARCHITECTURES

SPEEDUP = [sys.executable, "-m", "engine.commands.cli", "speedup"]
TINY = ["--budget", "tiny", "--json"]
PIPELINE_S = 1500  # the tiny pipeline takes a few minutes; a shared CI machine is slower
# whichever test comes first runs the shared job (its restarts included) in its set-up
JOB_TIMEOUT_S = 3 * PIPELINE_S
DRAFTER_FILES = [
    "card.json",
    "draft_vocab.npy",
    "model_observe.int8.onnx",
    "model_propose.int8.onnx",
]


@pytest.fixture(scope="module")
def data_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data-home")


@pytest.fixture(scope="module")
def env(data_home) -> dict[str, str]:
    return {**os.environ, "HYFLASH_DATA_DIR": str(data_home), "PYTHONUNBUFFERED": "1"}


def events_of(stdout: str) -> list[dict]:
    """Every stdout line is one JSON event (nothing else may reach stdout)."""
    events = [json.loads(line) for line in stdout.splitlines()]
    assert all("event" in e for e in events), stdout[-2000:]
    return events


def speedup(env: dict, *args: str, timeout: float = PIPELINE_S) -> tuple[int, list[dict], str]:
    out = subprocess.run(
        [*SPEEDUP, *args], capture_output=True, text=True, env=env, timeout=timeout
    )
    return out.returncode, events_of(out.stdout), out.stderr


def cli(env: dict, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "engine.commands.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _run_until(args: list[str], env: dict, log: Path, stop, sig: int, while_stopped=None):
    """Start the job, read its events until stop(event), call while_stopped(), send `sig`;
    (events it wrote until it exited, exit code)."""
    with open(log, "a") as err:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        seen = []
        for line in proc.stdout:
            seen.append(json.loads(line))
            if stop(seen[-1]):
                break
        else:
            pytest.fail(f"the job ended before the stop point: {seen[-3:]}")
        if while_stopped is not None:
            while_stopped()
        proc.send_signal(sig)
        seen += [json.loads(line) for line in proc.stdout]
        return seen, proc.wait(timeout=120)


@pytest.fixture(scope="module")
def job(env, model_path, tmp_path_factory) -> dict:
    """One tiny job on the embedded model, run as a user with bad luck would: SIGKILLed after
    each stage (it pauses there on request), stopped by SIGTERM (the app's stop) inside
    training, each time run again until it finishes; installed regardless of its tau."""
    log = tmp_path_factory.mktemp("job-log") / "stderr.log"
    args = [*SPEEDUP, "--model", str(model_path), *TINY, "--install", "always"]
    runs, locked = [], []

    def second_job() -> None:  # while a paused child holds the lock
        locked.append(speedup(env, "--model", str(model_path), *TINY, timeout=300))

    def kill_after(stage: str, while_stopped=None) -> None:
        runs.append(
            _run_until(
                [*args, "--pause-after", stage],
                env,
                log,
                lambda e: e["event"] == "stage" and e["stage"] == stage and e["status"] != "start",
                signal.SIGKILL,
                while_stopped,
            )
        )

    kill_after("answers", second_job)
    kill_after("heldout")
    kill_after("features")
    stop_at = BUDGETS["tiny"].eval_every + 2  # a checkpoint behind it
    runs.append(
        _run_until(
            args, env, log, lambda e: e["event"] == "loss" and e["step"] >= stop_at, signal.SIGTERM
        )
    )
    for stage in ("train", "export", "validate"):
        kill_after(stage)
    rc, events, err = speedup(env, *args[len(SPEEDUP) :])
    assert rc == 0, err[-4000:]
    runs.append((events, rc))
    plan = next(e for e in runs[0][0] if e["event"] == "plan")
    return {"runs": runs, "locked": locked[0], "log": log.read_text(), "dir": Path(plan["job_dir"])}


def result_of(events: list[dict]) -> dict:
    assert events[-1]["event"] == "result", events[-3:]
    return events[-1]


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S)
def test_the_job_reports_the_protocol(job, model_path, data_home):
    from engine.file_hash import file_sha256

    first = job["runs"][0][0]
    assert [(e["stage"], e["status"]) for e in first[:1]] == [("plan", "start")]  # calibrating
    plan = next(e for e in first if e["event"] == "plan")
    assert plan["gguf"] == str(model_path) and plan["gguf_sha256"] == file_sha256(model_path)
    assert plan["model"] == model_path.stem and plan["architecture"] == "llama"
    assert plan["budget"] == "tiny" and plan["device"] in ("cpu", "cuda", "mps")
    assert [s["name"] for s in plan["stages"]] == list(STAGES)
    assert all(s["eta_s"] > 0 for s in plan["stages"][1:]) and plan["eta_s"] > 0
    assert plan["disk_bytes"] > 0 and plan["ram_bytes"] > 0 and plan["done_stages"] == ["plan"]
    assert job["dir"].parent == data_home / "speedup"
    every = [e for events, _ in job["runs"] for e in events]
    progress = {e["stage"] for e in every if e["event"] == "progress"}
    assert {"plan", "answers", "heldout", "features", "train", "validate"} <= progress
    assert all(e["eta_s"] is None or e["eta_s"] >= 0 for e in every if e["event"] == "progress")
    steps = BUDGETS["tiny"].steps
    losses = [e for e in every if e["event"] == "loss"]
    assert losses[-1] == {
        "event": "loss",
        "step": steps,
        "steps": steps,
        "loss": losses[-1]["loss"],
    }
    result = result_of(job["runs"][-1][0])
    assert set(result["stage_seconds"]) == set(STAGES)
    assert result["tau"] >= 1.0 and result["ngram_tau"] >= 1.0
    assert result["expected_speedup"] is None or result["expected_speedup"] >= 1.0
    assert result["installed"] and "--install always" in result["reason"]


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S)
def test_each_stage_ran_once_and_resumed_where_it_stopped(job):
    """Killed after each stage: the next run skips what is done and does the next stage, once;
    stopped inside training: a clean exit, and the rerun resumes from the last checkpoint."""
    runs = job["runs"]
    done = [
        e["stage"]
        for events, _ in runs
        for e in events
        if e["event"] == "stage" and e["status"] == "done"
    ]
    assert done == list(STAGES)  # the calibration, then each stage, in order, once
    plans = [next(e for e in events if e["event"] == "plan") for events, _ in runs]
    assert [p["done_stages"] for p in plans] == [list(STAGES[:n]) for n in (1, 2, 3, 4, 4, 5, 6, 7)]
    stopped, rc = runs[3]
    assert rc == 130 and stopped[-1] == {
        "event": "error",
        "message": "Stopped. Run the same command again to continue where it stopped.",
        "kind": "cancelled",
    }
    assert [rc for _, rc in runs] == [-signal.SIGKILL] * 3 + [130] + [-signal.SIGKILL] * 3 + [0]
    every = BUDGETS["tiny"].eval_every
    assert (
        f"resumed from step {every}" in job["log"] or f"resumed from step {2 * every}" in job["log"]
    )
    history = json.loads((job["dir"] / "tiny" / "train" / "history.json").read_text())
    assert [h["step"] for h in history] == list(range(1, BUDGETS["tiny"].steps + 1))
    corpus = job["dir"] / "corpus"
    tiny = BUDGETS["tiny"]
    for name, want in (("answers.jsonl", tiny.answers), ("eval_answers.jsonl", tiny.heldout)):
        rows = [json.loads(line) for line in (corpus / name).read_text().splitlines()]
        assert len(rows) == want and len({r["key"] for r in rows}) == want  # no row twice
    assert sorted(p.name for p in (job["dir"] / "tiny" / "drafter").iterdir()) == DRAFTER_FILES


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S)
def test_a_second_job_on_the_model_is_refused_while_one_runs(job):
    rc, events, _ = job["locked"]
    assert rc == 3 and [e["event"] for e in events] == ["error"] and events[0]["kind"] == "locked"
    assert re.match(
        r"Another speed-up job for this model is running \(process \d+", events[0]["message"]
    )


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S)
def test_installed_drafter_is_found_for_the_model(job, model_path, env, data_home):
    """By path (no shipped drafter for a path), with no flag and with --drafter hyflash:
    greedy output identical to plain decoding, tau reported; doctor lists the drafter."""
    from engine.file_hash import file_sha256

    result = result_of(job["runs"][-1][0])
    folder = Path(result["drafter_dir"])
    assert folder.parent == data_home / "drafters"
    assert sorted(p.name for p in folder.iterdir()) == DRAFTER_FILES
    card = json.loads((folder / "card.json").read_text())
    assert card["target"]["gguf_sha256"] == file_sha256(model_path)
    assert card["validation"]["tau"] == result["tau"]
    prompt = ["--prompt", "Write a Python function that reverses a list.", "--max-tokens", "40"]
    gen = ["generate", "--model", str(model_path), *prompt, "--json", "--threads", "2"]
    plain = cli(env, *gen, "--drafter", "none")
    drafted = cli(env, *gen, "--drafter", "hyflash", "--block-size", "4")
    default = cli(env, *gen)  # no flag: the installed drafter, not n-gram
    assert drafted["drafter"] == default["drafter"] == "hyflash"
    assert drafted["tokens"] == plain["tokens"] == default["tokens"]
    assert drafted["stats"]["tau_mean"] >= 1.0
    doctor = cli(env, "doctor", "--json")
    assert [d["path"] for d in doctor["drafters"]["installed"]] == [str(folder)]


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S)
def test_a_finished_job_reruns_only_a_changed_install(job, model_path, env, data_home):
    """Run again: every stage is done but the install decision under a new --install: `never`
    keeps the drafter in the job folder, `auto` takes the real rule (beats n-gram at B=16)."""
    args = ["--model", str(model_path), *TINY]
    first = result_of(job["runs"][-1][0])
    installed = sorted((data_home / "drafters").rglob("*"))
    rc, events, err = speedup(env, *args, "--install", "never")
    assert rc == 0, err[-3000:]
    statuses = {e["stage"]: e["status"] for e in events if e["event"] == "stage"}
    assert statuses == dict.fromkeys(STAGES[:-1], "skipped") | {"install": "done"}
    kept = result_of(events)
    assert not kept["installed"] and "kept for inspection" in kept["reason"]
    assert kept["drafter_dir"] == str(job["dir"] / "tiny" / "drafter")
    assert kept["tau"] == first["tau"] and kept["ngram_tau"] == first["ngram_tau"]
    assert sorted((data_home / "drafters").rglob("*")) == installed  # nothing installed
    rc, events, err = speedup(env, *args, "--install", "auto")
    assert rc == 0, err[-3000:]
    auto = result_of(events)
    assert auto["installed"] == (auto["tau"] > auto["ngram_tau"])
    assert ("beats" if auto["installed"] else "does not beat") in auto["reason"]
    rc, events, _ = speedup(env, *args, "--plan-only")
    assert rc == 0 and [(e["event"], e.get("status")) for e in events] == [
        ("stage", "skipped"),
        ("plan", None),
    ]
    assert events[-1]["done_stages"] == list(STAGES) and events[-1]["eta_s"] == 0


@pytest.mark.parametrize(
    "policy, tau, installed, says",
    [
        ("auto", 2.3, True, "beats n-gram lookup at block 16 on 12 held-out answers"),
        ("auto", 2.17, False, "does not beat"),  # a tie does not pay for the drafter's time
        ("auto", 1.9, False, "(tau 1.90 vs 2.17)"),
        ("always", 1.9, True, "--install always"),
        ("never", 2.3, False, "--install never"),
    ],
)
def test_install_decision(policy, tau, installed, says):
    from engine.speedup.plan import install_decision

    install, reason = install_decision(policy, tau, 2.17, 12)
    assert install == installed and says in reason


@pytest.mark.parametrize(
    "vocab, draft", [(49_152, 8_192), (151_936, 16_384), (262_144, 16_384), (5_000, 5_000)]
)
def test_draft_vocabulary_is_sized_by_the_targets(vocab, draft):
    from engine.speedup.plan import draft_vocab_size

    assert draft_vocab_size(vocab) == draft


# ----- bad input: one clear error, nothing left behind -----------------------------------------


def _gguf_of_architecture(path: Path, arch: str) -> Path:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _bad_models(tmp: Path, model_path: Path) -> dict[str, tuple[Path, str, str]]:
    not_gguf = tmp / "notes.gguf"
    not_gguf.write_text("these are my notes, not a model\n")
    truncated = tmp / "truncated.gguf"
    with open(model_path, "rb") as src, open(truncated, "wb") as dst:
        dst.write(src.read(model_path.stat().st_size // 2))
    return {
        "not a GGUF": (not_gguf, "bad_model", "Not a GGUF"),
        "truncated": (truncated, "bad_model", "cut short"),
        "unsupported": (
            _gguf_of_architecture(tmp / "t5.gguf", "t5"),
            "unsupported_architecture",
            ", ".join(SUPPORTED_ARCHITECTURES),
        ),
    }


@pytest.mark.parametrize("case", ["not a GGUF", "truncated", "unsupported"])
def test_bad_model_is_refused_before_anything(case, model_path, tmp_path):
    home = tmp_path / "home"
    path, kind, says = _bad_models(tmp_path, model_path)[case]
    env = {**os.environ, "HYFLASH_DATA_DIR": str(home)}
    rc, events, _ = speedup(env, "--model", str(path), *TINY, timeout=300)
    assert rc == 2 and [e["event"] for e in events] == ["error"]
    assert events[0]["kind"] == kind and says in events[0]["message"]
    assert not home.exists()  # no job folder, no lock, nothing installed


def test_too_little_disk_is_refused(model_path, tmp_path, monkeypatch, capfd):
    """Simulated: the disk reports 1 MB free. In-process, refused before the calibration."""
    from engine.commands.cli import main
    from engine.speedup import plan as speedup_plan

    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path / "home"))
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        speedup_plan.shutil, "disk_usage", lambda _p: usage._replace(free=1_000_000)
    )
    assert main(["speedup", "--model", str(model_path), *TINY]) == 2
    events = events_of(capfd.readouterr().out)
    assert [e["event"] for e in events] == ["error"] and events[0]["kind"] == "disk"
    assert "Not enough disk space" in events[0]["message"]
    assert not (tmp_path / "home" / "speedup" / "calibration").exists()
    assert not (tmp_path / "home" / "drafters").exists()


def test_missing_train_extra_is_named(model_path, tmp_path):
    """A Python where torch cannot be imported: the app tells the user what to install."""
    code = (
        "import sys; sys.modules['torch'] = None; from engine.commands.cli import main; "
        f"sys.exit(main(['speedup', '--model', {str(model_path)!r}, '--plan-only', '--json']))"
    )
    env = {**os.environ, "HYFLASH_DATA_DIR": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    events = events_of(out.stdout)
    assert out.returncode == 2 and events[-1]["kind"] == "missing_train_extra"
    assert "torch" in events[-1]["message"] and "[train]" in events[-1]["message"]


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S)
def test_job_folder_of_another_gguf_is_refused(job, model_path, env, tmp_path):
    """The same model with one byte changed is another GGUF: the finished job's folder is
    not its folder."""
    other = tmp_path / "other.gguf"
    shutil.copyfile(model_path, other)
    with open(other, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    folder = job["dir"]
    before = sorted(folder.rglob("*"))
    rc, events, _ = speedup(env, "--model", str(other), *TINY, "--out", str(folder), timeout=300)
    assert rc == 2 and events[-1]["kind"] == "bad_job" and "another model" in events[-1]["message"]
    assert sorted(folder.rglob("*")) == before


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S)
def test_install_refuses_a_card_pinned_to_another_gguf(
    job, model_path, data_home, tmp_path, monkeypatch
):
    from engine.drafters.installed import install_drafter
    from engine.events import DrafterMismatchError

    monkeypatch.setenv("HYFLASH_DATA_DIR", str(data_home))
    installed = Path(result_of(job["runs"][-1][0])["drafter_dir"])
    foreign = tmp_path / "foreign"
    shutil.copytree(installed, foreign)
    card = json.loads((foreign / "card.json").read_text())
    card["target"]["gguf_sha256"] = "0" * 64
    (foreign / "card.json").write_text(json.dumps(card))
    drafters = data_home / "drafters"
    before = sorted(p.name for p in drafters.iterdir())
    with pytest.raises(DrafterMismatchError, match="trained for another GGUF"):
        install_drafter(foreign, model_path, "foreign")
    assert sorted(p.name for p in drafters.iterdir()) == before  # no folder, no leftovers
    # a name whose folder holds another GGUF's drafter: refused, that folder untouched
    shutil.copytree(foreign, drafters / "taken")
    with pytest.raises(DrafterMismatchError, match="another GGUF"):
        install_drafter(installed, model_path, "taken")
    assert json.loads((drafters / "taken" / "card.json").read_text()) == card
    shutil.rmtree(drafters / "taken")
    assert sorted(p.name for p in drafters.iterdir()) == before


def test_catalog_model_finds_an_installed_drafter_by_its_pinned_sha(tmp_path, monkeypatch):
    """A catalog model without a shipped drafter: the card's sha256 is matched against the
    catalog's, without the file (which need not be downloaded)."""
    from engine.drafters.spec import hyflash_status
    from engine.models.catalog import load_catalog

    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path))
    entry = next(e for e in load_catalog().values() if not e.drafter and e.source.get("sha256"))
    available, why = hyflash_status(entry.id)
    assert not available and f"hyflash speedup --model {entry.id}" in why
    folder = tmp_path / "drafters" / "pinned"
    folder.mkdir(parents=True)
    card = {"format": "hyflash-drafter", "target": {"gguf_sha256": entry.source["sha256"]}}
    (folder / "card.json").write_text(json.dumps(card))
    assert hyflash_status(entry.id) == (True, "")
