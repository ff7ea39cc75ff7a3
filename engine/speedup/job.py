"""A speed-up job's folder (engine/commands/speedup.py): which stages are done, the GGUF it
belongs to, the lock that keeps one job per model, and the calibration remembered per model
and machine."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.atomic_files import read_json, write_json
from engine.paths import data_dir
from engine.speedup.plan import Budget, Corpus, SpeedupError

MAX_LEN = 1024  # `hyflash train --max-len`: sequences are read as training reads them
CALIBRATION_VERSION = 1


def speedup_root() -> Path:
    return data_dir() / "speedup"


def rows(path: Path) -> int:
    """Usable rows of a corpus file (those training and the walk read)."""
    from engine.training.features import load_corpus

    return len(load_corpus(path, MAX_LEN)[0]) if path.exists() else 0


class Job:
    """The job folder of one model and budget: where its files are and which stages are done."""

    def __init__(self, folder: Path, corpus: Path, budget: Budget) -> None:
        self.dir = folder
        self.budget = budget
        self.answers = corpus / "answers.jsonl"
        self.heldout = corpus / "eval_answers.jsonl"
        self.conversations = corpus / "sharegpt_answers.jsonl"
        self.budget_dir = folder / budget.name
        self.run_dir = self.budget_dir / "train"
        self.drafter_dir = self.budget_dir / "drafter"
        self.state_path = self.budget_dir / "state.json"
        self.stages: dict[str, dict] = {}
        self.notice: str | None = None  # one line for the person when a file was unreadable
        if self.state_path.exists():
            state = read_json(self.state_path)
            if state is not None and isinstance(state.get("stages"), dict):
                self.stages = state["stages"]
            else:
                self.notice = (
                    f"{self.state_path} is unreadable (cut short?): every stage is checked "
                    "again, each resuming from its own files"
                )

    def check_owner(self, sha: str) -> None:
        """Refuse a folder that holds another GGUF's job, or anything but a job."""
        info = self.dir / "job.json"
        owner = read_json(info)
        if owner is not None:
            if owner.get("gguf_sha256") != sha:
                raise SpeedupError(
                    "bad_job",
                    f"{self.dir} holds the speed-up job of another model ({owner.get('gguf')}, "
                    f"sha256 {str(owner.get('gguf_sha256'))[:12]}...): choose another --out.",
                )
        elif info.exists():
            pass  # cut short: a job folder still (create() writes it again)
        elif self.dir.is_dir() and any(self.dir.iterdir()):
            raise SpeedupError(
                "bad_job",
                f"{self.dir} is not empty and not a speed-up job folder: choose another --out.",
            )

    def create(self, model_id: str, gguf: Path, sha: str) -> None:
        self.budget_dir.mkdir(parents=True, exist_ok=True)
        info = self.dir / "job.json"
        if read_json(info) is None:  # new, or cut short: this model's job from now on
            write_json(info, {"model": model_id, "gguf": str(gguf), "gguf_sha256": sha}, indent=2)

    def corpus(self) -> Corpus:
        return Corpus(rows(self.answers), rows(self.conversations), rows(self.heldout))

    def finish(self, stage: str, seconds: float, result: dict) -> None:
        self.stages[stage] = {"seconds": seconds, "result": result}
        write_json(self.state_path, {"budget": self.budget.name, "stages": self.stages}, indent=2)


@contextlib.contextmanager
def model_lock(sha: str, job_dir: Path) -> Iterator[None]:
    """One job per model at a time (any job folder); the OS frees the lock of a killed job."""
    from filelock import FileLock, Timeout

    locks = speedup_root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    lock = FileLock(locks / f"{sha[:16]}.lock")
    owner = locks / f"{sha[:16]}.owner.json"
    try:
        lock.acquire(timeout=0)
    except Timeout:
        try:
            who = json.loads(owner.read_text(encoding="utf-8"))
            held = f" (process {who['pid']}, job folder {who['job_dir']})"
        except (OSError, ValueError, KeyError):
            held = ""
        raise SpeedupError(
            "locked",
            f"Another speed-up job for this model is running{held}. Wait for it to finish or "
            "stop it first.",
        ) from None
    try:
        write_json(owner, {"pid": os.getpid(), "job_dir": str(job_dir)}, indent=2)
        yield
    finally:
        lock.release()


class Calibration:
    """This machine's throughput for a model (calibrate.py), remembered per model, machine,
    device and thread count."""

    def __init__(self, sha: str, device: str, threads: int) -> None:
        import llama_cpp
        import torch

        from engine.training.features import source_machine

        self.device, self.threads = device, threads
        self.machine = (
            f"{source_machine(device)}; torch {torch.__version__}; "
            f"llama.cpp {llama_cpp.__version__}"
        )
        self.path = speedup_root() / "calibration" / f"{sha[:16]}-{device}-{threads}t.json"

    def known(self) -> dict | None:
        try:
            known = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if known.get("machine") != self.machine or known.get("version") != CALIBRATION_VERSION:
            return None
        return known | {"cached": True}

    def measure(self, gguf: Path, report: Callable[[int, int], None]) -> dict:
        from engine.speedup.calibrate import calibrate

        measured = calibrate(gguf, device=self.device, threads=self.threads, progress=report)
        measured |= {"machine": self.machine, "version": CALIBRATION_VERSION}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json(self.path, measured, indent=2)
        return measured | {"cached": False}
