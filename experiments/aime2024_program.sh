#!/usr/bin/env bash
# Issue #13: the program-mode AIME 2024 baseline, greedy, 512 decode tokens per problem: the model writes a Python
# program, the sandbox runs it, and the verifier judges its last printed line. The run resumes; its finished
# manifest goes to manifests/aime2024-program-baseline-MODEL.json. TOKENS overrides the budget.
# Usage: experiments/aime2024_program.sh MODEL [DTYPE]   (THREADS=1 by default)
set -euo pipefail
MODEL=${1:?model alias}; DTYPE=${2:-float32}; THREADS=${THREADS:-1}; TOKENS=${TOKENS:-512}
G="${G:-.venv/bin/graftbench}"
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
source "$(dirname "$0")/arms.sh"
arm "aime2024-program-baseline-${MODEL}" solve --model "$MODEL" --dtype "$DTYPE" --mode program \
  --problems ../shared/data/aime2024.jsonl --max-new-tokens "$TOKENS"
