#!/usr/bin/env bash
# The recurring AIME 2024 case (the committed manifests/amd-epyc-avx512/aime2024-MODEL-recurring.json, run as
# aime2024-recurring-MODEL): deposit the 30 reference solutions, then eval --graft --certify on the same problems
# (exact routes, answer layout). The manifest goes to manifests/$CPU/ (CPU: this kind of machine).
# ENGINE=llama.cpp runs it on the llama.cpp engine with a KV cache of KV (f16 by default), named -llama-KV.
# Usage: experiments/aime2024_recurring.sh MODEL [DTYPE]
set -euo pipefail
export OMP_NUM_THREADS=${THREADS:-1} MKL_NUM_THREADS=${THREADS:-1}
MODEL=${1:?model alias}; DTYPE=${2:-float32}
source "$(dirname "$0")/engine.sh"
OUT=${OUT:-manifests/${CPU:-amd-epyc-avx512}}
G="${G:-.venv/bin/graftbench}"; RUN="aime2024-${MODEL}${MARK}-recurring"; STORE="store-aime2024-${MODEL}${MARK}"
DATA=../shared/data/aime2024.jsonl
$G deposit --model "$MODEL" "${ENGINE_ARGS[@]}" --problems "$DATA" --store "$STORE"
$G eval --model "$MODEL" "${ENGINE_ARGS[@]}" --problems "$DATA" --graft --certify --store "$STORE" --run "$RUN"
mkdir -p "$OUT" && cp "runs/$RUN/manifest.json" "$OUT/$RUN.json"
$G verify-manifest "$OUT/$RUN.json" --store "$STORE" --require-artifacts | tail -1
