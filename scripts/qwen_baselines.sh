#!/usr/bin/env bash
# Issue 37, items 3 and 5: baselines for the shipped Qwen2.5-Coder drafter at its exact data and
# steps (the thorough budget of `scripts/qwen_drafter.sh`: the corpus's first 2,400 answers plus
# the 1,000 labelled ShareGPT conversations, block 16, 3,000 steps, torch-fp32 features), run
# inside the speedup job's folder so they read the feature cache the job filled:
#   full      full attention over every entry (DFlash-style), no memory
#   vocab8k   the shipped recipe with an 8,192-id draft vocabulary (shipped: 16,384)
#   vocab32k  the same with 32,768 ids
# each exported INT8, then walked with the shipped drafter and n-gram lookup on the 72
# held-out answers at B = 4 / 8 / 16. Training resumes from runs/qwen-NAME/checkpoint.pt after
# an interruption; a finished run only re-exports. About an hour of 2 cores per variant.
# Usage: scripts/qwen_baselines.sh [VARIANT ...]   (default: full)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
M=qwen2.5-coder-0.5b-instruct
D=$root/data/distill/$M
job=$root/runs/speedup-$M
hf=$root/.venv/bin/hyflash
variants=("$@")
if [ ${#variants[@]} -eq 0 ]; then
    variants=(full)
fi
walk=(--drafter ngram --drafter "HyFlash (shipped)=$root/resources/drafters/hyflash-qwen2.5-coder-0.5b")
cd "$job"  # the job's relative feature caches (runs/features/) are found from here
for name in "${variants[@]}"; do
    case $name in
        full) args=(--attention full --memory none --draft-vocab 16384); label="full attention" ;;
        vocab8k) args=(--draft-vocab 8192); label="HyFlash, 8K draft vocabulary" ;;
        vocab32k) args=(--draft-vocab 32768); label="HyFlash, 32K draft vocabulary" ;;
        *) echo "unknown variant $name" >&2; exit 2 ;;
    esac
    $hf train --model $M "${args[@]}" --causal-slots --copy-trust 0.2 --block-size 16 \
        --corpus "$D/answers.jsonl" --max-answers 2400 --extra-corpus "$D/sharegpt_answers.jsonl" \
        --max-len 1024 --steps 3000 --eval-every 250 --threads 2 --feature-source torch \
        --torch-dtype fp32 --out "runs/qwen-$name" >> "runs/qwen-$name.log" 2>&1
    $hf export --model $M --run "runs/qwen-$name" --checkpoint best.pt \
        --out "runs/export/qwen-$name" --name "qwen-$name" --quantize int8 --keep-only int8 \
        >> "runs/qwen-$name.log" 2>&1
    walk+=(--drafter "$label=$job/runs/export/qwen-$name")
done
cd "$root"
$hf acceptance --model $M --answers "$D/eval_answers.jsonl" "${walk[@]}" --blocks 4,8,16 \
    --threads 2 --out "${WALK_OUT:-docs/bench/qwen-coder/baselines}"
