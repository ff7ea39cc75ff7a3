"""Which llama.cpp kernels are safe and exact for a model on this machine.

Two things differ from machine to machine and from model to model, and neither can be assumed:
- llama.cpp's extra weight buffer types (CPU repack, AMX) can kill the process: on some Intel
  VMs the AMX matmul faults with SIGILL at the first decode.
- Batch invariance: ggml-cpu multiplies K-quant weights (Q4_K, Q6_K, ...) with a tiled kernel
  from 8 rows on and a per-row dot product below, so the rows of an 8-token verify differ in
  the last bits from single-token decodes, and greedy speculative output can leave plain
  decoding's. Q4_0/Q4_1/Q8_0 take one kernel for every row count.

So before a model is first used, a child process (a crash or a hang costs the child, not the
app) loads it with extra buffer types on, decodes, and compares the rows of B-token decodes
with B single-token decodes bit for bit (engine.bench.kernel_probe); if that fails or is less exact,
the same with them off. The verdict is remembered per model file, llama.cpp build, CPU and
thread count. The engine then verifies whole blocks where rows are exact up to its largest
block, and in chunks of the exact size otherwise ("exact" mode), or whole blocks anyway
("fast" mode: the target's distribution up to the rounding of the many-row kernels, as in
llama.cpp's own speculative decoding).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.atomic_files import read_json, write_json
from engine.events import ModelLoadError
from engine.file_hash import file_sha256, known_sha256
from engine.options import EXTRA_BUFTS, MAX_BLOCK_SIZE, VERIFY_MODES
from engine.paths import cache_root

ENV_EXTRA_BUFTS = "HYFLASH_EXTRA_BUFTS"  # on | off: force extra buffer types either way
ENV_VERIFY = "HYFLASH_VERIFY"  # auto | exact | fast
ENV_CHECK = "HYFLASH_KERNEL_CHECK"  # off: no child check (exactness then unknown)
MAX_CHECK_ROWS = MAX_BLOCK_SIZE  # the engine never verifies more
EXACT_MODE_MIN_ROWS = 4  # below this, chunked verification would cost most of the gain
CHECK_FORMAT = 1  # bump when what the check measures changes: old verdicts are then ignored
# Environment that changes which CPU kernels run, so it is part of the verdict's key.
_KERNEL_ENV = ("GGML_CPU_TILED_MM", "GGML_CPU_TILED_MM_FORCE", "GGML_CPU_DISABLE_FUSION")


@dataclass(frozen=True)
class KernelConfig:
    extra_bufts: bool = True  # llama_model_params.use_extra_bufts (CPU repack, AMX)

    @property
    def label(self) -> str:
        return f"extra buffer types {'on' if self.extra_bufts else 'off'}"


@dataclass(frozen=True)
class CheckResult:
    """What the child found for one configuration."""

    config: KernelConfig
    outcome: str  # "works" | "dies" | "hangs" | "fails"
    exact_upto: int = 0  # every B <= this gave rows bit-identical to single-token decodes
    checked_rows: int = 0  # the largest B compared
    max_abs_diff: float | None = None  # at the first B whose rows differ
    decode_ms: dict[int, float] = field(default_factory=dict)  # T(n), median
    detail: str = ""  # signal, error or stall description: one line
    # for "fails", what the child reported (kernel_probe's error kinds): "load" (llama.cpp
    # would not load the model file), "error" (anything else); "" when it reported nothing
    kind: str = ""

    @property
    def works(self) -> bool:
        return self.outcome == "works"

    def describe(self) -> str:
        if self.outcome == "dies":
            return f"{self.config.label}: llama.cpp dies here ({self.detail})"
        if self.outcome == "hangs":
            return f"{self.config.label}: llama.cpp hangs here ({self.detail})"
        if self.outcome == "fails":
            return f"{self.config.label}: the check failed ({self.detail})"
        if self.exact_upto >= self.checked_rows:
            exact = f"exact at every block up to {self.checked_rows}"
        else:
            exact = (
                f"exact up to B={self.exact_upto}; from B={self.exact_upto + 1} rows differ "
                f"(max |logit diff| {self.max_abs_diff:.3g})"
            )
        return f"{self.config.label}: works, {exact}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CheckResult:
        return cls(
            config=KernelConfig(**d["config"]),
            outcome=str(d["outcome"]),
            exact_upto=int(d["exact_upto"]),
            checked_rows=int(d["checked_rows"]),
            max_abs_diff=d.get("max_abs_diff"),
            decode_ms={int(k): float(v) for k, v in d.get("decode_ms", {}).items()},
            detail=str(d.get("detail", "")),
            kind=str(d.get("kind", "")),
        )


@dataclass(frozen=True)
class KernelVerdict:
    """The configuration to load a model with, and how exact its batched decodes are."""

    config: KernelConfig
    exact_upto: int | None  # None: not checked
    results: tuple[CheckResult, ...] = ()
    forced: str = ""  # what forced the configuration, "" when the check chose it
    from_cache: bool = False

    def verify_plan(self, requested: str) -> VerifyPlan:
        """How the engine verifies blocks under mode `requested` (auto | exact | fast): sized
        for the largest block any generation may ask for (options.MAX_BLOCK_SIZE, a fixed
        block size reaches it), not for the auto chooser's smaller cap."""
        if requested not in VERIFY_MODES:
            raise ValueError(f"verify mode must be one of {', '.join(VERIFY_MODES)}")
        exact = self.exact_upto
        if exact is None:
            return VerifyPlan("fast", None, "the kernel check is off: exactness was not checked")
        if exact >= MAX_BLOCK_SIZE:
            return VerifyPlan(
                "exact", None, f"batched rows are bit-identical to single decodes up to B={exact}"
            )
        if requested == "fast" or (requested == "auto" and exact < EXACT_MODE_MIN_ROWS):
            why = "asked for" if requested == "fast" else f"exact only up to B={exact}, so"
            return VerifyPlan(
                "fast",
                None,
                f"{why} verifying whole blocks: the output is the target's up to the rounding "
                f"of llama.cpp's many-row kernels (rows differ from B={exact + 1})",
            )
        return VerifyPlan("exact", exact, f"exact up to B={exact}, verifying in chunks of {exact}")

    def summary(self) -> list[str]:
        lines = [r.describe() for r in self.results]
        chosen = f"using {self.config.label}"
        if self.forced:
            chosen += f" ({self.forced})"
        return [*lines, chosen]

    def to_dict(self) -> dict:
        return {
            "config": asdict(self.config),
            "exact_upto": self.exact_upto,
            "results": [r.to_dict() for r in self.results],
            "forced": self.forced,
        }

    @classmethod
    def from_dict(cls, d: dict, *, from_cache: bool = False) -> KernelVerdict:
        exact = d.get("exact_upto")
        return cls(
            config=KernelConfig(**d["config"]),
            exact_upto=None if exact is None else int(exact),
            results=tuple(CheckResult.from_dict(r) for r in d.get("results", [])),
            forced=str(d.get("forced", "")),
            from_cache=from_cache,
        )


@dataclass(frozen=True)
class VerifyPlan:
    mode: str  # "exact" | "fast"
    chunk: int | None  # rows per target decode when verifying; None = whole blocks
    reason: str


# ---------------------------------------------------------------------------------------------
# Running one check in a child process


def child_command() -> list[str]:
    """How to start the check: the frozen app dispatches a flag in main.py."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--kernel-check"]
    return [sys.executable, "-m", "engine.bench.kernel_probe"]


def run_check(
    model_path: str | os.PathLike[str],
    config: KernelConfig,
    *,
    n_threads: int,
    n_gpu_layers: int = 0,
    max_rows: int = MAX_CHECK_ROWS,
    stall_s: float = 30.0,
    command: Sequence[str] | None = None,
) -> CheckResult:
    """Check one configuration in a child. The child writes one JSON line per step; one that
    writes nothing for stall_s seconds (longer while it loads) is killed and counts as hung."""
    with tempfile.TemporaryDirectory(prefix="hyflash-kernels-") as tmp:
        out = Path(tmp) / "check.jsonl"
        err = Path(tmp) / "stderr.txt"
        argv = [
            *(command or child_command()),
            str(model_path),
            "--out",
            str(out),
            "--extra-bufts",
            "on" if config.extra_bufts else "off",
            "--threads",
            str(n_threads),
            "--gpu-layers",
            str(n_gpu_layers),
            "--max-rows",
            str(max_rows),
        ]
        # loading reads the whole file once: allow ~50 MB/s on top of the stall limit
        load_s = stall_s + Path(model_path).stat().st_size / 50e6
        with err.open("wb") as err_file:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file)
            hung = _wait_while_progressing(proc, out, stall_s, load_s)
        steps = _read_steps(out)
        stderr = err.read_text(encoding="utf-8", errors="replace").strip()
    # a traceback's last line names the error; the rest is no use to a person
    stderr_tail = stderr.splitlines()[-1][-300:] if stderr else ""
    if hung:
        last = steps[-1]["step"] if steps else "start"
        return CheckResult(config, "hangs", detail=f"no progress for {hung:.0f} s after '{last}'")
    rc = proc.returncode
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        where = steps[-1]["step"] if steps else "start"
        return CheckResult(config, "dies", detail=f"{name} after '{where}'")
    done = next((s for s in steps if s.get("step") == "done"), None)
    error = next((s for s in steps if s.get("step") == "error"), None)
    if error is not None:
        return CheckResult(
            config, "fails", detail=str(error.get("message", "")), kind=str(error.get("kind", ""))
        )
    if rc != 0 or done is None:
        return CheckResult(config, "fails", detail=f"exit {rc}: {stderr_tail or 'no output'}")
    return CheckResult(
        config,
        "works",
        exact_upto=int(done["exact_upto"]),
        checked_rows=int(done["checked_rows"]),
        max_abs_diff=done.get("max_abs_diff"),
        decode_ms={int(k): float(v) for k, v in done.get("decode_ms", {}).items()},
    )


def _wait_while_progressing(
    proc: subprocess.Popen, out: Path, stall_s: float, load_s: float
) -> float:
    """Wait for the child; kill it when it stops writing. Returns the stall (0 = finished)."""
    last_size, last_change, limit = -1, time.monotonic(), load_s
    while proc.poll() is None:
        time.sleep(0.05)
        size = out.stat().st_size if out.exists() else 0
        now = time.monotonic()
        if size != last_size:
            if last_size > 0:
                limit = stall_s  # the model is loaded once the second line is there
            last_size, last_change = size, now
        elif now - last_change > limit:
            proc.kill()
            proc.wait()
            return now - last_change
    return 0.0


def _read_steps(path: Path) -> list[dict]:
    steps = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                steps.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut short by a crash
    return steps


# ---------------------------------------------------------------------------------------------
# The decision, its overrides and its cache


def forced_config(extra_bufts: bool | None = None) -> tuple[KernelConfig | None, str]:
    """(config, why) when a setting or HYFLASH_EXTRA_BUFTS forces one; the argument wins."""
    if extra_bufts is not None:
        return KernelConfig(extra_bufts), "set in settings"
    value = os.environ.get(ENV_EXTRA_BUFTS, "").strip().lower()
    if value in ("on", "1", "true", "yes"):
        return KernelConfig(True), f"{ENV_EXTRA_BUFTS}={value}"
    if value in ("off", "0", "false", "no"):
        return KernelConfig(False), f"{ENV_EXTRA_BUFTS}={value}"
    return None, ""


def requested_verify_mode(mode: str | None = None) -> str:
    """The verify mode asked for: the argument, else HYFLASH_VERIFY, else auto."""
    value = (mode or os.environ.get(ENV_VERIFY) or "auto").strip().lower()
    if value not in VERIFY_MODES:
        raise ValueError(f"verify mode must be one of {', '.join(VERIFY_MODES)}, not {value!r}")
    return value


def check_enabled() -> bool:
    return os.environ.get(ENV_CHECK, "").strip().lower() not in ("off", "0", "false", "no")


def choose(results: Sequence[CheckResult]) -> CheckResult | None:
    """The most exact configuration that works; on a tie, extra buffer types on (they exist
    because they are faster)."""
    working = [r for r in results if r.works]
    if not working:
        return None
    return max(working, key=lambda r: (r.exact_upto, r.config.extra_bufts))


def verdicts_dir() -> Path:
    return cache_root() / "kernels"


def verdict_key(model_path: Path, *, n_threads: int, n_gpu_layers: int) -> str:
    """Model content, llama.cpp build, CPU, threads, offload and kernel environment."""
    import llama_cpp

    from engine.llama.backends import probe

    cpu = probe().cpu
    parts = {
        "format": CHECK_FORMAT,
        "model_sha256": file_sha256(model_path),
        "llama_cpp": getattr(llama_cpp, "__version__", "?"),
        "system_info": llama_cpp.llama_print_system_info().decode(errors="replace"),
        "cpu": [cpu.model, cpu.arch, list(cpu.flags)],
        "threads": n_threads,
        "gpu_layers": n_gpu_layers,
        "env": {k: os.environ.get(k) for k in _KERNEL_ENV},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _remember(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, data)
    except OSError:
        pass  # a read-only cache costs a re-check next time, nothing else


def load_cached(key: str) -> KernelVerdict | None:
    """A remembered verdict, or None when there is none or it is damaged."""
    data = read_json(verdicts_dir() / f"{key}.json")
    if data is None:
        return None
    try:
        return KernelVerdict.from_dict(data, from_cache=True)
    except (KeyError, TypeError, ValueError):
        return None


def cached_verdict(
    model_path: str | os.PathLike[str], *, n_threads: int, n_gpu_layers: int = 0
) -> KernelVerdict | None:
    """The verdict remembered for this file on this machine, or None when it was never
    checked here. Runs no check and hashes nothing: a file whose digest is not known yet has
    no verdict either, since checking it computed the digest."""
    path = Path(model_path)
    if known_sha256(path) is None:
        return None
    return load_cached(verdict_key(path, n_threads=n_threads, n_gpu_layers=n_gpu_layers))


def decide(
    model_path: str | os.PathLike[str],
    *,
    n_threads: int,
    n_gpu_layers: int = 0,
    extra_bufts: bool | None = None,
    progress: Callable[[str], None] | None = None,
    command: Sequence[str] | None = None,
    stall_s: float = 30.0,
) -> KernelVerdict:
    """The configuration to load `model_path` with on this machine (checked once, then cached).
    extra_bufts forces that setting (as HYFLASH_EXTRA_BUFTS does); the check still runs to
    learn how exact it is. Raises ModelLoadError, in one line, for a damaged file (before any
    check), a file llama.cpp loads in no configuration, or when it works in none here."""
    path = Path(model_path)
    forced, why = forced_config(extra_bufts)
    if not check_enabled():
        return KernelVerdict(forced or KernelConfig(True), None, forced=why or f"{ENV_CHECK}=off")
    key = verdict_key(path, n_threads=n_threads, n_gpu_layers=n_gpu_layers)
    cached = load_cached(key)
    candidates = [forced] if forced else [KernelConfig(True), KernelConfig(False)]
    known = {r.config: r for r in cached.results} if cached else {}
    if candidates[0] in known:  # checked in order, so what follows it was checked if needed
        pick = choose([known[c] for c in candidates if c in known])
        if pick is not None:
            return KernelVerdict(pick.config, pick.exact_upto, cached.results, why, True)
    from engine.llama.gguf_file import check_gguf_data

    check_gguf_data(path)  # a damaged file is named as such, not blamed on the machine
    if progress is not None:
        progress("checking this CPU's llama.cpp kernels (once per model)")
    results: list[CheckResult] = []
    for config in candidates:
        result = run_check(
            path,
            config,
            n_threads=n_threads,
            n_gpu_layers=n_gpu_layers,
            command=command,
            stall_s=stall_s,
        )
        results.append(result)
        if result.works and result.exact_upto >= result.checked_rows:
            break  # exact at every block size: nothing to gain from checking further
    pick = choose(results)
    if pick is None and all(r.kind == "load" for r in results):
        raise ModelLoadError(results[0].detail)  # the file, whatever the kernels
    if pick is None:
        raise ModelLoadError(
            f"llama.cpp cannot run {path.name} on this machine: "
            + "; ".join(r.describe() for r in results)
        )
    # keep what an earlier check found for configurations not checked now
    checked = {r.config for r in results}
    kept = [r for r in known.values() if r.config not in checked]
    verdict = KernelVerdict(pick.config, pick.exact_upto, (*results, *kept), why)
    _remember(verdicts_dir() / f"{key}.json", verdict.to_dict())
    return verdict


# ---------------------------------------------------------------------------------------------
# Command-line options (generate, chat, bench)


def add_kernel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--extra-bufts",
        choices=EXTRA_BUFTS,
        default="auto",
        help="llama.cpp's extra weight buffer types (CPU repack, AMX); auto: the kernel check "
        "decides (also $HYFLASH_EXTRA_BUFTS)",
    )
    p.add_argument(
        "--verify-mode",
        choices=VERIFY_MODES,
        default=None,
        help="exact: verify in chunks whose rows equal single-token decodes; fast: whole "
        "blocks (default: $HYFLASH_VERIFY, else auto)",
    )


def kernel_kwargs(args: argparse.Namespace) -> dict:
    """Engine keyword arguments from add_kernel_args' options."""
    extra = getattr(args, "extra_bufts", "auto")
    return {
        "extra_bufts": None if extra == "auto" else extra == "on",
        "verify_mode": getattr(args, "verify_mode", None),
    }
