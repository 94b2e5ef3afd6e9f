#!/usr/bin/env bash
# The recurring AIME 2024 case (the committed manifests/aime2024-recurring-MODEL.json): deposit the 30 reference
# solutions, then eval --graft --certify on the same problems (exact routes, answer layout).
# Usage: experiments/aime2024_recurring.sh MODEL [DTYPE]
set -euo pipefail
export OMP_NUM_THREADS=${THREADS:-1} MKL_NUM_THREADS=${THREADS:-1}
MODEL=${1:?model alias}; DTYPE=${2:-float32}
G="${G:-.venv/bin/graftbench}"; RUN="aime2024-recurring-${MODEL}"; STORE="store-aime2024-${MODEL}"
DATA=../shared/data/aime2024.jsonl
$G deposit --model "$MODEL" --dtype "$DTYPE" --problems "$DATA" --store "$STORE"
$G eval --model "$MODEL" --dtype "$DTYPE" --problems "$DATA" --graft --certify --store "$STORE" --run "$RUN"
cp "runs/$RUN/manifest.json" "manifests/$RUN.json"
$G verify-manifest "manifests/$RUN.json" --store "$STORE" --require-artifacts | tail -1
