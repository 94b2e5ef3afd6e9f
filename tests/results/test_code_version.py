"""Manifests record the code version that wrote them (``environment.code``, graftbench/util/provenance.py), sealed
with the rest, and replay log lines the code that replayed (``code``); committed manifests written before it still
verify; a replay of an expectation never compares it. The code version is the one read when the work started, not
when the file is written, and a resumed run lists the code of the earlier processes that appended to its journal
(``environment.code_resumed_from``).

No model: run manifests are built from hand-made samples, and the expectation is written and replayed by the
stand-in engine (tests/stand_in_engine.py) through the command line."""

from __future__ import annotations

import copy
import json
import re

from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.programs import replay as program_replay
from graftbench.results.anchor import exactness_shape
from graftbench.results.exact_manifest import (build_exactness_manifest, replay_record, reused_code,
                                               seal_exactness_manifest, verify_exactness_manifest)
from graftbench.results.fingerprint import pin_fingerprint
from graftbench.results.manifest import build_manifest, verify_manifest, write_manifest
from graftbench.settings import EvalSettings
from graftbench.util.hashing import sha256_text
from graftbench.results.runs import APPENDERS_NAME, UNRECORDED_CODE, contributors
from graftbench.util import provenance
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


def test_a_program_replay_log_line_says_which_code_replayed_it():
    record = program_replay.log_record("m.json", {"manifest_sha256": "m" * 64}, [], 0, "no sandbox asked")
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


# ---- the code version is read when the work starts, not when its file is written ----

COMMIT_AT_START, COMMIT_LATER = "a" * 40, "b" * 40


def _moving_checkout(monkeypatch, module, function: str) -> dict:
    """The checkout's HEAD as graftbench/util/provenance.py reads it, moved from :data:`COMMIT_AT_START` to
    :data:`COMMIT_LATER` once ``module.function`` (a step of the work: a pair measured, a problem run) has run once,
    as a checkout pulled while a long recording runs. Returns the dict holding the current commit."""
    head = {"commit": COMMIT_AT_START}
    monkeypatch.setattr(provenance, "_checkout", lambda source: (head["commit"], False, None))
    step = getattr(module, function)

    def step_then_move(*args, **kwargs):
        try:
            return step(*args, **kwargs)
        finally:
            head["commit"] = COMMIT_LATER

    monkeypatch.setattr(module, function, step_then_move)
    return head


def test_check_exact_records_the_code_it_started_with_and_a_resumed_journal_the_code_of_each_process(
        stand_in, tmp_path, monkeypatch):
    from graftbench.eval import exactness

    runs, expect = tmp_path / "runs", tmp_path / "expect.json"
    model = ["--engine", stand_in_engine.NAME, "--model", stand_in_engine.MODEL_PREFIX, "--chunk-size", "16"]
    head = _moving_checkout(monkeypatch, exactness, "check_pair")
    _invoke("check-exact", *model, "--samples", "2", "--write-expect", str(expect), "--runs-dir", str(runs))
    assert head["commit"] == COMMIT_LATER  # the checkout moved while the pairs were measured
    first = json.loads(expect.read_text())
    assert first["environment"]["code"]["commit"] == COMMIT_AT_START
    assert "code_resumed_from" not in first["environment"]  # nothing resumed: the field is absent

    head["commit"] = "c" * 40  # a later process resumes the journal and measures one pair more
    _invoke("check-exact", *model, "--samples", "3", "--write-expect", str(expect), "--runs-dir", str(runs))
    resumed = json.loads(expect.read_text())
    assert resumed["environment"]["code"]["commit"] == "c" * 40
    assert [c["commit"] for c in resumed["environment"]["code_resumed_from"]] == [COMMIT_AT_START]
    assert resumed["pairs"][:2] == first["pairs"]  # the journal's records are reused as they were
    assert verify_exactness_manifest(resumed) == [] and exactness_shape(resumed) == []

    (folder,) = runs.iterdir()  # a journal written before processes recorded their code: unrecorded, said so
    (folder / APPENDERS_NAME).unlink()
    _invoke("check-exact", *model, "--samples", "3", "--write-expect", str(expect), "--runs-dir", str(runs))
    assert json.loads(expect.read_text())["environment"]["code_resumed_from"] == [UNRECORDED_CODE]


def test_solve_records_the_code_it_started_with_and_a_resumed_run_the_code_of_each_process(
        stand_in, tmp_path, monkeypatch):
    from graftbench.eval import evaluate

    runs = tmp_path / "runs"
    model = ["--engine", stand_in_engine.NAME, "--model", stand_in_engine.MODEL_PREFIX, "--chunk-size", "16"]
    solve = ["solve", *model, "--limit", "3", "--max-new-tokens", "2", "--run", "r", "--runs-dir", str(runs)]
    head = _moving_checkout(monkeypatch, evaluate, "run_problem")
    _invoke(*solve)
    run = runs / "r"
    manifest = json.loads((run / "manifest.json").read_text())
    assert head["commit"] == COMMIT_LATER and manifest["environment"]["code"]["commit"] == COMMIT_AT_START
    assert "code_resumed_from" not in manifest["environment"]

    lines = (run / "samples.jsonl").read_text().splitlines(keepends=True)
    (run / "samples.jsonl").write_text("".join(lines[:2]))  # as if killed after two problems
    (run / "manifest.json").unlink()
    head["commit"] = "c" * 40
    _invoke(*solve)
    resumed = json.loads((run / "manifest.json").read_text())
    assert resumed["environment"]["code"]["commit"] == "c" * 40
    assert [c["commit"] for c in resumed["environment"]["code_resumed_from"]] == [COMMIT_AT_START]
    assert verify_manifest(run / "manifest.json")[0] == []
    edited = copy.deepcopy(resumed)
    edited["environment"]["code_resumed_from"] = []
    write_manifest(edited, run / "edited.json")
    assert any("environment.code_resumed_from" in line for line in verify_manifest(run / "edited.json")[0])


def test_the_processes_that_appended_a_journal_are_named_by_the_records_each_added():
    a, b = {"commit": "a"}, {"commit": "b"}
    assert contributors([], 0) == [] and contributors([], 4) == [UNRECORDED_CODE]
    assert contributors([{"code": a, "records_before": 0}, {"code": b, "records_before": 3}], 5) == [a, b]
    # a process that appended nothing (killed before its first record) contributed nothing
    assert contributors([{"code": a, "records_before": 0}, {"code": b, "records_before": 3}], 3) == [a]
    # records before the first line came from a process that recorded none; one code listed once
    assert contributors([{"code": a, "records_before": 2}, {"code": b, "records_before": 3},
                         {"code": a, "records_before": 4}], 6) == [UNRECORDED_CODE, a, b]
    # an unreadable line: the records between the readable lines around it are not claimed for any code
    assert contributors([{"code": a, "records_before": 0}, None, {"code": b, "records_before": 4}], 6) == \
        [UNRECORDED_CODE, b]


def test_the_writers_record_the_code_they_are_given_not_the_code_read_when_writing(monkeypatch, tmp_path):
    from graftbench.bench.history import write_json_and_markdown

    monkeypatch.setattr(provenance, "_checkout", lambda source: (COMMIT_LATER, False, None))
    given = {"version": "0.0.1", "commit": COMMIT_AT_START, "dirty": False, "reason": None}
    expected = json.loads(EXPECTATION.read_text())
    record = replay_record(expected, compared=1, equal=1, first_difference=None, pin_differences_found=[],
                           code=given)
    assert record["code"] == given
    log = program_replay.log_record("m.json", {"manifest_sha256": "m" * 64}, [], 0, "no sandbox asked", code=given)
    assert log["code"] == given
    json_path, _ = write_json_and_markdown({"environment": {}}, "# t\n", tmp_path, "bench-m", code=given)
    assert json.loads(json_path.read_text())["provenance"]["code"] == given
    assert provenance.provenance()["code"]["commit"] == COMMIT_LATER  # without a value given: read now


def test_an_extension_names_the_code_of_the_expectation_it_extends_then_its_journals():
    a, b, c = {"commit": "a"}, {"commit": "b"}, {"commit": "c"}
    assert reused_code(None, [a]) == [a]
    assert reused_code({"environment": {}}, [a]) == [UNRECORDED_CODE, a]  # an expectation written before `code`
    assert reused_code({"environment": {"code": b, "code_resumed_from": [a]}}, [a, c]) == [b, a, c]
