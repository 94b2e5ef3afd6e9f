"""Manifest schema 2 (RFC 8785 bytes, the verifier version recorded) and the checks under the recorded version.

No model: the manifests are built from hand-made samples with :func:`graftbench.results.manifest.build_manifest`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import rfc8785
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.util.hashing import canonical_json, sha256_text
from graftbench.results.manifest import (SCHEMA, SCHEMA_V1, build_manifest, load_manifest, seal_sha256, sealed_fields,
                                         verify_manifest, write_manifest)
from graftbench.results.rescore import rescore_manifest
from graftbench.settings import EvalSettings
from graftbench.verify.answers import VERIFIER_VERSION, verify_answer
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
BASELINE = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-baseline.json"
runner = CliRunner()


def _sample(problem_id: str, key: str, output: str, version: int, wall_s: float = 0.5) -> dict:
    verdict = verify_answer(output, key, version=version)
    return {"problem_id": problem_id, "problem_sha256": sha256_text(problem_id), "key": key, "mode": "baseline",
            "route": None, "similarity": None, "fallback": None, "cue": "", "prefill_tokens": 10,
            "prefill_tokens_saved": 0, "artifact_id": None, "artifact_tokens": 0, "logits_sha256": "0" * 64,
            "output": output, "output_sha256": sha256_text(output), "extracted": verdict.extracted,
            "correct": verdict.correct, "finish_reason": "eos", "decode_tokens": 5, "ttft_s": 0.1, "wall_s": wall_s,
            "energy_j": 1.0, "certificate_sha256": None, "certify_s": None, "certified": None}


OUTPUTS = {"a": (r"\boxed{2x + 3 = 7}", "7"), "b": (r"so our answer is $\boxed 2$.", "2"),
           "c": (r"\boxed{15\text{ cm}^2}", "225")}


def _manifest(version: int = VERIFIER_VERSION, wall_s: float = 0.5) -> dict:
    samples = [_sample(pid, key, out, version, wall_s) for pid, (out, key) in OUTPUTS.items()]
    settings = EvalSettings(verifier_version=version).to_dict()
    return build_manifest(run="r", command="solve", config={"model": "m"}, config_fingerprint="", settings=settings,
                          problem_set={"source": "hand", "sha256": "0" * 64, "n": len(samples)},
                          problems=[{"id": s["problem_id"], "problem_sha256": s["problem_sha256"], "key": s["key"]}
                                    for s in samples],
                          samples=samples, energy={"method": "none"}, store=None)


def _reseal(manifest: dict) -> dict:
    body = {k: v for k, v in manifest.items() if k not in ("manifest_sha256", "sealed_fields")}
    body["sealed_fields"] = sealed_fields(body)
    return {**body, "manifest_sha256": seal_sha256(body, body["schema"])}


def _as_schema_1(manifest: dict) -> dict:
    """The manifest as graftbench wrote it before verifier versions were recorded: schema 1, no version field."""
    manifest = copy.deepcopy(manifest)
    manifest["schema"] = SCHEMA_V1
    del manifest["settings"]["verifier_version"]
    return _reseal(manifest)


def _written(manifest: dict, tmp_path: Path, name: str = "m.json") -> Path:
    path = tmp_path / name
    write_manifest(manifest, path)
    return path


def _fingerprinted(manifest: dict) -> dict:
    from graftbench.results.fingerprint import pin_fingerprint

    manifest = copy.deepcopy(manifest)
    manifest["config_fingerprint"] = pin_fingerprint(manifest["config"])
    return _reseal(manifest)


def test_a_new_manifest_is_schema_2_with_the_verifier_version_and_rfc8785_bytes(tmp_path):
    manifest = _fingerprinted(_manifest(wall_s=1e-7))
    path = _written(manifest, tmp_path)
    raw = path.read_bytes()
    assert manifest["schema"] == SCHEMA == "graftbench.manifest/2"
    assert manifest["settings"]["verifier_version"] == VERIFIER_VERSION == 5
    assert raw == rfc8785.dumps(manifest) + b"\n"
    assert b'"wall_s":1e-7' in raw  # ECMAScript number form; Python's json writes 1e-07
    body = {k: v for k, v in json.loads(raw).items() if k != "manifest_sha256"}
    assert manifest["manifest_sha256"] == hashlib.sha256(rfc8785.dumps(body)).hexdigest()
    assert manifest["manifest_sha256"] != hashlib.sha256(canonical_json(body).encode()).hexdigest()
    mismatches, notes = verify_manifest(path)
    assert mismatches == [] and notes[0].startswith("3 samples re-verified under verifier 5")


def test_samples_are_checked_under_the_version_the_manifest_records(tmp_path):
    v2 = _fingerprinted(_manifest(version=2))
    assert [(s["extracted"], s["correct"]) for s in v2["samples"]] == [(None, False), ("2", True), ("15", False)]
    assert verify_manifest(_written(v2, tmp_path))[0] == []
    v1 = _as_schema_1(_fingerprinted(_manifest(version=1)))
    assert [(s["extracted"], s["correct"]) for s in v1["samples"]] == [("7", True), (None, False), ("15 ^2", True)]
    assert verify_manifest(_written(v1, tmp_path, "v1.json"))[0] == []
    # The same samples claimed to be scored under verifier 1, sealed again: every verdict that differs is named.
    claimed = copy.deepcopy(v2)
    claimed["settings"]["verifier_version"] = 1
    mismatches = verify_manifest(_written(_reseal(claimed), tmp_path, "claimed.json"))[0]
    assert mismatches == [
        "settings.verifier_version: 1 is lower than graftbench.manifest/2 requires (2 or later)",
        "sample a: extracted recorded None, re-extracted '7'", "sample a: correct recorded False, re-verified True",
        "sample b: extracted recorded '2', re-extracted None", "sample b: correct recorded True, re-verified False",
        "sample c: extracted recorded '15', re-extracted '15 ^2'", "sample c: correct recorded False, re-verified True",
        "metrics.verifier_version: recorded 2, recomputed 1",
    ]


def test_an_unknown_verifier_version_is_a_mismatch_not_a_crash(tmp_path):
    manifest = _fingerprinted(_manifest())
    manifest["settings"]["verifier_version"] = 9
    mismatches = verify_manifest(_written(_reseal(manifest), tmp_path))[0]
    assert mismatches == ["settings.verifier_version: verifier version 9 is not known to this graftbench "
                          "(it knows 1, 2, 3, 4, 5); no verdict could be re-checked",
                          "metrics.verifier_version: recorded 5, recomputed 9"]


def test_a_value_rfc8785_cannot_carry_is_a_mismatch(tmp_path):
    manifest = _fingerprinted(_manifest())
    text = rfc8785.dumps(manifest).decode().replace('"decode_tokens":5', '"decode_tokens":9007199254740993', 1)
    path = tmp_path / "big.json"
    path.write_text(text, encoding="utf-8")
    mismatches = verify_manifest(path)[0]
    assert mismatches[0].startswith("the manifest cannot be canonicalized under graftbench.manifest/2")
    assert "sealed_fields: cannot be recomputed (a value cannot be canonicalized)" in mismatches


def test_committed_schema_1_manifests_verify_under_verifier_1():
    manifest = load_manifest(BASELINE)
    assert manifest["schema"] == SCHEMA_V1 and "verifier_version" not in manifest["settings"]
    mismatches, notes = verify_manifest(BASELINE)
    assert mismatches == [] and notes[0].startswith("30 samples re-verified under verifier 1")


def test_rescore_of_the_committed_baseline_names_the_one_changed_extraction():
    report = rescore_manifest(load_manifest(BASELINE))
    assert (report.recorded_version, report.version, report.samples) == (1, 5, 30)
    assert (report.recorded_correct, report.correct, report.verdicts_changed) == (0, 0, 0)
    assert [(c.problem_id, c.recorded_extracted, c.extracted, c.correct) for c in report.changes] == [
        ("2024-I-2", None, "10", False)]  # "the final answer is $xy = 10$"; the key is 25


def test_rescore_counts_changed_verdicts():
    report = rescore_manifest(_manifest(version=1))
    assert (report.recorded_correct, report.correct, report.verdicts_changed) == (2, 1, 3)
    assert rescore_manifest(_manifest(version=1), version=1).changes == ()


def test_cli_rescore_is_a_labelled_report_and_leaves_the_exit_status_to_the_check(tmp_path):
    result = runner.invoke(app, ["verify-manifest", str(BASELINE), "--rescore"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Re-score under verifier 5 (recorded under verifier 1); not part of the check" in result.output
    assert "2024-I-2" in result.output and result.output.rstrip().endswith(f"ok {BASELINE}")
    tampered = json.loads(BASELINE.read_text(encoding="utf-8"))
    tampered["samples"][0]["decode_tokens"] += 1
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(tampered), encoding="utf-8")
    result = runner.invoke(app, ["verify-manifest", str(path), "--rescore"], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "Re-score under verifier 5" in result.output
