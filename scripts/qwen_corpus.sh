#!/usr/bin/env bash
# Issue 37, item 2: Qwen2.5-Coder-0.5B-Instruct's self-distilled corpus, resumable (each
# command appends answers by prompt key; rerun the script after an interruption).
#   1. 72 held-out answers (12 per evaluation set) by llama.cpp, one stream: the engine's own
#      greedy output, which `hyflash acceptance` walks (~11 min on 2 cores).
#   2. Training answers by the GGUF in torch, batched (bf16 where native, else fp32): GSM8K and
#      MBPP first (in-domain maths and code), then the whole shuffled prompt mix up to LIMIT
#      prompts. Measured on a 2-core AMX Xeon: 214 tok/s at 64 streams in bf16 against llama.cpp's
#      ~33 tok/s for one stream.
#   3. ShareGPT's own answers in this target's tokens (no generation; labelled at training time).
# Usage: [THREADS=1] scripts/qwen_corpus.sh [LIMIT]   (default 4000 prompts, about 1.1M answer
# tokens; THREADS=1 when the CPU is shared: two spinning threads stall each other then)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-4000}
hf=.venv/bin/hyflash
M=qwen2.5-coder-0.5b-instruct
gen=(--model $M --threads "${THREADS:-2}" --max-tokens 384)
$hf data generate "${gen[@]}" --split eval --per-set 12 --streams 1 --max-tokens 256
torch=(--generator torch --torch-dtype "${TORCH_DTYPE:-auto}" --streams "${STREAMS:-64}")
$hf data generate "${gen[@]}" "${torch[@]}" --sources gsm8k,mbpp
$hf data generate "${gen[@]}" "${torch[@]}" --limit "$limit"
$hf data conversations --model $M --limit 1000
