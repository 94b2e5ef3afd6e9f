#!/usr/bin/env bash
# The pilot of the method-transfer experiment (docs/held-out-transfer.md, "The method-transfer experiment"): the
# baseline arm only, on methods:0-4 (4 problems per family: disjoint from the held-out methods:4-12, never used
# again), 4 samples per problem at temperature 0.7, top-p 0.95, seed 0, in program then text mode. Its per-family
# avg@4 (graftbench report's per-family table) decides which families and which mode the pre-registration keeps
# (those in 5-40%). Every arm resumes; a finished arm's manifest is copied to manifests/<kind>/ and verified
# (experiments/arms.sh), and an arm already there is skipped.
# ENGINE=llama.cpp (the default: the fastest engine for the model, certified for it) or ENGINE=torch DTYPE=bfloat16.
# Usage: experiments/methods_pilot.sh [MODEL] [DTYPE]   (THREADS=1 by default)
set -euo pipefail
MODEL=${1:-qwen2.5-coder-1.5b}; DTYPE=${2:-bfloat16}; THREADS=${THREADS:-1}; ENGINE=${ENGINE:-llama.cpp}
G="${G:-.venv/bin/graftbench}"
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
source "$(dirname "$0")/engine.sh"
source "$(dirname "$0")/arms.sh"
SAMPLING=(--samples 4 --temperature 0.7 --top-p 0.95 --seed 0)
NAME="methods-${MODEL}${MARK}"
arm "$NAME-program-pilot" solve --model "$MODEL" "${ENGINE_ARGS[@]}" --problems methods:0-4 \
  --mode program --max-new-tokens 384 "${SAMPLING[@]}"
arm "$NAME-pilot" solve --model "$MODEL" "${ENGINE_ARGS[@]}" --problems methods:0-4 \
  --max-new-tokens 512 "${SAMPLING[@]}"
"$G" report "$OUT/$NAME-program-pilot.json" "$OUT/$NAME-pilot.json" --out "runs/$NAME-pilot-report"
