"""The speed-up job (`hyflash speedup --json`, which trains a HyFlash drafter for one model) as
a child process driven from the UI thread without blocking it: its JSON-lines protocol parsed
into events, what the training side needs, and start / stop.

Training imports torch, which the app never does: the job always runs in its own process,
with this Python when it has the `[train]` extra.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import (
    QCoreApplication,
    QObject,
    QProcess,
    QProcessEnvironment,
    QTimer,
    Signal,
)

from engine.models.catalog import load_catalog
from engine.paths import REPO
from engine.speedup.job import Job, speedup_root
from engine.speedup.plan import BUDGETS, missing_train_extra

USER_BUDGETS = tuple(b for b in BUDGETS if b != "tiny")  # tiny is the tests' smoke run
STOP_GRACE_MS = 30_000  # a clean stop finishes the step in flight and saves its state
STDERR_TAIL = 4000  # characters of the child's stderr kept for a message when it dies


@dataclass(frozen=True)
class StagePlan:
    name: str
    eta_s: float


@dataclass(frozen=True)
class Plan:
    model: str
    gguf: str
    architecture: str
    budget: str
    device: str
    job_dir: str
    stages: tuple[StagePlan, ...]
    eta_s: float
    disk_bytes: int
    ram_bytes: int
    done_stages: tuple[str, ...]


@dataclass(frozen=True)
class StageEvent:
    stage: str
    status: str  # start | done | skipped
    seconds: float


@dataclass(frozen=True)
class Progress:
    stage: str
    done: float
    total: float
    unit: str
    eta_s: float | None


@dataclass(frozen=True)
class Loss:
    step: int
    steps: int
    loss: float


@dataclass(frozen=True)
class Result:
    drafter_dir: str
    tau: float
    ngram_tau: float
    installed: bool
    reason: str
    stage_seconds: dict[str, float]
    expected_speedup: float | None


@dataclass(frozen=True)
class JobError:
    message: str
    kind: str


Event = Plan | StageEvent | Progress | Loss | Result | JobError


def _plan(d: dict) -> Plan:
    return Plan(
        model=d["model"],
        gguf=d.get("gguf", ""),
        architecture=d.get("architecture", ""),
        budget=d["budget"],
        device=d.get("device", ""),
        job_dir=d.get("job_dir", ""),
        stages=tuple(StagePlan(s["name"], float(s.get("eta_s") or 0.0)) for s in d["stages"]),
        eta_s=float(d.get("eta_s") or 0.0),
        disk_bytes=int(d.get("disk_bytes") or 0),
        ram_bytes=int(d.get("ram_bytes") or 0),
        done_stages=tuple(d.get("done_stages") or ()),
    )


def _result(d: dict) -> Result:
    speedup = d.get("expected_speedup")
    return Result(
        drafter_dir=d.get("drafter_dir", ""),
        tau=float(d["tau"]),
        ngram_tau=float(d["ngram_tau"]),
        installed=bool(d["installed"]),
        reason=d.get("reason", ""),
        stage_seconds={k: float(v) for k, v in (d.get("stage_seconds") or {}).items()},
        expected_speedup=None if speedup is None else float(speedup),
    )


_PARSERS = {
    "plan": _plan,
    "stage": lambda d: StageEvent(d["stage"], d["status"], float(d.get("seconds") or 0.0)),
    "progress": lambda d: Progress(
        d["stage"],
        float(d["done"]),
        float(d["total"]),
        d.get("unit", ""),
        None if d.get("eta_s") is None else float(d["eta_s"]),
    ),
    "loss": lambda d: Loss(int(d["step"]), int(d["steps"]), float(d["loss"])),
    "result": _result,
    "error": lambda d: JobError(d.get("message", ""), d.get("kind", "")),
}


def parse_event(line: str) -> Event | None:
    """One stdout line as an event, or None for anything else (the child writes only JSON
    lines, but a stray print from a library must not stop the dialog)."""
    try:
        data = json.loads(line)
        return _PARSERS[data["event"]](data)
    except (ValueError, KeyError, TypeError):
        return None


def train_extra_missing() -> str | None:
    """None when this Python can train a drafter, else what to install, in words a user can
    follow (a frozen installer has no Python with torch at all)."""
    if getattr(sys, "frozen", False):
        return (
            "Training a drafter needs PyTorch, which the installed app does not include. Run "
            "HyFlash Chat from its source code with the training extra: "
            "python3 bootstrap.py install train, then python3 bootstrap.py run "
            '(or pip install "hyflash-chat[train]" and run hyflash-chat).'
        )
    missing = missing_train_extra()
    if not missing:
        return None
    root = REPO
    how = (
        f"python3 bootstrap.py install train (in {root})"
        if (root / "bootstrap.py").exists()
        else f'{sys.executable} -m pip install "hyflash-chat[train]"'
    )
    return (
        f"Training a drafter needs the [train] extra ({', '.join(missing)} not installed). "
        f"Install it with: {how}, then open this window again."
    )


def unfinished_job(model_id: str) -> str | None:
    """The budget of this model's newest speed-up job that stopped before its end (in the
    jobs' default folders), or None. Reads only the jobs' small JSON files."""
    found: list[tuple[float, str]] = []
    for info in speedup_root().glob("*/job.json"):
        try:
            if not _is_job_of(json.loads(info.read_text(encoding="utf-8")), model_id):
                continue
            for name, budget in BUDGETS.items():
                job = Job(info.parent, info.parent / "corpus", budget)
                if job.budget_dir.is_dir() and "install" not in job.stages:
                    found.append((job.budget_dir.stat().st_mtime, name))
        except (OSError, ValueError, KeyError):
            continue  # a folder being written or damaged: the job itself will say
    return max(found)[1] if found else None


def _is_job_of(info: dict, model_id: str) -> bool:
    """A job names its model by id (a catalog id, or a file's stem, which any file may share)
    and by its GGUF, resolved: a model given as a file (Ollama's have no .gguf suffix) is
    matched by the file."""
    if model_id in load_catalog():
        return info.get("model") == model_id
    return info.get("gguf") == str(Path(model_id).expanduser().resolve())


def speedup_argv(model: str, budget: str, plan_only: bool = False) -> list[str]:
    """The child's command line: this Python running the engine's CLI."""
    argv = [
        sys.executable,
        "-m",
        "engine.commands.cli",
        "speedup",
        "--model",
        model,
        "--budget",
        budget,
    ]
    return argv + ["--json", "--plan-only"] if plan_only else argv + ["--json"]


class SpeedupJob(QObject):
    """One child process: its events as they arrive, then `ended` once it has exited.

    `stop()` asks it to stop cleanly (SIGTERM; the job saves a resumable state) and kills it
    only if it has not exited after STOP_GRACE_MS.
    """

    event = Signal(object)  # an Event
    ended = Signal(int, str)  # exit code (-1: crashed or killed), the tail of its stderr

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.process: QProcess | None = None
        self._out = b""
        self._err = ""
        self._kill = QTimer(self)
        self._kill.setSingleShot(True)
        self._kill.timeout.connect(self._force_kill)
        app = QCoreApplication.instance()
        if app is not None:  # quitting the app stops the job cleanly, not by QProcess's kill
            app.aboutToQuit.connect(self.shutdown)

    @property
    def running(self) -> bool:
        return self.process is not None

    def start(self, argv: list[str]) -> None:
        assert self.process is None, "one child at a time"
        self._out, self._err = b"", ""
        proc = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("PYTHONUNBUFFERED", "1")  # events arrive as they happen
        proc.setProcessEnvironment(env)
        proc.readyReadStandardOutput.connect(self._read_out)
        proc.readyReadStandardError.connect(self._read_err)
        proc.finished.connect(self._finished)
        proc.errorOccurred.connect(self._error)
        self.process = proc
        proc.start(argv[0], argv[1:])

    def stop(self) -> None:
        if self.process is not None and not self._kill.isActive():
            self.process.terminate()
            self._kill.start(STOP_GRACE_MS)

    def shutdown(self) -> None:
        """Stop and wait for the exit (closing the window or the app)."""
        proc = self.process
        if proc is None:
            return
        self.stop()
        if not proc.waitForFinished(STOP_GRACE_MS):
            proc.kill()
            proc.waitForFinished(5000)

    def _force_kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def _read_out(self) -> None:
        self._out += bytes(self.process.readAllStandardOutput())
        *lines, self._out = self._out.split(b"\n")
        for line in lines:
            self._emit(line)

    def _emit(self, line: bytes) -> None:
        parsed = parse_event(line.decode("utf-8", "replace"))
        if parsed is not None:
            self.event.emit(parsed)

    def _read_err(self) -> None:
        text = bytes(self.process.readAllStandardError()).decode("utf-8", "replace")
        self._err = (self._err + text)[-STDERR_TAIL:]

    def _error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:  # no `finished` follows this one
            self._err = f"could not start {self.process.program()}: {self.process.errorString()}"
            self._done(-1)

    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._read_out()
        self._read_err()
        if self._out.strip():
            self._emit(self._out)
        self._done(code if status == QProcess.ExitStatus.NormalExit else -1)

    def _done(self, code: int) -> None:
        self._kill.stop()
        proc, self.process = self.process, None
        proc.deleteLater()
        self.ended.emit(code, self._err.strip())
