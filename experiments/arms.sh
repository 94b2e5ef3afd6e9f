# Sourced by the experiment scripts: one arm is one resumable graftbench run whose finished manifest is copied to
# OUT (manifests/<this kind of machine>/, CPU=amd-epyc-avx512 by default: docs/manifests.md) and verified
# there. An arm whose manifest is already in OUT is skipped (not re-run, and its committed manifest not rewritten); a
# failing arm stops the calling script (set -e). Run names follow the results' naming scheme, so a file is its run.
# The copy is verified as a reader of the results will verify it: anchored to its problem set, without the store
# (artifact stores are not committed), so its artifact payloads are accepted as not checked.
OUT=${OUT:-manifests/${CPU:-amd-epyc-avx512}}
keep() {
  mkdir -p "$OUT"; cp "runs/$1/manifest.json" "$OUT/$1.json"
  "$G" verify-manifest "$OUT/$1.json" --allow-unchecked-payloads | tail -1
}
arm() {
  local name=$1; shift
  if [ -f "$OUT/$name.json" ]; then echo "$name: $OUT/$name.json is already there, arm skipped"; return; fi
  "$G" "$@" --run "$name"; keep "$name"
}
