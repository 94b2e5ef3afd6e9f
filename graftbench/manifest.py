"""Write and verify run manifests. Imports no torch and needs no model.

A manifest is canonical JSON (sorted keys, no whitespace): the config pin and its fingerprint, the environment,
the problem set's hash, each problem's id, text hash and key (never its text), each sample with its output text
and the output's SHA-256, verdicts, tokens, energy, the artifacts used with their SHA-256, the totals, and
``manifest_sha256``: the SHA-256 of the canonical JSON of everything else.
"""

from __future__ import annotations

import json
import platform
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from .hashing import canonical_json, sha256_file, sha256_json, sha256_text
from .verify import verify_answer

SCHEMA = "graftbench.manifest/1"


class ManifestError(ValueError):
    """A manifest file that cannot be read at all (missing, not JSON, wrong schema)."""


def _round(value: float) -> float:
    return round(float(value), 6)


def compute_totals(samples: list[dict]) -> dict:
    """Totals over samples: counts, accuracy, tokens (prefill, saved, decode), seconds, joules, grafts, fallbacks
    and certificates. ``decode_tokens_per_correct`` is ``None`` when nothing is correct."""
    n = len(samples)
    correct = sum(1 for s in samples if s["correct"])
    decode = sum(s["decode_tokens"] for s in samples)
    certified = [s["certified"] for s in samples if s.get("certified") is not None]
    return {
        "samples": n,
        "correct": correct,
        "accuracy": _round(correct / n) if n else 0.0,
        "decode_tokens": decode,
        "mean_decode_tokens": _round(decode / n) if n else 0.0,
        "decode_tokens_per_correct": _round(decode / correct) if correct else None,
        "prefill_tokens": sum(s["prefill_tokens"] for s in samples),
        "prefill_tokens_saved": sum(s["prefill_tokens_saved"] for s in samples),
        "grafts": sum(1 for s in samples if s["mode"] == "graft"),
        "fallbacks": sum(1 for s in samples if s.get("fallback")),
        "certified": sum(1 for c in certified if c),
        "certificate_mismatches": sum(1 for c in certified if not c),
        "finish_reasons": dict(sorted(Counter(s["finish_reason"] for s in samples).items())),
        "wall_s": _round(sum(s["wall_s"] for s in samples)),
        "mean_ttft_s": _round(sum(s["ttft_s"] for s in samples) / n) if n else 0.0,
        "energy_j": _round(sum(s["energy_j"] for s in samples)),
    }


def environment() -> dict:
    """Where the run happened: Python, OS, machine (no host names or user names)."""
    return {"python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine()}


def build_manifest(*, run: str, command: str, config: dict, config_fingerprint: str, settings: dict,
                   problem_set: dict, problems: list[dict], samples: list[dict], energy: dict,
                   store: str | None) -> dict:
    """Assemble a manifest dict and seal it with ``manifest_sha256``.

    ``problems`` are ``{"id", "problem_sha256", "key"}``; ``samples`` as written by :mod:`graftbench.evaluate`.
    """
    artifacts = sorted({s["artifact_id"]: s["artifact_tokens"] for s in samples if s.get("artifact_id")}.items())
    body = {
        "schema": SCHEMA,
        "run": run,
        "command": command,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": config,
        "config_fingerprint": config_fingerprint,
        "environment": environment(),
        "settings": settings,
        "problem_set": problem_set,
        "problems": problems,
        "samples": samples,
        "artifacts": [{"id": a, "sha256": a, "tokens": t} for a, t in artifacts],
        "store": store,
        "energy": energy,
        "totals": compute_totals(samples),
    }
    return {**body, "manifest_sha256": sha256_json(body)}


def write_manifest(manifest: dict, path: str | Path) -> None:
    """Write canonical JSON atomically (see :func:`graftbench.runs.write_atomic`)."""
    from .runs import write_atomic

    write_atomic(Path(path), canonical_json(manifest) + "\n")


def load_manifest(path: str | Path) -> dict:
    """Read a manifest. Raises :class:`ManifestError` naming the path when it is missing or not a manifest."""
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ManifestError(f"manifest '{path}' does not exist") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"manifest '{path}' is not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise ManifestError(f"manifest '{path}' is not a {SCHEMA} document")
    return manifest


def _check_sample(sample: dict, keys: dict[str, str]) -> list[str]:
    sid = sample.get("problem_id")
    where = f"sample {sid}"
    problems = []
    if sid not in keys:
        return [f"{where}: problem_id is not among the manifest's problems"]
    if sample.get("key") != keys[sid]:
        problems.append(f"{where}: key {sample.get('key')!r} differs from the problem's key {keys[sid]!r}")
    output = sample.get("output")
    if not isinstance(output, str) or sha256_text(output) != sample.get("output_sha256"):
        problems.append(f"{where}: output_sha256 does not match the stored output")
    verdict = verify_answer(output if isinstance(output, str) else "", keys[sid], cue=sample.get("cue") or "")
    if verdict.extracted != sample.get("extracted"):
        problems.append(f"{where}: extracted recorded {sample.get('extracted')!r}, re-extracted {verdict.extracted!r}")
    if verdict.correct != sample.get("correct"):
        problems.append(f"{where}: correct recorded {sample.get('correct')!r}, re-verified {verdict.correct!r}")
    certificate = sample.get("certificate_sha256")
    if certificate is not None and sample.get("certified") != (certificate == sample.get("logits_sha256")):
        problems.append(f"{where}: certified does not match certificate_sha256 against logits_sha256")
    return problems


def _check_artifacts(manifest: dict, store_root: Path | None) -> tuple[list[str], str]:
    problems = []
    listed = {a.get("id"): a for a in manifest.get("artifacts", [])}
    for sample in manifest.get("samples", []):
        artifact_id = sample.get("artifact_id")
        if artifact_id and artifact_id not in listed:
            problems.append(f"sample {sample.get('problem_id')}: artifact_id {artifact_id[:16]} is not listed in artifacts")
    if not listed:
        return problems, "no artifacts used"
    if store_root is None or not (store_root / "artifacts").is_dir():
        return problems, "artifact payloads not checked (store not present)"
    for artifact_id, entry in listed.items():
        path = store_root / "artifacts" / f"{artifact_id}.safetensors"
        if not path.is_file():
            problems.append(f"artifact {artifact_id[:16]}: missing from store {store_root}")
        elif sha256_file(path) != entry.get("sha256") or entry.get("sha256") != artifact_id:
            problems.append(f"artifact {artifact_id[:16]}: payload SHA-256 differs from the manifest")
    return problems, f"{len(listed)} artifact payloads checked against {store_root}"


def verify_manifest(path: str | Path, store: str | Path | None = None) -> tuple[list[str], list[str]]:
    """Re-check a manifest without a model: its own hash, every output hash, every verdict (re-extracted and
    re-verified from the stored output and key), the totals, and artifact payloads when the store is present
    (``store``, else the path recorded in the manifest).

    Returns ``(mismatches, notes)``: it holds only when ``mismatches`` is empty. Raises :class:`ManifestError`
    when the file is not a manifest at all.
    """
    manifest = load_manifest(path)
    mismatches, notes = [], []
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    if sha256_json(body) != manifest.get("manifest_sha256"):
        mismatches.append("manifest_sha256 does not match the manifest's content")
    keys = {p.get("id"): p.get("key") for p in manifest.get("problems", [])}
    samples = manifest.get("samples", [])
    for sample in samples:
        mismatches.extend(_check_sample(sample, keys))
    try:
        totals = compute_totals(samples)
    except (KeyError, TypeError) as exc:
        mismatches.append(f"totals cannot be recomputed: a sample lacks a field ({exc})")
        totals = {}
    recorded = manifest.get("totals", {})
    for name in sorted(set(totals) | set(recorded)):
        if totals.get(name) != recorded.get(name):
            mismatches.append(f"totals.{name}: recorded {recorded.get(name)!r}, recomputed {totals.get(name)!r}")
    store_root = Path(store) if store else (Path(manifest["store"]) if manifest.get("store") else None)
    artifact_problems, note = _check_artifacts(manifest, store_root)
    mismatches.extend(artifact_problems)
    notes.append(f"{len(samples)} samples re-verified; {note}")
    return mismatches, notes
