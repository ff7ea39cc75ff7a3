"""Whether this llama.cpp build can hand out a model's layer inputs (fused-layer features).

libllama records layer inputs only in the graphs of some architectures; asking for them on
another (qwen2 in llama-cpp-python 0.3.36) fails a GGML_ASSERT, which aborts the whole
process: no exception to catch. So the question is asked once per model file, llama.cpp
build and set of layers, in a child process, and the answer is remembered.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from engine.atomic_files import read_json, write_json
from engine.file_hash import file_sha256
from engine.paths import cache_root

CHECK_TIMEOUT_S = 300.0  # one model load: minutes only for a huge file on a slow disk


def child_command() -> list[str]:
    """How to start the check: the frozen app dispatches a flag in main.py."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--layer-capture-check"]
    return [sys.executable, "-m", "engine.llama.layer_capture"]


def _key(model_path: Path, layers: Sequence[int], extra_bufts: bool) -> str:
    import llama_cpp

    parts = {
        "model_sha256": file_sha256(model_path),
        "llama_cpp": getattr(llama_cpp, "__version__", "?"),
        "layers": sorted(int(x) for x in layers),
        "extra_bufts": extra_bufts,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def layer_capture_works(
    model_path: str | os.PathLike[str],
    layers: Sequence[int],
    *,
    extra_bufts: bool,
    command: Sequence[str] | None = None,
) -> bool:
    """True when decoding with these layers' inputs captured works on this model, loaded with
    the kernel configuration the target uses (remembered per file, build, layers and
    configuration; a read-only cache only costs a re-check)."""
    path = Path(model_path)
    record = cache_root() / "layer-capture" / f"{_key(path, layers, extra_bufts)}.json"
    known = read_json(record)
    if known is not None and isinstance(known.get("works"), bool):
        return known["works"]
    argv = [
        *(command or child_command()),
        str(path),
        "--layers",
        ",".join(map(str, layers)),
        "--extra-bufts",
        "on" if extra_bufts else "off",
    ]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False  # not remembered: a slow disk today says nothing about the build
    works = proc.returncode == 0
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        write_json(record, {"works": works, "returncode": proc.returncode})
    except OSError:
        pass
    return works


def _decode_with_capture(model_path: str, layers: Sequence[int], extra_bufts: bool) -> int:
    """Load the model as the engine does, capture `layers`, decode two tokens: returns 0, or
    llama.cpp aborts the process."""
    from engine.llama.kernels import KernelConfig
    from engine.llama.target import LlamaTarget

    target = LlamaTarget(
        model_path, n_ctx=64, n_batch=8, n_threads=1, kernels=KernelConfig(extra_bufts)
    )
    try:
        target.set_features(True)
        target.set_capture_unchecked(layers)
        target.decode([1, 2])  # ids every vocabulary has
        return 0
    finally:
        target.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--layers", required=True, help="comma-separated layer ids")
    p.add_argument("--extra-bufts", choices=("on", "off"), default="on")
    args = p.parse_args(argv)
    layers = [int(x) for x in args.layers.split(",")]
    return _decode_with_capture(args.model, layers, args.extra_bufts == "on")


if __name__ == "__main__":
    sys.exit(main())
