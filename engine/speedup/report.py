"""How a speed-up job reports: JSON lines for the app (`--json`; one object a line, the last
one the result or an error) or, on a terminal, a bar with ETA per stage on stderr.

The JSON protocol (app/speedup_job.py parses it):
  {"event": "plan", "model", "gguf", "gguf_sha256", "architecture", "budget", "device",
   "job_dir", "stages": [{"name", "eta_s"}], "eta_s", "disk_bytes", "ram_bytes",
   "done_stages"}
  {"event": "stage", "stage", "status": "start" | "done" | "skipped", "seconds"}
  {"event": "progress", "stage", "done", "total", "unit", "eta_s": float | null}
  {"event": "loss", "step", "steps", "loss"}
  {"event": "result", "drafter_dir", "tau", "ngram_tau", "installed", "reason",
   "stage_seconds", "expected_speedup": float | null}
  {"event": "error", "message", "kind"}
  {"event": "notice", "message"}  (something the person should know; the job goes on)
"""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

from engine.units import format_size

PROGRESS_EVERY_S = 0.5  # the app's bar needs no more; a long stage stays a few KB of lines


class _Rate:
    """A stage's remaining time from its progress since it started in this process."""

    def __init__(self) -> None:
        self.start: tuple[float, float] | None = None

    def eta(self, done: float, total: float) -> float | None:
        now = time.monotonic()
        if self.start is None:
            self.start = (now, done)
            return None
        t0, done0 = self.start
        if done <= done0 or now <= t0:
            return None
        return (total - done) * (now - t0) / (done - done0)


class JsonReporter:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._rates: dict[str, _Rate] = {}
        self._last: dict[str, float] = {}

    def emit(self, event: dict) -> None:
        self.stream.write(json.dumps(event) + "\n")
        self.stream.flush()

    def plan(self, plan: dict) -> None:
        self.emit({"event": "plan", **plan})

    def notice(self, message: str) -> None:
        self.emit({"event": "notice", "message": message})

    def stage(self, name: str, status: str, seconds: float = 0.0) -> None:
        self.emit({"event": "stage", "stage": name, "status": status, "seconds": seconds})

    def progress(self, stage: str, done: float, total: float, unit: str) -> None:
        eta = self._rates.setdefault(stage, _Rate()).eta(done, total)
        now = time.monotonic()
        if done < total and now - self._last.get(stage, 0.0) < PROGRESS_EVERY_S:
            return
        self._last[stage] = now
        self.emit(
            {
                "event": "progress",
                "stage": stage,
                "done": done,
                "total": total,
                "unit": unit,
                "eta_s": eta,
            }
        )

    def loss(self, step: int, steps: int, loss: float) -> None:
        self.emit({"event": "loss", "step": step, "steps": steps, "loss": loss})

    def result(self, result: dict) -> None:
        self.emit({"event": "result", **result})

    def error(self, message: str, kind: str) -> None:
        self.emit({"event": "error", "message": message, "kind": kind})


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class TerminalReporter:
    """Lines and tqdm bars on stderr (stdout stays free, as with --json)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._bar = None
        self._bar_stage = ""

    def _say(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def plan(self, plan: dict) -> None:
        done = set(plan["done_stages"])
        self._say(
            f"{plan['model']} ({plan['architecture']}), budget {plan['budget']}, torch on "
            f"{plan['device']}; job folder {plan['job_dir']}\n"
            f"needs about {duration(plan['eta_s'])}, {format_size(plan['disk_bytes'])} of disk "
            f"and {format_size(plan['ram_bytes'])} of memory:"
        )
        for s in plan["stages"]:
            left = "done" if s["name"] in done else duration(s["eta_s"])
            self._say(f"  {s['name']:<9} {left}")

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def stage(self, name: str, status: str, seconds: float = 0.0) -> None:
        if status == "start":
            self._say(f"{name}...")
            return
        self._close_bar()
        self._say(f"{name}: " + ("done earlier" if status == "skipped" else duration(seconds)))

    def progress(self, stage: str, done: float, total: float, unit: str) -> None:
        from tqdm import tqdm

        if self._bar is None or self._bar_stage != stage:
            self._close_bar()
            self._bar = tqdm(total=total, initial=done, unit=f" {unit}", file=self.stream)
            self._bar_stage = stage
        self._bar.total = total
        self._bar.update(done - self._bar.n)

    def loss(self, step: int, steps: int, loss: float) -> None:
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    def result(self, result: dict) -> None:
        self._close_bar()
        speed = result["expected_speedup"]
        self._say(
            f"tau {result['tau']:.2f} vs n-gram {result['ngram_tau']:.2f} at block 16 on "
            "held-out answers"
            + (f"; expected speed-up here {speed:.2f}x" if speed is not None else "")
        )
        self._say(("installed: " if result["installed"] else "not installed: ") + result["reason"])
        self._say(f"drafter: {result['drafter_dir']}")

    def notice(self, message: str) -> None:
        self._say(f"note: {message}")

    def error(self, message: str, kind: str) -> None:
        self._close_bar()
        self._say(f"error: {message}")
