#!/usr/bin/env bash
# Issue 16, item 5: the HyFlash drafter shipped for Gemma-3-270M (catalog id gemma-3-270m),
# trained with the recipe of the SmolLM2 drafter (v4: causal slots, copy trust 0.2, block 16,
# INT8) on Gemma's own data, every step resumable (rerun the script after an interruption):
#   1. the 72 held-out answers (12 per eval set, one llama.cpp stream: the engine's own
#      greedy output, which the walk replays)
#   2. self-distilled answers to the in-domain training prompts (GSM8K, MBPP), 8 streams
#   3. ShareGPT conversations with their own answers, in Gemma's tokens (labelled by the
#      target at training time)
#   4. training (features and labels from llama.cpp), export INT8 into OUT, and the walk
#      over the held-out answers beside n-gram lookup
# Usage: scripts/gemma_drafter.sh [ANSWERS] [CONVERSATIONS] [STEPS] [OUT]
#        (defaults: 400 400 1500 runs/export/gemma-hyflash)
set -euo pipefail
cd "$(dirname "$0")/.."
answers=${1:-400}
conversations=${2:-400}
steps=${3:-1500}
out=${4:-runs/export/gemma-hyflash}
hf=.venv/bin/hyflash
model=gemma-3-270m
data=data/distill/$model
$hf data generate --model $model --split eval --per-set 12 --streams 1 --max-tokens 256 --threads 2
$hf data generate --model $model --sources gsm8k,mbpp --limit "$answers" --streams 8 \
    --max-tokens 256 --threads 2
$hf data conversations --model $model --limit "$conversations"
$hf train --model $model --feature-source llama --causal-slots --copy-trust 0.2 \
    --extra-corpus $data/sharegpt_answers.jsonl --block-size 16 --steps "$steps" \
    --eval-every 250 --threads 2 --llama-threads 2 --out runs/gemma-hyflash
$hf export --run runs/gemma-hyflash --checkpoint best.pt --model $model --out "$out" \
    --name hyflash-gemma-3-270m --quantize int8 --keep-only int8
$hf acceptance --model $model --drafter ngram --drafter "HyFlash=$out" --blocks 4,8,16 \
    --threads 2 --out docs/bench/acceptance-gemma
