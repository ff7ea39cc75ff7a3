"""`hyflash speedup`: one command that makes a HyFlash drafter for a GGUF on this machine and
installs it for that model (the [train] extra; torch is imported only once the job runs).

Stages (engine/speedup/plan.STAGES); each resumes where it stopped after a kill or a
reboot (state in the job folder), and they are the project's own commands run in-process:
  plan      architecture check; this machine's throughput for the model (calibrate.py, cached
            per model and machine); time per stage, disk and memory (refused when short)
  answers   self-distillation: the model answers training prompts (our drafters' mix,
            engine/bench/corpora.py) with the faster generator measured here; plus ShareGPT's own
            answers to be labelled by the target (`hyflash data conversations`)
  heldout   held-out answers to evaluation prompts, llama.cpp single-stream greedy (the walk
            must equal the engine's decoding)
  features  target features of the training corpus (the faster source measured here)
  train     the shipped recipe (`hyflash train --causal-slots --copy-trust 0.2 --block-size
            16 --extra-corpus ...`), answers and steps by the budget
  export    `hyflash export --quantize int8 --keep-only int8`: the card pins the GGUF's sha256
  validate  `hyflash acceptance` of the drafter and n-gram lookup on the held-out answers at
            block 16, and the speed-up expected from this machine's verify costs
  install   into the user's drafters (engine/drafters/installed.py) if it beats n-gram at block 16
            (--install auto), else kept in the job folder for inspection

Job folder (--out; default <data dir>/speedup/<sha256[:16]>):
  job.json                  the GGUF the job belongs to (another GGUF's folder is refused)
  corpus/                   answers.jsonl, eval_answers.jsonl, sharegpt_answers.jsonl, unless
                            --corpus names a folder of them (e.g. data/distill/<model id>/)
  runs/features/            feature caches: the job runs inside its folder, where the
                            training commands' relative paths land
  <budget>/state.json       finished stages: seconds and results
  <budget>/train/, drafter/, validate.json   the run, the exported drafter, the walk
One job per model at a time: a lock in <data dir>/speedup/locks/. Ctrl-C and SIGTERM stop
cleanly (exit 130); a second job on a locked model exits 3; other errors exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from engine.events import EngineError, ModelLoadError
from engine.file_hash import file_sha256
from engine.speedup.job import Calibration, Job, model_lock, speedup_root
from engine.speedup.plan import (
    BUDGET_HELP,
    BUDGETS,
    STAGES,
    SpeedupError,
    check_architecture,
    check_resources,
    check_train_extra,
    choose_sources,
    inspect_gguf,
    ram_bytes,
    stage_disk_bytes,
    stage_seconds,
)
from engine.speedup.report import JsonReporter, TerminalReporter
from engine.speedup.stages import Pipeline

EXIT_ERROR, EXIT_LOCKED, EXIT_CANCELLED = 2, 3, 130
INSTALL_POLICIES = ("auto", "always", "never")


def parse_command(command: str, *flags: str, **options: object) -> argparse.Namespace:
    """A subcommand's options exactly as `hyflash` parses them: `command` (e.g. "data
    conversations"), bare flags, then --option value for each keyword. The job's stages run
    the data, training, export and acceptance commands through it."""
    from engine.commands import acceptance, training  # the subcommands the stages run

    parser = argparse.ArgumentParser(prog="hyflash")
    sub = parser.add_subparsers(dest="command", required=True)
    training.add_parser(sub)
    acceptance.add_parser(sub)
    argv = [*command.split(), *flags]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return parser.parse_args(argv)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM stops like Ctrl-C: at the next Python instruction


@contextlib.contextmanager
def _events_stream(json_mode: bool) -> Iterator[TextIO | None]:
    """With --json, stdout carries the events alone: the process's other output (prints,
    library chatter, C-level writes to fd 1) goes to stderr while the job runs."""
    if not json_mode:
        yield None
        return
    sys.stdout.flush()
    events = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield events
    finally:
        events.flush()
        os.dup2(events.fileno(), 1)
        events.close()


def cmd_speedup(args: argparse.Namespace) -> int:
    if args.project:  # a projection onto another machine: nothing runs here
        from engine.speedup.projection import cmd_project

        return cmd_project(args)
    args.threads = args.threads or _default_threads()
    with _events_stream(args.json) as events:
        reporter = JsonReporter(events) if events is not None else TerminalReporter()
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return _run(args, reporter)
        except SpeedupError as exc:
            reporter.error(str(exc), exc.kind)
            return EXIT_LOCKED if exc.kind == "locked" else EXIT_ERROR
        except ModelLoadError as exc:
            reporter.error(str(exc), "bad_model")
            return EXIT_ERROR
        except KeyboardInterrupt:
            reporter.error(
                "Stopped. Run the same command again to continue where it stopped.", "cancelled"
            )
            return EXIT_CANCELLED
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            reporter.error(f"The disk is full: {exc}. Free some space and run again.", "disk")
            return EXIT_ERROR
        except EngineError as exc:
            reporter.error(str(exc), "failed")
            return EXIT_ERROR
        except Exception as exc:  # a bug: the app still gets its last line
            traceback.print_exc()
            reporter.error(f"{type(exc).__name__}: {exc}", "failed")
            return EXIT_ERROR
        finally:
            signal.signal(signal.SIGTERM, previous)


def _default_threads() -> int:
    from engine.llama.target import default_threads

    return default_threads()


def _run(args: argparse.Namespace, reporter) -> int:
    from engine.models.resolve import resolve_target

    model_id, gguf = resolve_target(args.model)
    shape = inspect_gguf(gguf)
    check_architecture(shape, gguf)
    check_train_extra()
    sha = file_sha256(gguf)
    budget = BUDGETS[args.budget]
    folder = Path(args.out).expanduser().resolve() if args.out else speedup_root() / sha[:16]
    corpus = Path(args.corpus).expanduser().resolve() if args.corpus else folder / "corpus"
    job = Job(folder, corpus, budget)
    job.check_owner(sha)
    if job.notice:
        reporter.notice(job.notice)
    with model_lock(sha, folder):
        plan = {"model": model_id, "gguf": str(gguf), "gguf_sha256": sha}
        calib, choice, plan_s = _plan(args, reporter, job, shape, plan)
        if args.plan_only:
            return 0
        job.create(model_id, gguf, sha)
        pipeline = Pipeline(job, gguf, model_id, sha, calib, choice, args, reporter, parse_command)
        with contextlib.chdir(folder):  # the training commands' relative paths land here
            for stage in STAGES[1:]:
                _run_stage(job, stage, getattr(pipeline, stage), reporter, args)
        installed, check = job.stages["install"]["result"], job.stages["validate"]["result"]
        reporter.result(
            {
                "drafter_dir": installed["drafter_dir"],
                "tau": check["tau"],
                "ngram_tau": check["ngram_tau"],
                "installed": installed["installed"],
                "reason": installed["reason"],
                "stage_seconds": {"plan": plan_s}
                | {s: job.stages[s]["seconds"] for s in STAGES[1:]},
                "expected_speedup": check["expected_speedup"],
                "budget": budget.name,
                "job_dir": str(folder),
            }
        )
    return 0


def _plan(args: argparse.Namespace, reporter, job: Job, shape, plan: dict) -> tuple:
    """Refuse what this machine cannot hold, calibrate (once per model and machine), report
    the plan; (calibration, chosen sources, seconds spent)."""
    from engine.training.torch_target import resolve_device

    budget = job.budget
    remaining = [s for s in STAGES if s not in job.stages]
    disk = stage_disk_bytes(budget, shape)
    check_resources(sum(disk[s] for s in remaining), ram_bytes(shape), job.dir)
    device = resolve_device(args.device)
    start = time.perf_counter()
    calibration = Calibration(plan["gguf_sha256"], device, args.threads)
    calib = calibration.known()
    if calib is None:
        reporter.stage("plan", "start")
        calib = calibration.measure(
            Path(plan["gguf"]),
            lambda done, total: reporter.progress("plan", done, total, "measurements"),
        )
        reporter.stage("plan", "done", time.perf_counter() - start)
    else:
        reporter.stage("plan", "skipped", calib["seconds"])
    have = job.corpus()
    choice = choose_sources(budget, have, calib)
    eta = stage_seconds(budget, have, calib, choice)
    done = ["plan", *(s for s in STAGES if s in job.stages)]
    reporter.plan(
        plan
        | {
            "architecture": shape.architecture,
            "budget": budget.name,
            "device": device,
            "job_dir": str(job.dir),
            "stages": [{"name": s, "eta_s": eta[s]} for s in STAGES],
            "eta_s": sum(eta[s] for s in STAGES if s not in done),
            "disk_bytes": sum(disk[s] for s in remaining),
            "ram_bytes": ram_bytes(shape),
            "done_stages": done,
            "generator": choice["generator"],
            "feature_source": choice["features"],
        }
    )
    return calib, choice, time.perf_counter() - start


def _run_stage(job: Job, stage: str, fn: Callable[[], dict], reporter, args) -> None:
    done = job.stages.get(stage)
    # the install decision follows this run's --install, not an earlier run's
    if done is not None and (stage != "install" or done["result"]["policy"] == args.install):
        reporter.stage(stage, "skipped", done["seconds"])
        return
    reporter.stage(stage, "start")
    start = time.perf_counter()
    result = fn()
    job.finish(stage, time.perf_counter() - start, result)
    reporter.stage(stage, "done", job.stages[stage]["seconds"])
    if args.pause_after == stage:  # tests: a job to kill at a known point
        while True:
            time.sleep(3600)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "speedup",
        help="train and install a HyFlash drafter for a model on this machine (torch; resumable)",
    )
    p.add_argument("--model", default=None, help="catalog id or .gguf path (default: embedded)")
    p.add_argument("--budget", default="quick", choices=list(BUDGETS), help=BUDGET_HELP)
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda", "mps"],
        help="where the torch side (answers, features) runs; llama.cpp uses its own build",
    )
    p.add_argument(
        "--out", default=None, help="job folder (default: <data dir>/speedup/<sha256[:16]>)"
    )
    p.add_argument(
        "--corpus",
        default=None,
        help="folder of answers.jsonl, eval_answers.jsonl and sharegpt_answers.jsonl to read "
        "and extend (default: in the job folder), e.g. data/distill/<model id>",
    )
    p.add_argument(
        "--install",
        default="auto",
        choices=INSTALL_POLICIES,
        help="auto: install only if the drafter beats n-gram lookup at block 16 on the "
        "held-out answers; always: install regardless (tests); never: keep it in the job folder",
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--plan-only", action="store_true", help="print the plan and stop")
    p.add_argument(
        "--project",
        default=None,
        metavar="PROFILE",
        help="print the plan's stage times PROJECTED onto another device from a profile "
        "(docs/bench/curves/projection-*.json: published rates + stated assumptions); "
        "runs and measures nothing",
    )
    p.add_argument("--json", action="store_true", help="JSON lines on stdout (the app)")
    p.add_argument("--pause-after", default=None, choices=STAGES, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_speedup)
