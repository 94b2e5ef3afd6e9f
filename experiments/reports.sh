#!/usr/bin/env bash
# Regenerates every committed report folder, results/$CPU/reports/NAME/ (report.md, summary.json and the plots),
# from the committed manifests with `graftbench report`, the command that made each (no model, no torch). A flywheel's
# summary (NAME-summary.json, written by `graftbench flywheel`) is not a report output and is left as it is.
# Usage: experiments/reports.sh [OUT_ROOT]   (OUT_ROOT: results/$CPU/reports by default)
set -euo pipefail
G="${G:-.venv/bin/graftbench}"; M="manifests/${CPU:-amd-epyc-avx512}"
OUT_ROOT=${1:-results/${CPU:-amd-epyc-avx512}/reports}
report() { local name=$1; shift; "$G" report "$@" --out "$OUT_ROOT/$name" >/dev/null; echo "$OUT_ROOT/$name"; }
arms() { local prefix=$1; shift; for arm in "$@"; do echo "$M/$prefix-$arm.json"; done; }

report aime2025-qwen2.5-coder-0.5b $(arms aime2025-qwen2.5-coder-0.5b baseline graft-gated graft-ungated)
report aime2025-qwen2.5-coder-0.5b-program $(arms aime2025-qwen2.5-coder-0.5b-program baseline graft-gated graft-ungated)
for model in qwen2.5-coder-0.5b-program smollm2-135m; do
  runs=$(arms "flywheel-$model" r0-baseline r1-baseline r2-baseline r3-baseline r1-graft r2-graft r3-graft)
  [ "$model" = smollm2-135m ] || runs="$runs $(arms "flywheel-$model" r1-recurring r2-recurring r3-recurring)"
  report "flywheel-$model" $runs
done
report methods-qwen2.5-coder-1.5b-llama-f16-program \
  $(arms methods-qwen2.5-coder-1.5b-llama-f16-program baseline graft other-family prompt) \
  --families grid-detour,recurrence
report transfer-gemma3-270m $(arms transfer-gemma3-270m baseline graft other-family)
report transfer-qwen2.5-coder-0.5b-avg4 $(arms transfer-qwen2.5-coder-0.5b baseline-avg4 graft-avg4 \
  program-baseline-avg4 program-graft-avg4)
report transfer-qwen2.5-coder-0.5b-program $(arms transfer-qwen2.5-coder-0.5b-program baseline graft other-family \
  library)
report transfer-qwen2.5-coder-0.5b $(arms transfer-qwen2.5-coder-0.5b baseline graft other-family) \
  "$M/aime2024-qwen2.5-coder-0.5b-recurring.json"
report transfer-smollm2-135m $(arms transfer-smollm2-135m baseline graft other-family) \
  $(arms aime2024-smollm2-135m baseline recurring)
