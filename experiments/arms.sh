# Sourced by the experiment scripts: one arm is one resumable graftbench run whose finished manifest is copied to
# OUT (results/<this kind of machine>/manifests/, CPU=amd-epyc-avx512 by default: docs/manifests.md) and verified
# there. An arm whose manifest is already in OUT is skipped (not re-run, and its committed manifest not rewritten); a
# failing arm stops the calling script (set -e). Run names follow the results' naming scheme, so a file is its run.
OUT=${OUT:-results/${CPU:-amd-epyc-avx512}/manifests}
keep() { mkdir -p "$OUT"; cp "runs/$1/manifest.json" "$OUT/$1.json"; "$G" verify-manifest "$OUT/$1.json" | tail -1; }
arm() {
  local name=$1; shift
  if [ -f "$OUT/$name.json" ]; then echo "$name: $OUT/$name.json is already there, arm skipped"; return; fi
  "$G" "$@" --run "$name"; keep "$name"
}
