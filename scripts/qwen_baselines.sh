#!/usr/bin/env bash
# Issue 37, items 3 and 5: baselines for the shipped Qwen2.5-Coder drafter at its exact data and
# steps. The shipped drafter is `scripts/qwen_drafter.sh`'s standard budget: the corpus's first
# 600 answers plus the first 400 labelled ShareGPT conversations (the corpus held 400 when it
# ran), block 16, 1,000 steps, validation every 100. BUDGET names another of `hyflash speedup
# --budget`'s budgets (engine/speedup/plan.py's BUDGETS; thorough: 2,400 / 1,000 /
# 3,000 / 250). Variants:
#   full      full attention over every entry (DFlash-style), no memory
#   vocab8k   the shipped recipe with an 8,192-id draft vocabulary (shipped: 16,384)
#   vocab32k  the same with 32,768 ids
# and issue 52's ablations of the supervision, each changing one thing of the shipped recipe:
#   soft        soft targets: 0.5 x NLL + 0.5 x KL from the target's distribution
#   soft-own    soft, and unwritten (ShareGPT) text supervises only slots after the target's
#               own tokens (--supervision own)
#   hard-own    hard labels, --supervision own
#   hard-answers, soft-answers  the conversations dropped: the budget's self-distilled
#               answers alone (as many steps and anchors), hard labels or soft targets
# each exported INT8, then walked with the shipped drafter and n-gram lookup on the 72
# held-out answers at B = 4 / 8 / 16. Features come from the GGUF in torch at DTYPE (the
# shipped drafter's were fp32; bf16 is ~4x faster on AVX512-BF16/AMX machines), cached in
# runs/qwen-baselines/ and shared by the variants. Training resumes from
# runs/qwen-baselines/NAME/checkpoint.pt after an interruption; a finished run only
# re-exports.
# VOCAB: the draft vocabulary of every variant but vocab8k / vocab32k (default the shipped
# 16,384; another size names the runs NAME-vVOCAB and their labels "(VOCAB ids)").
# STEPS: fewer (or more) steps than the budget's; the runs are then named NAME-sSTEPS.
# THREADS: torch threads per training (default 2). WALK=0 trains and exports only (e.g. two
# variants side by side at THREADS=1, then one walk of both: rerun with the two names).
# Usage: [BUDGET=standard] [DTYPE=fp32] [VOCAB=16384] [STEPS=N] [THREADS=2] [WALK=1]
#        scripts/qwen_baselines.sh [VARIANT ...]  (default: full)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
M=qwen2.5-coder-0.5b-instruct
D=$root/data/distill/$M
hf=$root/.venv/bin/hyflash
# the budget's numbers come from the speedup plan's table, so the baselines match its drafters
budget=$("$root/.venv/bin/python" -c "from engine.speedup.plan import BUDGETS
b = BUDGETS['${BUDGET:-standard}']
print(b.answers, b.conversations, b.steps, b.eval_every)")
read -r answers conversations steps every <<<"$budget"
steps=${STEPS:-$steps}
variants=("$@")
if [ ${#variants[@]} -eq 0 ]; then
    variants=(full)
fi
work=$root/runs/qwen-baselines
mkdir -p "$work"
head -n "$conversations" "$D/sharegpt_answers.jsonl" >"$work/conversations.jsonl"
walk=(--drafter ngram --drafter "HyFlash (shipped)=$root/resources/drafters/hyflash-qwen2.5-coder-0.5b")
cd "$work"  # relative feature caches (runs/features/) are shared by every variant from here
for name in "${variants[@]}"; do
    extra=(--extra-corpus "$work/conversations.jsonl")
    case $name in
        full) args=(--attention full --memory none); label="full attention" ;;
        vocab8k) args=(--draft-vocab 8192); label="HyFlash, 8K draft vocabulary" ;;
        vocab32k) args=(--draft-vocab 32768); label="HyFlash, 32K draft vocabulary" ;;
        soft) args=(--soft-weight 0.5); label="soft targets" ;;
        soft-own) args=(--soft-weight 0.5 --supervision own); label="soft, own-text slots" ;;
        hard-own) args=(--supervision own); label="hard, own-text slots" ;;
        hard-answers) args=(); extra=(); label="hard, answers only" ;;
        soft-answers) args=(--soft-weight 0.5); extra=(); label="soft, answers only" ;;
        *) echo "unknown variant $name" >&2; exit 2 ;;
    esac
    vocab=${VOCAB:-16384}
    if [ "$vocab" != 16384 ]; then
        name=$name-v$vocab label="$label ($vocab ids)"
    fi
    if [ -n "${STEPS:-}" ]; then
        name=$name-s$STEPS label="$label, $STEPS steps"
    fi
    # the shipped recipe's 16,384-id draft vocabulary unless the variant names another
    $hf train --model $M --draft-vocab "$vocab" "${args[@]}" --causal-slots --copy-trust 0.2 \
        --block-size 16 --corpus "$D/answers.jsonl" --max-answers "$answers" "${extra[@]}" \
        --max-len 1024 --steps "$steps" \
        --eval-every "$every" --threads "${THREADS:-2}" --feature-source torch \
        --torch-dtype "${DTYPE:-fp32}" --out "$name" >>"$name.log" 2>&1
    $hf export --model $M --run "$name" --checkpoint best.pt --out "export/$name" \
        --name "qwen-$name" --quantize int8 --keep-only int8 >>"$name.log" 2>&1
    walk+=(--drafter "$label=$work/export/$name")
done
cd "$root"
[ "${WALK:-1}" = 0 ] && exit 0
$hf acceptance --model $M --answers "$D/eval_answers.jsonl" "${walk[@]}" --blocks 4,8,16 \
    --threads 2 --out "${WALK_OUT:-docs/bench/qwen-coder/baselines}"
