#!/usr/bin/env bash
# Issue 37, item 3: the shipped Qwen2.5-Coder drafter is what `hyflash speedup` makes, run on
# the committed corpus (data/distill/<model>: it reads every answer there and adds the
# ShareGPT conversations it lacks), kept in its job folder (--install never), then copied into
# resources/drafters/ under the catalog's drafter name. Resumable: rerun after a kill (the job
# folder keeps finished stages; a fresh machine recomputes features and training).
#   job events (JSON lines):  runs/speedup-<model>-<budget>.jsonl (beside the job folder,
#                             which must hold the job alone)
#   its result and the walk:  docs/bench/qwen-coder/speedup-<budget>/
# Usage: [BUDGET=standard] [THREADS=2] scripts/qwen_drafter.sh
set -euo pipefail
cd "$(dirname "$0")/.."
M=qwen2.5-coder-0.5b-instruct
budget=${BUDGET:-standard}
job=runs/speedup-$M
dest=resources/drafters/hyflash-qwen2.5-coder-0.5b
bench=docs/bench/qwen-coder/speedup-$budget
events=$job-$budget.jsonl
mkdir -p runs "$bench"
.venv/bin/hyflash speedup --model $M --budget "$budget" --corpus "data/distill/$M" \
  --out "$job" --install never --threads "${THREADS:-2}" --json | tee -a "$events" |
  grep -v '"event": "progress"' || true
tail -n 1 "$events" | grep -q '"event": "result"' || {
  echo "the job did not finish: rerun $0 to resume it" >&2
  exit 1
}
tail -n 1 "$events" >"$bench/result.json"
cp "$job/$budget/validate.json" "$bench/validate.json"
rm -rf "$dest.partial"
cp -r "$job/$budget/drafter" "$dest.partial"
.venv/bin/python - "$dest.partial/card.json" "$(basename "$dest")" <<'EOF'
import json
import sys

path, name = sys.argv[1], sys.argv[2]
card = json.load(open(path))
card["name"] = name
json.dump(card, open(path, "w"), indent=2)
EOF
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "shipped: $dest ($(du -sh "$dest" | cut -f1))"
