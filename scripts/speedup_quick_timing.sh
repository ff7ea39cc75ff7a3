#!/usr/bin/env bash
# Issue 38's budget check: `hyflash speedup --budget quick` on the embedded SmolLM2-135M from
# nothing (fresh job folder, no corpus, calibration included unless cached), timed end to end
# on this machine, then the drafter it made walked on the 72 held-out answers the shipped
# drafters are judged on (the job's own validation uses only 12). Run it alone: llama.cpp's
# threads spin when they share the cores.
#   job folder and events:  runs/speedup-smollm2-quick{,.jsonl}
#   results:                docs/bench/speedup-quick-smollm2/{result,validate,timing}.json,
#                           docs/bench/speedup-quick-smollm2/acceptance/
# Usage: [THREADS=2] scripts/speedup_quick_timing.sh
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
job=runs/speedup-smollm2-quick
bench=docs/bench/speedup-quick-smollm2
mkdir -p runs "$bench"
rm -rf "$job" "$job.jsonl"
start=$(date +%s.%N)
.venv/bin/hyflash speedup --budget quick --install never --threads "$threads" --out "$job" \
  --json >"$job.jsonl"
end=$(date +%s.%N)
tail -n 1 "$job.jsonl" >"$bench/result.json"
cp "$job/quick/validate.json" "$bench/validate.json"
.venv/bin/python - "$job.jsonl" "$start" "$end" "$bench/timing.json" <<'PY'
import json
import sys

events = [json.loads(line) for line in open(sys.argv[1])]
plan = next(e for e in events if e["event"] == "plan")
result = events[-1]
json.dump(
    {
        "command": "scripts/speedup_quick_timing.sh",
        "wall_clock_s": float(sys.argv[3]) - float(sys.argv[2]),
        "plan_eta_s": {s["name"]: s["eta_s"] for s in plan["stages"]},
        "stage_seconds": result["stage_seconds"],
        "tau_b16_12_heldout": result["tau"],
        "ngram_tau_b16_12_heldout": result["ngram_tau"],
    },
    open(sys.argv[4], "w"),
    indent=2,
)
PY
.venv/bin/hyflash acceptance --drafter ngram \
  --drafter "HyFlash v4 (shipped)=resources/drafters/hyflash-smollm2-135m" \
  --drafter "HyFlash, speedup --budget quick=$job/quick/drafter" \
  --blocks 4,16 --threads "$threads" --out "$bench/acceptance"
