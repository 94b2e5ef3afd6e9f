# Sourced by the experiment scripts: one arm is one resumable graftbench run whose finished manifest is copied to
# manifests/ and verified there. An arm whose manifest is already in manifests/ is skipped (not re-run, and its
# committed manifest not rewritten); a failing arm stops the calling script (set -e).
keep() { cp "runs/$1/manifest.json" "manifests/$1.json"; "$G" verify-manifest "manifests/$1.json" | tail -1; }
arm() {
  local name=$1; shift
  if [ -f "manifests/$name.json" ]; then echo "$name: manifests/$name.json is already there, arm skipped"; return; fi
  "$G" "$@" --run "$name"; keep "$name"
}
