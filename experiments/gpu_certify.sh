#!/usr/bin/env bash
# The prepared GPU window (docs/gpu.md): at most GPU_BUDGET seconds (9 minutes) of steps, in order of importance,
# each under its own timeout and cut to what is left of the window:
#   1. check-exact certificates: random:qwen2.5-7b (20 pairs, controls on 5), then random:gemma3-27b (10 pairs,
#      controls on 3), on CUDA in bfloat16;
#   2. TTFT, graft against chunked prefill, on random:gemma3-12b at 8,192 and 32,768 tokens, a 1-token query and a
#      real AIME query, logits compared in each pair (no memory probes: each reloads the model);
#   then as time allows:
#   3. joules per prefill token, decode token and graft (NVML, idle power subtracted), the recurring case's ratio
#      modelled from the committed CPU runs;
#   4. the committed 12B certificate replayed on more pairs (check-exact --expect --pairs);
#   5. decode tokens/s of 1, 4 and 16 samples after one graft, --kernels certified then fast.
# After every step, finished or killed, ONE archive (GPU_ARCHIVE, .tar.gz) is rewritten (a temporary file renamed
# into place) with every result, log and the step table so far: a step cut by its timeout, or the whole command cut,
# leaves the archive of the steps before it intact. The step table (GPU_LOGS/steps.tsv, in the archive) says of
# each step: done, failed, cut by its timeout, not run (the window spent), or present (its certificate committed).
#
# Plain bash (no make): the GPU host runs it with its own Python (GPU_PY) and the folder `make gpu-carry` fills
# (unpacked here from .gpu-carry.tar.xz when only the archive travelled). GPU_DRY_RUN=1 prints the commands instead.
set -u -f  # -f: lists are split on spaces, never globbed
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
failed=0

GPU_PY=${GPU_PY:-python3}
GPU_DEVICE=${GPU_DEVICE:-cuda}
GPU_DTYPE=${GPU_DTYPE:-auto}
GPU_BUDGET=${GPU_BUDGET:-540}        # seconds of the whole window
GPU_MIN_STEP=${GPU_MIN_STEP:-20}     # a step is not started with fewer seconds of the window left
# model/pairs/control pairs/timeout, in order
GPU_CERTIFICATES=${GPU_CERTIFICATES:-random:qwen2.5-7b/20/5/150 random:gemma3-27b/10/3/200}
GPU_TTFT_MODEL=${GPU_TTFT_MODEL:-random:gemma3-12b}
GPU_TTFT_SIZES=${GPU_TTFT_SIZES:-8192,32768}
GPU_TTFT_TIMEOUT=${GPU_TTFT_TIMEOUT:-120}
GPU_ENERGY_MODEL=${GPU_ENERGY_MODEL:-$GPU_TTFT_MODEL}
GPU_ENERGY_TOKENS=${GPU_ENERGY_TOKENS:-8192}
GPU_ENERGY_DECODE=${GPU_ENERGY_DECODE:-64}
GPU_ENERGY_REPEATS=${GPU_ENERGY_REPEATS:-3}
GPU_ENERGY_TIMEOUT=${GPU_ENERGY_TIMEOUT:-60}
GPU_REPLAY_EXPECT=${GPU_REPLAY_EXPECT:-manifests/nvidia-h200/exact-random-gemma3-12b-bf16.json}
GPU_REPLAY_PAIRS=${GPU_REPLAY_PAIRS:-3:20}
GPU_REPLAY_TIMEOUT=${GPU_REPLAY_TIMEOUT:-90}
GPU_COUNTS_MODEL=${GPU_COUNTS_MODEL:-$GPU_TTFT_MODEL}
GPU_COUNTS_TOKENS=${GPU_COUNTS_TOKENS:-2048}
GPU_COUNTS_DECODE=${GPU_COUNTS_DECODE:-32}
GPU_COUNTS_TIMEOUT=${GPU_COUNTS_TIMEOUT:-60}
GPU_CARRY=${GPU_CARRY:-.gpu-carry}
GPU_RUNS=${GPU_RUNS:-runs}
GPU_REPLAY_LOG=${GPU_REPLAY_LOG:-manifests/replays.jsonl}
GPU_PROBLEMS=${GPU_PROBLEMS:-$GPU_CARRY/data/aime2024.jsonl}
GPU_PYTHONPATH=${GPU_PYTHONPATH:-$ROOT:$ROOT/$GPU_CARRY/site}
GPU_CACHE=${GPU_CACHE-$ROOT/$GPU_CARRY/cache}  # set empty: graftbench's own cache
GPU_LOGS=${GPU_LOGS:-gpu-window}
GPU_ARCHIVE=${GPU_ARCHIVE:-gpu-window.tar.gz}

# Commands as arrays, not shell functions: timeout runs a program.
PY=(env PYTHONPATH="$GPU_PYTHONPATH" ${GPU_CACHE:+"GRAFTBENCH_CACHE=$GPU_CACHE"} "$GPU_PY")
GRAFTBENCH=("${PY[@]}" -c 'from graftbench.cli.app import app; app()')

if [ ! -d "$GPU_CARRY" ] && [ -f "$GPU_CARRY.tar.xz" ] && [ -z "${GPU_DRY_RUN:-}" ]; then
  "$GPU_PY" -m tarfile -e "$GPU_CARRY.tar.xz" . || { echo "could not unpack $GPU_CARRY.tar.xz" >&2; exit 1; }
fi
if [ ! -f "$GPU_PROBLEMS" ]; then
  echo "no $GPU_PROBLEMS: run make gpu-carry on a machine with the packages" >&2; exit 1
fi
# One folder per GPU kind, as for a kind of CPU: its manifests and its bench results.
if [ -z "${GPU_OUT:-}" ] || [ -z "${GPU_BENCH:-}" ]; then
  name=$("${PY[@]}" -c 'import sys
from graftbench.bench.gpu_name import folder_name
print(folder_name(sys.argv[1]))' "$GPU_DEVICE") || exit 1
  GPU_OUT=${GPU_OUT:-manifests/$name}; GPU_BENCH=${GPU_BENCH:-results/$name/bench}
fi
# The dtype the runs take and the naming scheme's marker for it (graftbench.results.layout.dtype_marker)
read -r dtype mark < <("${PY[@]}" -c 'import sys
from graftbench.engine.device import dtype_for
from graftbench.results.layout import dtype_marker
dtype = dtype_for(*sys.argv[1:])
print(dtype, dtype_marker(dtype))' "$GPU_DTYPE" "$GPU_DEVICE") && [ -n "$dtype" ] || exit 1
mkdir -p "$GPU_OUT" "$GPU_BENCH" "$GPU_LOGS" "$GPU_RUNS"
STEPS=$GPU_LOGS/steps.tsv
printf 'step\tstatus\texit\tseconds\tlimit\n' > "$STEPS"
echo "device $GPU_DEVICE, dtype $dtype: manifests in $GPU_OUT, bench results in $GPU_BENCH, archive $GPU_ARCHIVE"

archive() {  # every result so far into GPU_ARCHIVE: written to a temporary file, then renamed into place
  [ -n "${GPU_DRY_RUN:-}" ] && return 0
  local members=() path
  for path in "$GPU_OUT" "$GPU_BENCH" "$GPU_RUNS" "$GPU_REPLAY_LOG" "$GPU_LOGS"; do
    [ -e "$path" ] || continue
    case $path in /*) members+=(-C / "${path#/}") ;; *) members+=(-C "$ROOT" "$path") ;; esac
  done
  tar czf "$GPU_ARCHIVE.part" "${members[@]}" 2>> "$GPU_LOGS/archive.log" && mv -f "$GPU_ARCHIVE.part" "$GPU_ARCHIVE"
}
note() {  # note NAME STATUS EXIT SECONDS LIMIT: one row of the step table, and the archive rewritten
  printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$STEPS"
  echo "$1: $2"
  archive
}
step() {  # step NAME LIMIT LOG COMMAND...: COMMAND under min(LIMIT, the window left) seconds, output in LOG
  local name=$1 limit=$2 log=$3 status started left; shift 3
  left=$((GPU_BUDGET - SECONDS))
  if [ -z "${GPU_DRY_RUN:-}" ] && [ "$left" -lt "$GPU_MIN_STEP" ]; then
    note "$name" "not run: ${left} s of the window left" - 0 "$limit"; return 0
  fi
  [ -z "${GPU_DRY_RUN:-}" ] && [ "$limit" -gt "$left" ] && limit=$left
  if [ -n "${GPU_DRY_RUN:-}" ]; then echo "timeout $limit $* > $log"; return 0; fi
  started=$SECONDS
  timeout -k 10 "$limit" "$@" > "$log" 2>&1
  status=$?
  case $status in
    0) note "$name" done 0 $((SECONDS - started)) "$limit" ;;
    124|137) failed=$((failed + 1)); note "$name" "cut by its timeout" "$status" $((SECONDS - started)) "$limit" ;;
    *) failed=$((failed + 1)); note "$name" failed "$status" $((SECONDS - started)) "$limit" ;;
  esac
}

# 1. certificates
for entry in $GPU_CERTIFICATES; do
  IFS=/ read -r model pairs controls limit <<< "$entry"
  name=exact-$(echo "$model" | tr ':@' '--')$mark
  if [ -f "$GPU_OUT/$name.json" ]; then
    note "certificate $model" "present: $GPU_OUT/$name.json" - 0 "$limit"; continue
  fi
  step "certificate $model" "$limit" "$GPU_LOGS/$name.log" "${GRAFTBENCH[@]}" check-exact --model "$model" \
    --device "$GPU_DEVICE" --dtype "$GPU_DTYPE" --samples "$pairs" --controls --control-pairs "$controls" \
    --problems "$GPU_PROBLEMS" --runs-dir "$GPU_RUNS" --write-expect "$GPU_OUT/$name.json"
done
# 2. time to first token
step ttft "$GPU_TTFT_TIMEOUT" "$GPU_LOGS/ttft.log" "${GRAFTBENCH[@]}" bench --only ttft --model "$GPU_TTFT_MODEL" \
  --device "$GPU_DEVICE" --dtype "$GPU_DTYPE" --sizes "$GPU_TTFT_SIZES" --repeats 1 --graft-repeats 1 \
  --no-memory-probes --problems "$GPU_PROBLEMS" --out "$GPU_BENCH"
# 3. energy
step energy "$GPU_ENERGY_TIMEOUT" "$GPU_LOGS/energy.log" "${GRAFTBENCH[@]}" bench --only energy \
  --model "$GPU_ENERGY_MODEL" --device "$GPU_DEVICE" --dtype "$GPU_DTYPE" --sizes "$GPU_ENERGY_TOKENS" \
  --decode-tokens "$GPU_ENERGY_DECODE" --repeats "$GPU_ENERGY_REPEATS" --problems "$GPU_PROBLEMS" --out "$GPU_BENCH"
# 4. the committed certificate replayed on more pairs
if [ -f "$GPU_REPLAY_EXPECT" ]; then
  step "replay $GPU_REPLAY_PAIRS" "$GPU_REPLAY_TIMEOUT" "$GPU_LOGS/replay.log" "${GRAFTBENCH[@]}" check-exact \
    --expect "$GPU_REPLAY_EXPECT" --pairs "$GPU_REPLAY_PAIRS" --problems "$GPU_PROBLEMS" --device "$GPU_DEVICE" \
    --log "$GPU_REPLAY_LOG"
else
  note "replay $GPU_REPLAY_PAIRS" "not run: no $GPU_REPLAY_EXPECT" - 0 "$GPU_REPLAY_TIMEOUT"
fi
# 5. decode after one graft by batch size, certified against fast kernels (each a process of its own)
for kernels in certified fast; do
  step "sample-counts $kernels" "$GPU_COUNTS_TIMEOUT" "$GPU_LOGS/sample-counts-$kernels.log" "${GRAFTBENCH[@]}" \
    bench --only sample-counts --kernels "$kernels" --model "$GPU_COUNTS_MODEL" --device "$GPU_DEVICE" \
    --dtype "$GPU_DTYPE" --sizes "$GPU_COUNTS_TOKENS" --decode-tokens "$GPU_COUNTS_DECODE" --repeats 1 \
    --problems "$GPU_PROBLEMS" --out "$GPU_BENCH"
done
[ "$failed" -eq 0 ] || { echo "$failed step(s) failed or were cut by their timeout" >&2; exit 1; }
