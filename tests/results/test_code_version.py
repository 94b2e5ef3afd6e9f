"""Manifests record the code version that wrote them (``environment.code``, graftbench/util/provenance.py), sealed
with the rest, and replay log lines the code that replayed (``code``); committed manifests written before it still
verify; a replay of an expectation never compares it.

No model: run manifests are built from hand-made samples, and the expectation is written and replayed by the
stand-in engine (tests/stand_in_engine.py) through the command line."""

from __future__ import annotations

import copy
import json
import re
from types import SimpleNamespace

from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.programs import replay as program_replay
from graftbench.results.anchor import exactness_shape
from graftbench.results.exact_manifest import (build_exactness_manifest, replay_record, seal_exactness_manifest,
                                               verify_exactness_manifest)
from graftbench.results.fingerprint import pin_fingerprint
from graftbench.results.manifest import build_manifest, verify_manifest, write_manifest
from graftbench.settings import EvalSettings
from graftbench.util.hashing import sha256_text
from graftbench.util.provenance import code_version

from tests import stand_in_engine
from tests.conftest import REFERENCE_MANIFESTS

BASELINE = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-baseline.json"  # written before environment.code
EXPECTATION = REFERENCE_MANIFESTS / "exact-smollm2-135m.json"
CODE_FIELDS = {"version", "commit", "dirty", "reason"}


def _manifest() -> dict:
    output, key = r"\boxed{7}", "7"
    sample = {"problem_id": "a", "problem_sha256": sha256_text("a"), "key": key, "mode": "baseline", "route": None,
              "similarity": None, "fallback": None, "cue": "", "prefill_tokens": 10, "prefill_tokens_saved": 0,
              "artifact_id": None, "artifact_tokens": 0, "logits_sha256": "0" * 64, "output": output,
              "output_sha256": sha256_text(output), "extracted": "7", "correct": True, "finish_reason": "eos",
              "decode_tokens": 5, "ttft_s": 0.1, "wall_s": 0.5, "energy_j": 1.0, "certificate_sha256": None,
              "certify_s": None, "certified": None}
    config = {"model": "m"}
    return build_manifest(run="r", command="solve", config=config, config_fingerprint=pin_fingerprint(config),
                          settings=EvalSettings().to_dict(), problem_set={"source": "hand", "sha256": "0" * 64, "n": 1},
                          problems=[{"id": "a", "problem_sha256": sample["problem_sha256"], "key": key}],
                          samples=[sample], energy={"method": "none"}, store=None)


def _is_code_version(code: dict) -> bool:
    """A :func:`code_version` dict: its four fields, a full commit or none with a reason."""
    commit = code.get("commit")
    return set(code) == CODE_FIELDS and code["version"] == code_version()["version"] and (
        bool(re.fullmatch(r"[0-9a-f]{40}", commit)) and isinstance(code["dirty"], bool) if commit
        else bool(code["reason"]))


def test_a_run_manifest_records_its_code_version_sealed_with_its_environment(tmp_path):
    manifest = _manifest()
    assert _is_code_version(manifest["environment"]["code"])
    assert "code" not in manifest["config"]  # not part of the pin
    path = tmp_path / "manifest.json"
    write_manifest(manifest, path)
    assert verify_manifest(path)[0] == []

    edited = copy.deepcopy(manifest)
    edited["environment"]["code"] = {**edited["environment"]["code"], "commit": "f" * 40, "dirty": False}
    write_manifest(edited, path)
    mismatches = verify_manifest(path)[0]
    assert "manifest_sha256 does not match the manifest's content" in mismatches
    assert any("environment.code" in line for line in mismatches), mismatches


def test_an_exactness_manifest_records_its_code_version_sealed_and_keeps_its_shape():
    expected = json.loads(EXPECTATION.read_text())
    manifest = build_exactness_manifest(config=expected["config"], config_fingerprint=expected["config_fingerprint"],
                                        problem_set=expected["problem_set"], settings=expected["settings"],
                                        records=expected["pairs"])
    assert _is_code_version(manifest["environment"]["code"]) and "code" not in manifest["config"]
    assert verify_exactness_manifest(manifest) == [] and exactness_shape(manifest) == []
    edited = copy.deepcopy(manifest)
    edited["environment"]["code"]["dirty"] = not edited["environment"]["code"]["dirty"]
    assert verify_exactness_manifest(edited) == ["manifest_sha256 does not match the manifest's content"]


def test_committed_manifests_written_before_the_code_version_still_verify():
    baseline, expected = json.loads(BASELINE.read_text()), json.loads(EXPECTATION.read_text())
    assert "code" not in baseline["environment"] and "code" not in expected["environment"]
    assert verify_manifest(BASELINE)[0] == []
    assert verify_exactness_manifest(expected) == [] and exactness_shape(expected) == []


def test_a_replay_record_says_which_code_replayed_it():
    expected = json.loads(EXPECTATION.read_text())
    record = replay_record(expected, compared=1, equal=1, first_difference=None, pin_differences_found=[])
    assert _is_code_version(record["code"]) and "code" not in record["recorded_on"]


def test_a_program_replay_log_line_says_which_code_replayed_it(monkeypatch):
    monkeypatch.setattr(program_replay, "isolation", lambda: SimpleNamespace(description="no sandbox asked"))
    record = program_replay.log_record("m.json", {"manifest_sha256": "m" * 64}, [], 0)
    assert _is_code_version(record["code"]) and record["isolation"] == "no sandbox asked"


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (args, result.output, result.exception)
    return " ".join(result.output.split())


def test_an_expectation_from_another_commit_replays_equal(stand_in, tmp_path):
    """Two machines or two commits replaying one expectation compare the pin and the pairs, never the code."""
    runs, expect = tmp_path / "runs", tmp_path / "expect.json"
    model = ["--engine", stand_in_engine.NAME, "--model", stand_in_engine.MODEL_PREFIX, "--chunk-size", "16"]
    _invoke("check-exact", *model, "--samples", "2", "--write-expect", str(expect), "--runs-dir", str(runs))
    written = json.loads(expect.read_text())
    assert _is_code_version(written["environment"]["code"])

    other = copy.deepcopy(written)
    other["environment"]["code"] = {"version": "0.0.1", "commit": "0" * 40, "dirty": True, "reason": None}
    expect.write_text(json.dumps(seal_exactness_manifest(other)))
    assert "2 compared, 2 equal" in _invoke("check-exact", "--expect", str(expect), "--runs-dir", str(runs))
    del other["environment"]["code"]  # and one written before the field existed
    expect.write_text(json.dumps(seal_exactness_manifest(other)))
    assert "2 compared, 2 equal" in _invoke("check-exact", "--expect", str(expect), "--runs-dir", str(runs))
