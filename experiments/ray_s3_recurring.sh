#!/usr/bin/env bash
# Issue #15: the recurring AIME 2024 case (eval --graft --certify) with 2 Ray workers against an S3 store served by
# moto on 127.0.0.1, and the same run in one process with the workers' thread count (1) and pin; both manifests are
# copied to manifests/$CPU/ (CPU: this kind of machine) and compared sample by sample
# (experiments/same_samples.py). The committed pair was run as aime2024-recurring-MODEL-{ray,one-process}-s3.
# Usage: experiments/ray_s3_recurring.sh [MODEL]   (needs the test extra: moto[server], s3fs, ray)
set -euo pipefail
MODEL=${1:-smollm2-135m}; PORT=${PORT:-5123}; G="${G:-.venv/bin/graftbench}"; PY=${PY:-.venv/bin/python}
DATA=../shared/data/aime2024.jsonl; TAG="aime2024-${MODEL}-recurring"; OUT=${OUT:-manifests/${CPU:-amd-epyc-avx512}}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true GRAFTBENCH_S3_ENDPOINT="http://127.0.0.1:${PORT}"
export GRAFTBENCH_STORE_CACHE="${TMPDIR:-/tmp}/graftbench-s3-cache-$$"
.venv/bin/moto_server -H 127.0.0.1 -p "$PORT" > /dev/null 2>&1 & MOTO=$!
trap 'kill $MOTO; rm -rf "$GRAFTBENCH_STORE_CACHE"' EXIT
sleep 3
$PY -c "import s3fs; s3fs.S3FileSystem(client_kwargs={'endpoint_url': '$GRAFTBENCH_S3_ENDPOINT'}).mkdir('graftbench')"
STORE="s3://graftbench/${TAG}"
$G deposit --model "$MODEL" --problems "$DATA" --store "$STORE"
$G eval --model "$MODEL" --problems "$DATA" --graft --certify --store "$STORE" \
  --executor ray --workers 2 --worker-threads 1 --run "${TAG}-ray-s3"
$G eval --model "$MODEL" --problems "$DATA" --graft --certify --store "$STORE" \
  --run "${TAG}-one-process-s3"
mkdir -p "$OUT"; for run in "${TAG}-ray-s3" "${TAG}-one-process-s3"; do cp "runs/$run/manifest.json" "$OUT/$run.json"; done
$PY experiments/same_samples.py "$OUT/${TAG}-ray-s3.json" "$OUT/${TAG}-one-process-s3.json"
