#!/usr/bin/env bash
# Issue #12: AIME 2025 as held-out against the verified AIME 2024 library, greedy, 1,024 decode tokens per problem:
# baseline, graft behind the similarity gate (--min-similarity 0.6), and graft with the gate off (the top-ranked
# AIME 2024 example for every problem that has a candidate). Each run resumes; finished manifests go to manifests/.
# Usage: experiments/aime2025.sh MODEL [DTYPE]   (THREADS=1 by default)
set -euo pipefail
MODEL=${1:?model alias}; DTYPE=${2:-float32}; THREADS=${THREADS:-1}
G="${G:-.venv/bin/graftbench}"; TAG="aime2025-${MODEL}"; STORE="store-aime2024-${MODEL}"
DATA=../shared/data
COMMON=(--model "$MODEL" --dtype "$DTYPE" --problems "$DATA/aime2025.jsonl" --max-new-tokens 1024)
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
keep() { cp "runs/$1/manifest.json" "manifests/$1.json"; $G verify-manifest "manifests/$1.json" | tail -1; }
$G deposit --model "$MODEL" --dtype "$DTYPE" --problems "$DATA/aime2024.jsonl" --store "$STORE"
$G solve "${COMMON[@]}" --run "${TAG}-baseline" && keep "${TAG}-baseline"
$G eval "${COMMON[@]}" --graft --store "$STORE" --run "${TAG}-graft-gated" && keep "${TAG}-graft-gated"
$G eval "${COMMON[@]}" --graft --store "$STORE" --min-similarity 0 --run "${TAG}-graft-ungated" \
  && keep "${TAG}-graft-ungated"
