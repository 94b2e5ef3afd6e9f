#!/usr/bin/env bash
# Issue #12's held-out transfer on the built-in families, for one model: a library of the first 2 problems of each
# family, 60 held-out problems (the next 10 of each family), 256 decode tokens.
# Arms: baseline, graft (solve layout), graft from another family (the control); with SAMPLED=1 also avg@4 arms
# (temperature 0.7, top-p 0.95, seed 0). Every run resumes; a finished run's manifest is copied to manifests/<kind>/, and an
# arm whose manifest is already there is skipped (experiments/arms.sh).
# MODE=text (default): the library holds the reference solutions. MODE=program (issue #13): every run is in program
# mode and the library holds the model's own verified programs for the library problems (a program-mode solve of
# builtin:2, deposited from its committed manifest, so a later session needs no run folder, and re-run in the
# sandbox at deposit); the runs are named transfer-MODEL-program-*.
# Usage: experiments/transfer.sh MODEL [DTYPE]   (THREADS=1 by default: leave a core for other work)
set -euo pipefail
MODEL=${1:?model alias}; DTYPE=${2:-float32}; THREADS=${THREADS:-1}; MODE=${MODE:-text}
G="${G:-.venv/bin/graftbench}"; TAG="transfer-${MODEL}$([ "$DTYPE" = bfloat16 ] && echo -bf16 || :)"
case "$MODE" in
  text) MODE_ARGS=() ;;
  program) MODE_ARGS=(--mode program); TAG="${TAG}-program" ;;
  *) echo "MODE must be text or program, not '$MODE'" >&2; exit 2 ;;
esac
STORE="store-${TAG}"
COMMON=(--model "$MODEL" --dtype "$DTYPE" --max-new-tokens 256 "${MODE_ARGS[@]}")
HELD_OUT=("${COMMON[@]}" --problems builtin:2-12)
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
source "$(dirname "$0")/arms.sh"
if [ "$MODE" = program ]; then
  arm "${TAG}-library" solve "${COMMON[@]}" --problems builtin:2
  $G deposit --model "$MODEL" --dtype "$DTYPE" --mode program --problems builtin:2 \
    --from-manifest "$OUT/${TAG}-library.json" --no-references --store "$STORE"
else
  $G deposit --model "$MODEL" --dtype "$DTYPE" --problems builtin:2 --store "$STORE"
fi
arm "${TAG}-baseline" solve "${HELD_OUT[@]}"
arm "${TAG}-graft" eval "${HELD_OUT[@]}" --graft --store "$STORE"
arm "${TAG}-other-family" eval "${HELD_OUT[@]}" --graft --store "$STORE" --graft-from other-family
if [ "${SAMPLED:-0}" = 1 ]; then
  SAMPLING=(--samples 4 --temperature 0.7 --top-p 0.95 --seed 0)
  arm "${TAG}-baseline-avg4" solve "${HELD_OUT[@]}" "${SAMPLING[@]}"
  arm "${TAG}-graft-avg4" eval "${HELD_OUT[@]}" "${SAMPLING[@]}" --graft --store "$STORE"
fi
