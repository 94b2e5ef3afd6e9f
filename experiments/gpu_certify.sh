#!/usr/bin/env bash
# The prepared GPU certificates (docs/gpu.md): check-exact on CUDA with random weights at published dimensions,
# 50 pairs with the negative controls and a replay of 3 pairs in a second process, per model in order of
# importance, then TTFT graft against chunked prefill on the 12B config. Each step runs under its own timeout so the
# whole fits 10 minutes; an interrupted check-exact journals its pairs and a re-run resumes it, and a model whose
# expectation is already in the GPU's folder (committed) is replayed only.
#
# Plain bash (no make): the GPU host runs it with its own Python (GPU_PY) and the folder `make gpu-carry` fills
# (wheels, tokenizers, problems). `make gpu-certify` runs it with the same variables. Timeouts in seconds:
# 240 + 45 + 150 + 45 + 200 + 45 + 80 = 805 for the defaults with nothing committed; with the 12B expectation
# committed (replayed only) 565, inside one 10-minute command. On the H200 the 12B's 50 pairs took about 240 s.
# GPU_DRY_RUN=1 prints the commands instead.
set -u -f  # -f: the model list is split on spaces, never globbed
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
failed=0

GPU_PY=${GPU_PY:-python3}
GPU_DEVICE=${GPU_DEVICE:-cuda}
GPU_DTYPE=${GPU_DTYPE:-auto}
GPU_MODELS=${GPU_MODELS:-random:gemma3-12b random:qwen2.5-7b random:gemma3-27b}
GPU_TIMEOUTS=${GPU_TIMEOUTS:-240 150 200}
GPU_PAIRS=${GPU_PAIRS:-50}
GPU_CONTROL_PAIRS=${GPU_CONTROL_PAIRS:-5}
GPU_REPLAY=${GPU_REPLAY:-3}
GPU_REPLAY_TIMEOUT=${GPU_REPLAY_TIMEOUT:-45}
GPU_TTFT_MODEL=${GPU_TTFT_MODEL:-random:gemma3-12b}
GPU_TTFT_SIZES=${GPU_TTFT_SIZES:-8192,32768}
GPU_TTFT_TIMEOUT=${GPU_TTFT_TIMEOUT:-80}
GPU_CARRY=${GPU_CARRY:-.gpu-carry}
GPU_RUNS=${GPU_RUNS:-runs}
GPU_REPLAY_LOG=${GPU_REPLAY_LOG:-results/replays.jsonl}
GPU_PROBLEMS=${GPU_PROBLEMS:-$GPU_CARRY/data/aime2024.jsonl}
GPU_PYTHONPATH=${GPU_PYTHONPATH:-$ROOT:$ROOT/$GPU_CARRY/site}
GPU_CACHE=${GPU_CACHE-$ROOT/$GPU_CARRY/cache}  # set empty: graftbench's own cache

# Commands as arrays, not shell functions: timeout runs a program.
PY=(env PYTHONPATH="$GPU_PYTHONPATH" ${GPU_CACHE:+"GRAFTBENCH_CACHE=$GPU_CACHE"} "$GPU_PY")
GRAFTBENCH=("${PY[@]}" -c 'from graftbench.cli.app import app; app()')
run() {  # run LIMIT LOG COMMAND...: COMMAND under a timeout of LIMIT seconds, its output in LOG; returns its status
  local limit=$1 log=$2 status; shift 2
  if [ -n "${GPU_DRY_RUN:-}" ]; then echo "timeout $limit $* > $log"; return 0; fi
  timeout "$limit" "$@" > "$log" 2>&1
  status=$?
  [ "$status" -eq 0 ] || failed=$((failed + 1))
  return "$status"
}

if [ ! -f "$GPU_PROBLEMS" ]; then
  echo "no $GPU_PROBLEMS: run make gpu-carry on a machine with the packages" >&2; exit 1
fi
# One folder per GPU kind, as for a kind of CPU: its manifests (with their logs) and its TTFT result.
if [ -z "${GPU_OUT:-}" ] || [ -z "${GPU_BENCH:-}" ]; then
  name=$("${PY[@]}" -c 'import sys
from graftbench.bench.gpu_name import folder_name
print(folder_name(sys.argv[1]))' "$GPU_DEVICE") || exit 1
  GPU_OUT=${GPU_OUT:-results/$name/manifests}; GPU_BENCH=${GPU_BENCH:-results/$name/bench}
fi
# The dtype the runs take and the naming scheme's marker for it (graftbench.results.layout.dtype_marker)
read -r dtype mark < <("${PY[@]}" -c 'import sys
from graftbench.engine.device import dtype_for
from graftbench.results.layout import dtype_marker
dtype = dtype_for(*sys.argv[1:])
print(dtype, dtype_marker(dtype))' "$GPU_DTYPE" "$GPU_DEVICE") && [ -n "$dtype" ] || exit 1
mkdir -p "$GPU_OUT" "$GPU_BENCH"
echo "device $GPU_DEVICE, dtype $dtype: manifests in $GPU_OUT, TTFT in $GPU_BENCH"

read -r -a limits <<< "$GPU_TIMEOUTS"
[ "${#limits[@]}" -gt 0 ] || { echo "GPU_TIMEOUTS holds no timeout" >&2; exit 1; }
i=0
for model in $GPU_MODELS; do
  limit=${limits[$i]:-${limits[${#limits[@]} - 1]}}; i=$((i + 1))
  name=exact-$(echo "$model" | tr ':@' '--')$mark
  if [ -f "$GPU_OUT/$name.json" ]; then
    echo "$model check-exact: $GPU_OUT/$name.json is there, replayed only"
  else
    run "$limit" "$GPU_OUT/$name.log" "${GRAFTBENCH[@]}" check-exact --model "$model" --device "$GPU_DEVICE" \
      --dtype "$GPU_DTYPE" --samples "$GPU_PAIRS" --controls --control-pairs "$GPU_CONTROL_PAIRS" \
      --problems "$GPU_PROBLEMS" --runs-dir "$GPU_RUNS" --write-expect "$GPU_OUT/$name.json"
    echo "$model check-exact: exit $?"
  fi
  [ -f "$GPU_OUT/$name.json" ] || [ -n "${GPU_DRY_RUN:-}" ] || continue
  run "$GPU_REPLAY_TIMEOUT" "$GPU_OUT/$name.replay.log" "${GRAFTBENCH[@]}" check-exact --expect "$GPU_OUT/$name.json" \
    --device "$GPU_DEVICE" --limit "$GPU_REPLAY" --log "$GPU_REPLAY_LOG"
  echo "$model replay in a second process: exit $?"
done
run "$GPU_TTFT_TIMEOUT" "$GPU_BENCH/ttft.log" "${GRAFTBENCH[@]}" bench --only ttft --model "$GPU_TTFT_MODEL" \
  --device "$GPU_DEVICE" --dtype "$GPU_DTYPE" --sizes "$GPU_TTFT_SIZES" --repeats 1 --graft-repeats 1 \
  --problems "$GPU_PROBLEMS" --out "$GPU_BENCH"
echo "ttft: exit $?"
[ "$failed" -eq 0 ] || { echo "$failed step(s) failed or were cut by their timeout" >&2; exit 1; }
