#!/usr/bin/env bash
# Issue 16, items 1-2: the corpus grows with answers written by the GGUF in torch (bf16 where
# the CPU has it natively; rows say "generator": "torch-bf16"), which part from llama.cpp's
# greedy answers after near-ties. Does a drafter trained on them walk the held-out llama.cpp
# answers as well as one trained on llama.cpp's own answers to the same prompts? Same prompts
# (the first ANSWERS rows of the committed corpus, all llama.cpp's), same seed, features
# (torch-side), recipe and steps. A third drafter trains on llama.cpp's answers with bf16 steps
# (`--precision bf16`, 1.5x faster on AMX): does the faster training walk as well?
# Usage: scripts/compare_generators.sh [ANSWERS] [STEPS] [OUT]   (defaults: 150 300 runs/generators)
set -euo pipefail
cd "$(dirname "$0")/.."
answers=${1:-150}
steps=${2:-300}
out=${3:-runs/generators}
hf=.venv/bin/hyflash
corpus=data/distill/smollm2-135m-instruct/answers.jsonl
mkdir -p "$out"
head -n "$answers" "$corpus" > "$out/llama-answers.jsonl"
# the torch side answers the training prompts up to the last one those rows answer
# (resumable: a rerun keeps what it has), then keeps only the prompts both sides answered
limit=$(.venv/bin/python - "$out/llama-answers.jsonl" <<'EOF'
import json, sys
from engine.bench.corpora import train_prompts
order = {p.key: i for i, p in enumerate(train_prompts())}
print(1 + max(order[json.loads(line)["key"]] for line in open(sys.argv[1])))
EOF
)
$hf data generate --generator torch --limit "$limit" --streams 64 --threads 2 \
    --out "$out/torch-all.jsonl" > "$out/generate.log" 2>&1
.venv/bin/python - "$out" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
torch_rows = {r["key"]: r for r in map(json.loads, open(out / "torch-all.jsonl"))}
llama_rows = [r for r in map(json.loads, open(out / "llama-answers.jsonl")) if r["key"] in torch_rows]
for name, rows in [("llama", llama_rows), ("torch", [torch_rows[r["key"]] for r in llama_rows])]:
    with open(out / f"{name}-answers.jsonl", "w") as f:
        f.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)
    tokens = sum(len(r["answer_ids"]) for r in rows)
    print(f"{name}: {len(rows)} answers, {tokens} answer tokens")
same = sum(torch_rows[r["key"]]["answer_ids"] == r["answer_ids"] for r in llama_rows)
print(f"identical answers: {same} of {len(llama_rows)}")
EOF
# the bf16 arm only where bf16 is native: emulated (AVX2), a bf16 matmul is ~90x slower than fp32
runs=(llama torch)
walk=(--drafter "llama.cpp answers=$out/llama-drafter" --drafter "torch answers=$out/torch-drafter")
if .venv/bin/python -c "import sys; from engine.training.torch_target import native_bf16
sys.exit(not native_bf16('cpu'))"; then
    runs+=(llama-bf16)
    walk+=(--drafter "llama.cpp answers, bf16 steps=$out/llama-bf16-drafter")
fi
for run in "${runs[@]}"; do
    if [ ! -f "$out/$run-drafter/card.json" ]; then
        precision=fp32
        [ "$run" = llama-bf16 ] && precision=bf16
        $hf train --out "$out/$run" --corpus "$out/${run%-bf16}-answers.jsonl" \
            --feature-source torch --precision "$precision" --steps "$steps" \
            --eval-every "$steps" --block-size 16 --threads 2 --quiet > "$out/$run.log" 2>&1
        $hf export --run "$out/$run" --checkpoint checkpoint.pt --out "$out/$run-drafter" \
            --name "gen-$run" --quantize int8 --keep-only int8 >> "$out/$run.log" 2>&1
    fi
done
$hf acceptance "${walk[@]}" --drafter ngram=ngram --blocks 4,8,16 --threads 2 \
    --out "$out/acceptance"
