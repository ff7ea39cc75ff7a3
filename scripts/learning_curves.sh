#!/usr/bin/env bash
# Issue 16, item 3: what limits tau? One small recipe (torch-side features, block 16, seed 0,
# --steps updates of 8 sequences x 16 anchors), varied along one axis at a time, every
# drafter exported INT8 and walked over the 72 held-out llama.cpp answers in one
# `hyflash acceptance` call (each walk gets llama.cpp's features of the layers its card names).
#   base        150 answers, d=384, 1 layer, final-state features
#   data-N      N answers (the data axis at equal steps)
#   layers-2    2 drafter layers; d576: d_model 576 (the capacity axis)
#   fused       target layers 2, 15, 27 (inputs) fused with the final state (EAGLE-3's picks)
#   causal      causal slots (a block of B runs B rows at run time: the drafter-time axis)
#   trust[-W]   copy-path trust loss of weight W (default 1: the gate learns when the lookup
#               is right)
#   indomain-N  N answers to GSM8K and MBPP training prompts only (maths and code, the kinds
#               of 4 of the 6 held-out sets) against data-N's mix (mostly ShareGPT chat)
#   full, swa   the baselines at the same recipe: full attention (DFlash-style, no memory) and
#               sliding-window attention (no memory)
# A variant already exported is not trained again (an interrupted one resumes).
# Usage: scripts/learning_curves.sh [STEPS] [OUT] [VARIANT ...]
#        (defaults: 300 runs/curves base fused causal data-75 data-300 data-600 layers-2 d576)
# The walk goes to OUT/acceptance, or to $WALK_OUT when set (a second walk of some variants
# beside an earlier one).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
out=${2:-runs/curves}
shift $(( $# >= 2 ? 2 : $# ))
variants=("$@")
if [ ${#variants[@]} -eq 0 ]; then
    variants=(base fused causal data-75 data-300 data-600 layers-2 d576)
fi
hf=.venv/bin/hyflash
mkdir -p "$out"
walk=()
for name in "${variants[@]}"; do
    args=(--max-answers 150)
    case $name in
        base) ;;
        fused) args+=(--feature-layers 2,15,27) ;;
        data-*) args=(--max-answers "${name#data-}") ;;
        indomain-*) args=(--max-answers "${name#indomain-}" --sources gsm8k,mbpp) ;;
        layers-2) args+=(--layers 2) ;;
        d576) args+=(--d-model 576) ;;
        causal) args+=(--causal-slots) ;;
        trust) args+=(--copy-trust 1) ;;
        trust-*) args+=(--copy-trust "${name#trust-}") ;;
        full) args+=(--attention full --memory none) ;;
        swa) args+=(--memory none) ;;
        *) echo "unknown variant $name" >&2; exit 2 ;;
    esac
    if [ ! -f "$out/$name-drafter/card.json" ]; then
        $hf train --out "$out/$name" --feature-source torch --steps "$steps" \
            --eval-every "$steps" --block-size 16 --threads 2 --quiet "${args[@]}" \
            > "$out/$name.log" 2>&1
        $hf export --run "$out/$name" --checkpoint checkpoint.pt --out "$out/$name-drafter" \
            --name "curve-$name" --quantize int8 --keep-only int8 >> "$out/$name.log" 2>&1
    fi
    walk+=(--drafter "$name=$out/$name-drafter")
done
$hf acceptance "${walk[@]}" --drafter ngram=ngram --blocks 4,8,16 --threads 2 \
    --out "${WALK_OUT:-$out/acceptance}"
