#!/usr/bin/env bash
# Issue 16, item 4: the baselines at v4's exact recipe and data (causal slots, copy trust 0.2,
# the corpus's first 2,424 answers, all it held then, plus the labelled ShareGPT conversations,
# block 16, 3000 steps, features from the torch-side target in fp32 as v4's were), exported
# INT8 and walked beside the shipped v4 and n-gram lookup: the 72 held-out answers
# (B=4/8/16) and the long-context answers (2K-4K, 4K-8K tokens of context; B=8/16).
#   full   full attention over every entry (DFlash-style), no memory
#   swa    sliding-window attention (window 64), no memory
#   fused  HyFlash with target layers 2, 15 and 27 fused with the final state (EAGLE-3 /
#          DFlash style; a 4x wider feature cache: runs/features/torch-fp32/L2-15-27/,
#          ~40 min of fp32 features on 2 AVX2 cores before the steps, resumable)
# Training resumes from runs/v4-NAME/checkpoint.pt, so an interrupted run continues when the
# script is run again; a finished one only re-exports. Each run takes about an hour of 2 cores.
# Usage: scripts/v4_baselines.sh [VARIANT ...]   (default: full swa)
# WALK_OUT names the walks' folder (default docs/bench/v4-baselines; the long-context walk goes
# to WALK_OUT-long), so a run of one variant need not overwrite another's committed walk.
set -euo pipefail
cd "$(dirname "$0")/.."
variants=("$@")
if [ ${#variants[@]} -eq 0 ]; then
    variants=(full swa)
fi
walk_out=${WALK_OUT:-docs/bench/v4-baselines}
hf=.venv/bin/hyflash
D=data/distill/smollm2-135m-instruct
walk=(--drafter ngram --drafter "HyFlash v4 (shipped)=hyflash")
for name in "${variants[@]}"; do
    case $name in
        full) args=(--attention full --memory none); label="full attention" ;;
        swa) args=(--memory none); label="SWA" ;;
        fused) args=(--feature-layers 2,15,27); label="HyFlash, layers 2/15/27 fused" ;;
        *) echo "unknown variant $name" >&2; exit 2 ;;
    esac
    $hf train "${args[@]}" --causal-slots --copy-trust 0.2 --max-answers 2424 \
        --extra-corpus $D/sharegpt_answers.jsonl --block-size 16 --steps 3000 --eval-every 250 \
        --threads 2 --feature-source torch --torch-dtype fp32 --out "runs/v4-$name" \
        >> "runs/v4-$name.log" 2>&1
    $hf export --run "runs/v4-$name" --checkpoint best.pt --out "runs/export/v4-$name" \
        --name "v4-$name" --quantize int8 --keep-only int8 >> "runs/v4-$name.log" 2>&1
    walk+=(--drafter "$label, v4 recipe=runs/export/v4-$name")
done
walk+=(--drafter "hybrid v4=hybrid:hyflash")
$hf acceptance "${walk[@]}" --blocks 4,8,16 --threads 2 --out "$walk_out"
$hf acceptance "${walk[@]}" --answers $D/long_2048-4096.jsonl --answers $D/long_4096-7936.jsonl \
    --max-len 8192 --blocks 8,16 --threads 2 --out "$walk_out-long"
