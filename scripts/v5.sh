#!/usr/bin/env bash
# Issue 16: v5, v4's recipe (causal slots, copy trust 0.2, block 16, d=384 x 1, Mamba-2 memory,
# copy path, INT8) on the grown corpus: the first 10,285 answers of answers.jsonl (all it held
# when it passed issue 16's 2M: 2.88M answer tokens; the file may grow past them) plus the 419
# labelled ShareGPT conversations, STEPS steps. Features from the torch-side target and the
# training forward in bf16 where this CPU runs bf16 natively (AMX or AVX512-BF16), else fp32.
# Cost on 2 cores: features of 3.77M tokens ~45 min in bf16 on an AMX Xeon (~2.3 h in fp32 on
# an AVX2 EPYC, 450 tok/s with batches sorted by length), then ~0.65 s (bf16, AMX) to 1.1-1.4 s
# (fp32, AVX2 EPYC) per step. The feature cache (runs/features/) and the checkpoint resume
# across sessions where runs/ is kept.
# Training resumes from runs/v5-hyflash/checkpoint.pt, so an interrupted run continues when
# the script is run again. Then export (best validation checkpoint) and the held-out walk
# beside the shipped v4 and n-gram lookup.
# Usage: scripts/v5.sh [STEPS] [OUT]   (defaults: 6000 runs/v5-hyflash)
# A smoke run of the whole pipeline: ANSWERS=40 WALK_OUT=runs/v5-smoke-walk scripts/v5.sh 20 runs/v5-smoke
# FEATURE_DTYPE=fp32 pins the torch features' dtype (default auto), so a feature cache begun in
# fp32 on one CPU kind (runs/features/torch-fp32) continues on another instead of restarting.
# DRAFTER_ARGS adds train arguments (a capacity variant: "--layers 2" or "--d-model 576") and
# LABEL names the new drafter in the walk, which then walks v5 beside it too:
# FEATURE_DTYPE=fp32 DRAFTER_ARGS="--layers 2" LABEL="HyFlash v5, 2 layers" \
#     WALK_OUT=docs/bench/acceptance-v5-2layers scripts/v5.sh 3000 runs/v5-2layers
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6000}
out=${2:-runs/v5-hyflash}
answers=${ANSWERS:-10285}
walk_out=${WALK_OUT:-docs/bench/acceptance-v5}
feature_dtype=${FEATURE_DTYPE:-auto}
drafter_args=${DRAFTER_ARGS:-}
label=${LABEL:-HyFlash v5}
hf=.venv/bin/hyflash
D=data/distill/smollm2-135m-instruct
mkdir -p "$(dirname "$out")"
$hf train --causal-slots --copy-trust 0.2 --max-answers "$answers" \
    --extra-corpus $D/sharegpt_answers.jsonl --block-size 16 --steps "$steps" --eval-every 500 \
    --threads 2 --feature-source torch --torch-dtype "$feature_dtype" --precision auto \
    $drafter_args --out "$out" \
    >> "$out.log" 2>&1
$hf export --run "$out" --checkpoint best.pt --out "runs/export/$(basename "$out")" \
    --name hyflash-smollm2-135m --quantize int8 --keep-only int8 >> "$out.log" 2>&1
baseline=()
[ "$label" = "HyFlash v5" ] || baseline=(--drafter "HyFlash v5=runs/export/v5-hyflash")
$hf acceptance --drafter ngram --drafter "HyFlash v4 (shipped)=hyflash" "${baseline[@]}" \
    --drafter "$label=runs/export/$(basename "$out")" --blocks 4,8,16 --threads 2 \
    --out "$walk_out"
