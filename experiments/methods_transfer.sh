#!/usr/bin/env bash
# The held-out arms of the pre-registered method-transfer experiment (experiments/methods_preregistration.md): on
# methods:4-12 (8 problems per family, 48 in all), 4 samples per problem at temperature 0.7, top-p 0.95, seed 0:
#   baseline      solve
#   graft         eval --graft: the routed verified example of the library (same family expected), restored
#   other-family  eval --graft --graft-from other-family: an example of another family (the control)
#   prompt        eval --graft --example-as prompt: the graft arm's example prefilled as prompt text (same chunks)
# The library: the worked reference solutions of methods:12-14 (2 per family, disjoint from the pilot and the
# held-out problems), re-verified against their keys and deposited. Every arm resumes; a finished arm's manifest is
# copied to manifests/<kind>/ and verified, and an arm already there is skipped (experiments/arms.sh). The
# report pools the pilot's kept families of the mode (--families) for the pre-registered primary test.
# MODE=text|program and the budget are the pre-registration's; ENGINE=llama.cpp (default) or torch.
# Usage: experiments/methods_transfer.sh [MODEL]   (THREADS=1 by default)
set -euo pipefail
MODEL=${1:-qwen2.5-coder-1.5b}; DTYPE=${DTYPE:-bfloat16}; THREADS=${THREADS:-1}; ENGINE=${ENGINE:-llama.cpp}
MODE=${MODE:?text or program, as pre-registered}
G="${G:-.venv/bin/graftbench}"
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
source "$(dirname "$0")/engine.sh"
source "$(dirname "$0")/arms.sh"
case "$MODE" in
  text) MODE_ARGS=(); TOKENS=${TOKENS:-512}; TAG="methods-${MODEL}${MARK}"; KEPT=crt ;;
  program) MODE_ARGS=(--mode program); TOKENS=${TOKENS:-384}; TAG="methods-${MODEL}${MARK}-program"
           KEPT=grid-detour,recurrence ;;
  *) echo "MODE must be text or program, not '$MODE'" >&2; exit 2 ;;
esac
STORE="store-${TAG}"
SAMPLING=(--samples 4 --temperature 0.7 --top-p 0.95 --seed 0)
HELD_OUT=(--model "$MODEL" "${ENGINE_ARGS[@]}" "${MODE_ARGS[@]}" --problems methods:4-12 --max-new-tokens "$TOKENS"
          "${SAMPLING[@]}")
"$G" deposit --model "$MODEL" "${ENGINE_ARGS[@]}" --problems methods:12-14 --store "$STORE"
arm "${TAG}-baseline" solve "${HELD_OUT[@]}"
arm "${TAG}-graft" eval "${HELD_OUT[@]}" --graft --store "$STORE"
arm "${TAG}-other-family" eval "${HELD_OUT[@]}" --graft --store "$STORE" --graft-from other-family
arm "${TAG}-prompt" eval "${HELD_OUT[@]}" --graft --store "$STORE" --example-as prompt
"$G" report "$OUT/${TAG}-baseline.json" "$OUT/${TAG}-graft.json" "$OUT/${TAG}-other-family.json" \
  "$OUT/${TAG}-prompt.json" --families "$KEPT" --out "results/${CPU:-amd-epyc-avx512}/reports/${TAG}"
