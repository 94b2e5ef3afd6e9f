#!/usr/bin/env bash
# Issue #15: the one-round flywheel of `graftbench run` (make run), each stage run as shards 0/2 and 1/2 against one
# shared store and merged per stage; compared sample by sample with the single-process `graftbench run` in RUNS_ONE
# (default runs/, prefix flywheel) made with the same pin (same thread count: leave OMP_NUM_THREADS as make run did).
# Both go to manifests/$CPU/ (CPU: this kind of machine) as flywheel-smollm2-135m-STAGE-sharded and
# flywheel-smollm2-135m-STAGE-one-process (the runs keep their names: sharded-flywheel-STAGE, flywheel-STAGE).
# Usage: experiments/sharded_flywheel.sh [RUNS_ONE]
set -euo pipefail
ONE=${1:-runs}; OUT=${OUT:-manifests/${CPU:-amd-epyc-avx512}}; G="${G:-.venv/bin/graftbench}"; PY=${PY:-.venv/bin/python}; STORE=store-sharded-flywheel
COMMON=(--problems builtin --max-new-tokens 256)
for k in 0 1; do $G solve "${COMMON[@]}" --shard "$k/2" --run "sharded-flywheel-baseline-$k"; done
$G merge sharded-flywheel-baseline-0 sharded-flywheel-baseline-1 --out sharded-flywheel-baseline
for k in 0 1; do
  $G deposit --problems builtin:1 --from-run sharded-flywheel-baseline --store "$STORE" --shard "$k/2"
done
for k in 0 1; do
  $G eval "${COMMON[@]}" --graft --certify --store "$STORE" --shard "$k/2" --run "sharded-flywheel-graft-$k"
done
$G merge sharded-flywheel-graft-0 sharded-flywheel-graft-1 --out sharded-flywheel-graft
for stage in baseline graft; do
  sharded="$OUT/flywheel-smollm2-135m-$stage-sharded.json"; one="$OUT/flywheel-smollm2-135m-$stage-one-process.json"
  mkdir -p "$OUT" && cp "runs/sharded-flywheel-$stage/manifest.json" "$sharded" && cp "$ONE/flywheel-$stage/manifest.json" "$one"
  $PY experiments/same_samples.py "$sharded" "$one"
done
