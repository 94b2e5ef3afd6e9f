#!/usr/bin/env bash
# Issue #12: AIME 2025 as held-out against the verified AIME 2024 library, greedy, 1,024 decode tokens per problem:
# baseline, graft behind the similarity gate (--min-similarity 0.6), and graft with the gate off (--graft-from
# top-ranked: the top-ranked AIME 2024 example of the whole library for every problem, whether or not it shares a
# MinHash band with one). Each run resumes; finished manifests go to manifests/<kind>/
# (an arm already there is skipped, experiments/arms.sh).
# MODE=program (issue #13): every run in program mode, 512 decode tokens, named aime2025-MODEL-program-*; the
# library is the same store of AIME 2024 reference solutions. TOKENS overrides the budget.
# Usage: experiments/aime2025.sh MODEL [DTYPE]   (THREADS=1 by default)
set -euo pipefail
MODEL=${1:?model alias}; DTYPE=${2:-float32}; THREADS=${THREADS:-1}; MODE=${MODE:-text}
G="${G:-.venv/bin/graftbench}"; TAG="aime2025-${MODEL}$([ "$DTYPE" = bfloat16 ] && echo -bf16 || :)"; STORE="store-aime2024-${MODEL}"
case "$MODE" in
  text) MODE_ARGS=(); TOKENS=${TOKENS:-1024} ;;
  program) MODE_ARGS=(--mode program); TOKENS=${TOKENS:-512}; TAG="${TAG}-program" ;;
  *) echo "MODE must be text or program, not '$MODE'" >&2; exit 2 ;;
esac
DATA=../shared/data
COMMON=(--model "$MODEL" --dtype "$DTYPE" --problems "$DATA/aime2025.jsonl" --max-new-tokens "$TOKENS" "${MODE_ARGS[@]}")
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
source "$(dirname "$0")/arms.sh"
$G deposit --model "$MODEL" --dtype "$DTYPE" --problems "$DATA/aime2024.jsonl" --store "$STORE"
arm "${TAG}-baseline" solve "${COMMON[@]}"
arm "${TAG}-graft-gated" eval "${COMMON[@]}" --graft --store "$STORE"
arm "${TAG}-graft-ungated" eval "${COMMON[@]}" --graft --store "$STORE" --graft-from top-ranked
