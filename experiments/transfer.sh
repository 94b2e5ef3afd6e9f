#!/usr/bin/env bash
# Issue #12's held-out transfer on the built-in families, for one model: a library of the first 2 problems of each
# family (reference solutions), 60 held-out problems (the next 10 of each family), 256 decode tokens.
# Arms: baseline, graft (solve layout), graft from another family (the control); with SAMPLED=1 also avg@4 arms
# (temperature 0.7, top-p 0.95, seed 0). Every run resumes; a finished run's manifest is copied to manifests/.
# Usage: experiments/transfer.sh MODEL [DTYPE]   (THREADS=1 by default: leave a core for other work)
set -euo pipefail
MODEL=${1:?model alias}; DTYPE=${2:-float32}; THREADS=${THREADS:-1}
G="${G:-.venv/bin/graftbench}"; TAG="transfer-${MODEL}"; STORE="store-${TAG}"
COMMON=(--model "$MODEL" --dtype "$DTYPE" --problems builtin:2-12 --max-new-tokens 256)
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
keep() { cp "runs/$1/manifest.json" "manifests/$1.json"; $G verify-manifest "manifests/$1.json" | tail -1; }
$G deposit --model "$MODEL" --dtype "$DTYPE" --problems builtin:2 --store "$STORE"
$G solve "${COMMON[@]}" --run "${TAG}-baseline" && keep "${TAG}-baseline"
$G eval "${COMMON[@]}" --graft --store "$STORE" --run "${TAG}-graft" && keep "${TAG}-graft"
$G eval "${COMMON[@]}" --graft --store "$STORE" --graft-from other-family --run "${TAG}-other-family" \
  && keep "${TAG}-other-family"
if [ "${SAMPLED:-0}" = 1 ]; then
  SAMPLING=(--samples 4 --temperature 0.7 --top-p 0.95 --seed 0)
  $G solve "${COMMON[@]}" "${SAMPLING[@]}" --run "${TAG}-baseline-avg4" && keep "${TAG}-baseline-avg4"
  $G eval "${COMMON[@]}" "${SAMPLING[@]}" --graft --store "$STORE" --run "${TAG}-graft-avg4" \
    && keep "${TAG}-graft-avg4"
fi
