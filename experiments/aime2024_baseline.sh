#!/usr/bin/env bash
# The AIME 2024 baseline, greedy, no graft. MODE=text (default): 1,024 decode tokens per problem, the run
# aime2024-MODEL[-bf16]-baseline (the 1,024-token baseline of issue #13). MODE=program: 512 decode tokens, the model
# writes a Python program, the sandbox runs it and the verifier judges its last printed line, the run
# aime2024-MODEL[-bf16]-program-baseline (issue #13's program-mode baseline). TOKENS overrides the budget. The run
# resumes; its finished manifest goes to manifests/<kind>/ (skipped when it is already there,
# experiments/arms.sh). The committed ones were run as aime2024-baseline-MODEL and aime2024-program-baseline-MODEL.
# ENGINE=llama.cpp runs it on the llama.cpp engine with a KV cache of KV (f16 by default), named -llama-KV.
# Usage: experiments/aime2024_baseline.sh MODEL [DTYPE]   (THREADS=1 by default)
set -euo pipefail
MODEL=${1:?model alias}; DTYPE=${2:-float32}; THREADS=${THREADS:-1}; MODE=${MODE:-text}
G="${G:-.venv/bin/graftbench}"
source "$(dirname "$0")/engine.sh"
case "$MODE" in
  text) NAME="aime2024-${MODEL}${MARK}-baseline"; TOKENS=${TOKENS:-1024} ;;
  program) NAME="aime2024-${MODEL}${MARK}-program-baseline"; TOKENS=${TOKENS:-512} ;;
  *) echo "MODE must be text or program, not '$MODE'" >&2; exit 2 ;;
esac
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
source "$(dirname "$0")/arms.sh"
arm "$NAME" solve --model "$MODEL" "${ENGINE_ARGS[@]}" --mode "$MODE" --problems ../shared/data/aime2024.jsonl \
  --max-new-tokens "$TOKENS"
