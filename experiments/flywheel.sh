#!/usr/bin/env bash
# Issue #12's 3-round flywheel: 12 new built-in problems a round (2 per family), N = 4 samples (temperature 0.7,
# top-p 0.95, seed 0), 256 decode tokens, only the model's own verified samples deposited. Every run resumes;
# when the flywheel ends its manifests are copied to manifests/$CPU/ and its summary to
# results/$CPU/reports/PREFIX/ (CPU: this kind of machine, amd-epyc-avx512 by default). MODE=program (issue #13): every
# sample is a program run in the sandbox and the library holds the verified programs; the runs are named
# flywheel-MODEL[-bf16]-program-*.
# Usage: experiments/flywheel.sh MODEL [DTYPE]   (THREADS=1 by default)
set -euo pipefail
MODEL=${1:?model alias}; DTYPE=${2:-float32}; THREADS=${THREADS:-1}; MODE=${MODE:-text}
G="${G:-.venv/bin/graftbench}"; PREFIX="flywheel-${MODEL}$([ "$DTYPE" = bfloat16 ] && echo -bf16 || :)"
CPU_KIND=${CPU:-amd-epyc-avx512}
case "$MODE" in
  text) ;;
  program) PREFIX="${PREFIX}-program" ;;
  *) echo "MODE must be text or program, not '$MODE'" >&2; exit 2 ;;
esac
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
$G flywheel --model "$MODEL" --dtype "$DTYPE" --mode "$MODE" --rounds 3 --per-family 2 --samples 4 --temperature 0.7 \
  --top-p 0.95 --seed 0 --max-new-tokens 256 --prefix "$PREFIX" --store "store-${PREFIX}"
for run in runs/"${PREFIX}"-r*/; do
  name=$(basename "$run"); mkdir -p "manifests/$CPU_KIND" && cp "$run/manifest.json" "manifests/$CPU_KIND/${name}.json"
  $G verify-manifest "manifests/$CPU_KIND/${name}.json" --store "store-${PREFIX}" --require-artifacts | tail -1
done
REPORT="results/$CPU_KIND/reports/${PREFIX}"
mkdir -p "$REPORT" && cp "runs/${PREFIX}-summary.json" "$REPORT/"  # not a manifest
