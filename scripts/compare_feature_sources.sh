#!/usr/bin/env bash
# Issue 16, item 1: does a drafter trained on torch-side features (the GGUF in transformers,
# bf16 where the CPU has it) walk the held-out llama.cpp answers as well as one trained on
# llama.cpp's features, at equal tokens and steps? Same answers, same seed, same recipe.
# Usage: scripts/compare_feature_sources.sh [ANSWERS] [STEPS] [OUT]   (defaults: 150 300 runs/feature-source)
set -euo pipefail
cd "$(dirname "$0")/.."
answers=${1:-150}
steps=${2:-300}
out=${3:-runs/feature-source}
hf=.venv/bin/hyflash
mkdir -p "$out"
# features first, one source at a time (each train call fills its cache, then trains)
for src in llama torch; do
    $hf train --out "$out/$src" --feature-source "$src" --max-answers "$answers" \
        --steps "$steps" --eval-every "$steps" --block-size 16 --threads 2 --quiet \
        > "$out/$src.log" 2>&1
    $hf export --run "$out/$src" --checkpoint checkpoint.pt --out "$out/$src-drafter" \
        --name "fs-$src" --quantize int8 --keep-only int8 >> "$out/$src.log" 2>&1
done
$hf acceptance --drafter "llama.cpp features=$out/llama-drafter" \
    --drafter "torch features=$out/torch-drafter" --drafter ngram=ngram \
    --blocks 4,8,16 --threads 2 --out "$out/acceptance"
