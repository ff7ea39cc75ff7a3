#!/usr/bin/env bash
# Issue 52, item 5: the learning curve of the HyFlash drafter on Qwen2.5-Coder-0.5B-Instruct.
# One run trains ANSWERS self-distilled answers (the target's own text only: clean
# supervision) with soft targets (0.5 x NLL + 0.5 x KL), an 8,192-id draft vocabulary and the
# shipped architecture, for STEPS steps of 8 x 16 anchors; the weights at KEEP steps are kept
# (step-N.pt). Each kept point and the last are exported INT8 and walked with the shipped
# drafter and n-gram lookup on the 72 held-out answers at B = 4 / 8 / 16. The kept points lie
# on one cosine schedule sized for the whole run, so each earlier point is a lower bound of a
# run that would end there.
# Features come from the GGUF in torch at DTYPE (bf16 where AMX / AVX512-BF16 runs it;
# PRECISION likewise for the training step), cached in runs/qwen-curve/runs/features/.
# FEATURE_LAYERS=2,12,21 fuses those target layers' inputs with the final state (item 3; its
# own feature cache and run name).
# Resumes after an interruption (features and training); a finished run only re-exports.
# Usage: [ANSWERS=1200] [STEPS=6000] [KEEP=750,1500,3000] [DTYPE=bf16] [PRECISION=bf16]
#        [FEATURE_LAYERS=] [THREADS=2] [WALK=1] [WALK_OUT=...] scripts/qwen_curve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
M=qwen2.5-coder-0.5b-instruct
D=$root/data/distill/$M
hf=$root/.venv/bin/hyflash
answers=${ANSWERS:-1200} steps=${STEPS:-6000} keep=${KEEP:-750,1500,3000}
layers=${FEATURE_LAYERS:-}
name=soft-a$answers-s$steps${layers:+-L${layers//,/-}}
work=$root/runs/qwen-curve
mkdir -p "$work"
cd "$work"
$hf train --model $M --draft-vocab 8192 --soft-weight 0.5 --causal-slots --copy-trust 0.2 \
    --block-size 16 --corpus "$D/answers.jsonl" --max-answers "$answers" --max-len 1024 \
    --steps "$steps" --eval-every 250 --keep-steps "$keep" --threads "${THREADS:-2}" \
    --feature-layers "$layers" --feature-source torch --torch-dtype "${DTYPE:-bf16}" --precision "${PRECISION:-bf16}" \
    --out "$name" >>"$name.log" 2>&1
walk=(--drafter ngram --drafter "HyFlash (shipped)=$root/resources/drafters/hyflash-qwen2.5-coder-0.5b")
for ckpt in $(tr ',' ' ' <<<"$keep") last; do
    if [ "$ckpt" = last ]; then
        file=checkpoint.pt anchors=$((steps * 128))
    else
        file=step-$ckpt.pt anchors=$((ckpt * 128))
    fi
    $hf export --model $M --run "$name" --checkpoint "$file" --out "export/$name-$anchors" \
        --name "qwen-curve-$anchors" --quantize int8 --keep-only int8 >>"$name.log" 2>&1
    walk+=(--drafter "$anchors anchors=$work/export/$name-$anchors")
done
cd "$root"
[ "${WALK:-1}" = 0 ] && exit 0
$hf acceptance --model $M --answers "$D/eval_answers.jsonl" "${walk[@]}" --blocks 4,8,16 \
    --threads 2 --out "${WALK_OUT:-docs/bench/qwen-coder/v5-curve${layers:+-L${layers//,/-}}}"
