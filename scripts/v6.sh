#!/usr/bin/env bash
# Issue 16: v6, v5 annealed on in-domain answers. v5 (scripts/v5.sh) trains on the whole
# corpus, where the maths and code answers (GSM8K, MBPP) are 14% of the sequences drawn (52%
# in v4's smaller corpus), and walked level with v4 (2.64 at B=16): repeats up, novel text and
# GSM8K / MBPP down. At the curve recipe in-domain answers were the only data that moved
# novel-text acceptance (session 13). v6 continues v5's run from its last checkpoint for EXTRA
# more steps on the same data with GSM8K and MBPP drawn WEIGHT times as often as the rest (49%
# of the draws at 6, v4's share), the learning rate continuing the cosine of v5's schedule
# stretched to the new total (~2.9e-4 falling to 1e-4). Then export (the last checkpoint:
# validation is the unweighted mix) and the held-out walk beside v5 and n-gram lookup.
# Cost: 1.1-1.7 s per step in fp32 on a 2-core AVX2 EPYC (1000 steps took 25 minutes); features come
# from v5's cache. Needs runs/v5-hyflash/checkpoint.pt (scripts/v5.sh).
# Usage: scripts/v6.sh [EXTRA] [WEIGHT]   (defaults: 1000 6; FEATURE_DTYPE as v5.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-1000}
weight=${2:-6}
base=${BASE:-runs/v5-hyflash}
out=${OUT:-runs/v6-hyflash}
walk_out=${WALK_OUT:-docs/bench/acceptance-v6}
feature_dtype=${FEATURE_DTYPE:-auto}
hf=.venv/bin/hyflash
D=data/distill/smollm2-135m-instruct
base_steps=$(.venv/bin/python -c "import json; print(json.load(open('$base/train_config.json'))['steps'])")
mkdir -p "$out"
[ -e "$out/checkpoint.pt" ] || cp "$base/checkpoint.pt" "$out/checkpoint.pt"
$hf train --causal-slots --copy-trust 0.2 --max-answers 10285 \
    --extra-corpus $D/sharegpt_answers.jsonl --block-size 16 --steps $((base_steps + extra)) \
    --eval-every 250 --threads 2 --feature-source torch --torch-dtype "$feature_dtype" --precision auto \
    --source-weight "gsm8k=$weight,mbpp=$weight" --out "$out" >> "$out.log" 2>&1
$hf export --run "$out" --checkpoint checkpoint.pt --out "runs/export/$(basename "$out")" \
    --name hyflash-smollm2-135m --quantize int8 --keep-only int8 >> "$out.log" 2>&1
$hf acceptance --drafter ngram --drafter "HyFlash v5=runs/export/$(basename "$base")" \
    --drafter "HyFlash v6=runs/export/$(basename "$out")" --blocks 4,8,16 --threads 2 \
    --out "$walk_out"
