"""What a self-hash cannot vouch for: forgeries re-sealed with graftbench's own functions are caught by the problem
set (its SHA-256, every key, every problem sampled as often as the settings say), by the schema (a document whose
content is not what its schema says, a verifier version lower than its schema requires) and by the results index
(manifests/SHA256SUMS). No model: committed manifests, edited and sealed again."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
from pathlib import Path, PurePosixPath

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.util.hashing import sha256_json, sha256_text
from graftbench.results.manifest import (ManifestRefused, compute_totals, load_manifest, run_metrics, seal_sha256,
                                         sealed_fields, write_manifest)
from graftbench.results.anchor import INDEX_NAME, ProblemSet, index_text, read_index, resolve_recorded
from graftbench.results.exact_manifest import SCHEMA as EXACTNESS_SCHEMA, seal_exactness_manifest
from graftbench.results.check import EXIT_UNANCHORED, check_manifest, verify_file
from graftbench.problems.loading import generated_by_id, is_generated, load_problems
from graftbench.problems.types import problem_set_sha256
from graftbench.report.compare import ReportError, UnanchoredRun, build_report
from graftbench.verify.answers import verify_answer
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = REFERENCE_MANIFESTS
RESULTS = ROOT / "manifests"  # the manifests root: the index lists paths relative to it
AIME2025 = MANIFESTS / "aime2025-smollm2-135m-baseline.json"
AVG4 = MANIFESTS / "transfer-qwen2.5-coder-0.5b-baseline-avg4.json"
runner = CliRunner()


def _resealed(manifest: dict) -> dict:
    """What a forger does after an edit: totals, metrics, field digests and the seal recomputed."""
    body = {k: v for k, v in manifest.items() if k not in ("manifest_sha256", "sealed_fields")}
    body["totals"] = compute_totals(body["samples"])
    if "metrics" in body:
        body["metrics"] = run_metrics(body["samples"], body["problems"], body["settings"])
    body["sealed_fields"] = sealed_fields(body)
    return {**body, "manifest_sha256": seal_sha256(body, body["schema"])}


def _forged(path: Path, tmp_path: Path, edit) -> Path:
    manifest = copy.deepcopy(load_manifest(path))
    edit(manifest)
    out = tmp_path / path.name
    write_manifest(_resealed(manifest), out)
    return out


def _drop_first_problem(manifest: dict) -> None:
    dropped = manifest["problems"].pop(0)["id"]
    manifest["samples"] = [s for s in manifest["samples"] if s["problem_id"] != dropped]
    manifest["problem_set"]["n"] -= 1


def test_an_untouched_copy_of_a_committed_manifest_verifies_anchored_to_its_problem_file(tmp_path):
    copied = tmp_path / AIME2025.name
    shutil.copy(AIME2025, copied)
    mismatches, notes = check_manifest(copied)
    assert mismatches == []
    assert "problem set anchored to ../shared/data/aime2025.jsonl (30 problems)" in notes


def test_a_dropped_failed_problem_is_caught_by_the_problem_set_it_names(tmp_path):
    forged = _forged(AIME2025, tmp_path, _drop_first_problem)
    assert load_manifest(forged)["totals"]["samples"] == 29
    mismatches, _ = check_manifest(forged)
    assert mismatches == ["problems: the manifest lists 29 problems, not the 30 of the problem set in its order",
                          "samples: 1 problems of the set do not have 1 samples each (settings.samples): "
                          "2025-I-1 has 0"]


def test_a_key_changed_to_the_models_answer_is_caught_by_the_problem_file(tmp_path):
    def edit(manifest):
        sample, problem = manifest["samples"][0], manifest["problems"][0]
        sample["output"] += "\nFinal answer: 12"
        sample["output_sha256"] = sha256_text(sample["output"])
        sample["key"] = problem["key"] = "12"
        verdict = verify_answer(sample["output"], "12", sample["cue"], version=2)
        sample["extracted"], sample["correct"] = verdict.extracted, verdict.correct

    forged = _forged(AIME2025, tmp_path, edit)
    assert load_manifest(forged)["totals"]["correct"] == 1
    mismatches, _ = check_manifest(forged)
    assert mismatches == ["problem 2025-I-1: key '12' is not the problem set's '70'",
                          "sample 2025-I-1: key '12' is not the problem set's '70'"]


def test_a_missing_sample_of_an_avg4_run_is_caught_by_settings_samples(tmp_path):
    def edit(manifest):
        manifest["samples"] = [s for s in manifest["samples"]
                               if not (s["problem_id"] == "mod-2" and s["sample_index"] == 3)]

    mismatches, _ = check_manifest(_forged(AVG4, tmp_path, edit))
    assert mismatches == ["samples: 1 problems of the set do not have 4 samples each (settings.samples): mod-2 has 3"]


def test_a_recorded_source_graftbench_cannot_rebuild_is_not_anchored_exit_3_and_problems_anchors_it(tmp_path):
    def edit(manifest):
        _drop_first_problem(manifest)
        manifest["problem_set"]["source"] = "elsewhere/aime2025-copy.jsonl"

    forged = _forged(AIME2025, tmp_path, edit)
    checked = verify_file(forged)
    why = ("its source 'elsewhere/aime2025-copy.jsonl' is not a generated set, and no regular file of its name is in "
           "../shared/data/ here")
    assert (checked.mismatches, checked.unanchored, checked.exit_code()) == ([], why, EXIT_UNANCHORED)
    assert f"problem set not anchored: {why}" in checked.notes
    result = runner.invoke(app, ["verify-manifest", str(forged)], env={"COLUMNS": "400"})
    assert result.exit_code == 3 and f"not checked {forged}: problem set not anchored: {why}" in result.output
    assert "\nok " not in result.output and "--allow-unanchored" in result.output
    result = runner.invoke(app, ["verify-manifest", str(forged), "--allow-unanchored"], env={"COLUMNS": "400"})
    assert result.exit_code == 0 and f"verified, except {forged}: problem set not anchored: {why}" in result.output
    named = ProblemSet(tuple(load_problems(str(ROOT.parent / "shared" / "data" / "aime2025.jsonl"))), "aime", True)
    mismatches, _ = check_manifest(forged, problems=named)
    assert mismatches[0] == "problems: the manifest lists 29 problems, not the 30 of the problem set in its order"
    result = runner.invoke(app, ["verify-manifest", str(forged), "--problems", "builtin"], env={"COLUMNS": "250"})
    assert result.exit_code == 1
    assert "mismatch problem_set.sha256: recorded 'e2ffcf16" not in result.output  # the AIME 2024 digest
    assert "mismatch problem_set.sha256: recorded '26c7f868fffeba62', the problem set (12 problems)" in result.output


def test_a_recorded_path_of_another_machine_is_looked_up_by_its_file_name_in_the_data_folder(tmp_path):
    def edit(manifest):
        _drop_first_problem(manifest)
        manifest["problem_set"]["source"] = "/home/someone/data/aime2025.jsonl"

    forged = _forged(AIME2025, tmp_path, edit)
    checked = verify_file(forged)
    assert checked.unanchored is None
    assert "problem set anchored to ../shared/data/aime2025.jsonl (30 problems)" in checked.notes
    assert checked.mismatches[0] == ("problems: the manifest lists 29 problems, not the 30 of the problem set in its "
                                     "order")


def test_a_problems_file_that_cannot_be_read_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["verify-manifest", str(AIME2025), "--problems", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 2 and "none.jsonl" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("edit", "line"), [
    (lambda m: m["settings"].pop("verifier_version"),
     "settings.verifier_version: missing; a graftbench.manifest/2 manifest records the verifier version its "
     "samples were scored under (2 or later)"),
    (lambda m: m["settings"].update(verifier_version=1),
     "settings.verifier_version: 1 is lower than graftbench.manifest/2 requires (2 or later)"),
])
def test_a_verifier_version_removed_or_lowered_below_the_schemas_is_a_mismatch(tmp_path, edit, line):
    mismatches, _ = check_manifest(_forged(AIME2025, tmp_path, edit))
    assert mismatches[0] == line


def test_a_schema_lowered_to_1_with_its_verifier_version_kept_is_a_mismatch(tmp_path):
    mismatches, _ = check_manifest(_forged(AIME2025, tmp_path, lambda m: m.update(schema="graftbench.manifest/1")))
    assert mismatches[0] == ("settings.verifier_version: not a field of graftbench.manifest/1, written before "
                             "verifier versions were recorded")


def test_a_run_manifest_relabelled_as_an_exactness_manifest_is_refused(tmp_path):
    manifest = load_manifest(AIME2025)
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    body["schema"] = "graftbench.exactness/1"
    body["pairs"] = []
    path = tmp_path / "relabelled.json"
    path.write_text(json.dumps({**body, "manifest_sha256": sha256_json(body)}), encoding="utf-8")
    with pytest.raises(ManifestRefused, match="is not what its schema 'graftbench.exactness/1' says it is: "
                                              "artifacts: not a field of graftbench.exactness/1"):
        check_manifest(path)
    result = runner.invoke(app, ["verify-manifest", str(path)], env={"COLUMNS": "250"})
    assert result.exit_code == 1 and "is not what its schema 'graftbench.exactness/1' says it is" in result.output


def test_an_exactness_manifest_relabelled_as_a_run_manifest_is_refused(tmp_path):
    manifest = json.loads((MANIFESTS / "exact-smollm2-135m.json").read_text(encoding="utf-8"))
    manifest["schema"] = "graftbench.manifest/2"
    path = tmp_path / "relabelled.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(ManifestRefused, match="command: required by graftbench.manifest/2 but missing.*"
                                              "pairs: a field of another kind of document"):
        check_manifest(path)


def test_the_results_index_lists_every_committed_manifest_with_its_sha256_and_no_other_file():
    index = RESULTS / INDEX_NAME
    assert index.read_text(encoding="utf-8") == index_text(RESULTS)
    listed = read_index(index)
    assert sorted(listed) == sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.glob("*/**/*.json"))
    assert "intel-xeon-amx/exact-smollm2-135m.json" in listed
    bench = ROOT / "results" / "amd-epyc-avx512" / "bench" / "bench-smollm2-135m.json"
    assert bench.is_file() and all(not name.endswith(bench.name) for name in listed)


@pytest.mark.parametrize("name", ["amd-epyc-avx512/aime2025-smollm2-135m-baseline.json",
                                  "intel-xeon-amx/exact-smollm2-135m.json"])
def test_a_resealed_forgery_under_a_committed_name_is_caught_by_the_index(tmp_path, name):
    (tmp_path / name).parent.mkdir(parents=True)
    shutil.copy(RESULTS / INDEX_NAME, tmp_path / INDEX_NAME)
    target = tmp_path / name
    text = (RESULTS / name).read_text(encoding="utf-8")
    target.write_text(text, encoding="utf-8")
    assert check_manifest(target)[0] == []
    if "/exact-" in name:  # an exactness manifest: a pair's recorded figure changed and sealed again
        manifest = json.loads(text)
        manifest["created_utc"] = "2020-01-01T00:00:00Z"
        body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
        target.write_text(json.dumps({**body, "manifest_sha256": sha256_json(body)}), encoding="utf-8")
    else:  # a wrong sample's output replaced by the key and sealed again: self-consistent
        def edit(manifest):
            sample = manifest["samples"][0]
            sample["output"] = f"Final answer: {sample['key']}"
            sample["output_sha256"] = sha256_text(sample["output"])
            sample["extracted"], sample["correct"] = sample["key"], True

        forged = _forged(RESULTS / name, tmp_path, edit)
        shutil.move(forged, target)
    mismatches, _ = check_manifest(target)
    recorded = read_index(RESULTS / INDEX_NAME)[name]
    assert mismatches == [f"the file's SHA-256 is not the {recorded[:16]} that {tmp_path / INDEX_NAME} records for "
                          f"{name}"]


def test_report_refuses_a_manifest_that_does_not_verify_naming_it(tmp_path):
    forged = _forged(AIME2025, tmp_path, _drop_first_problem)
    with pytest.raises(ReportError, match=rf"'{forged}' does not verify \(2 mismatches; `graftbench verify-manifest"):
        build_report([AIME2025, forged])
    result = runner.invoke(app, ["report", str(forged), "--out", str(tmp_path / "rep")], env={"COLUMNS": "250"})
    assert result.exit_code == 2 and "does not verify" in result.output and not (tmp_path / "rep").exists()


def test_report_refuses_an_unanchored_run_unless_allowed_and_says_which_parts_it_could_not_verify(tmp_path):
    graft = MANIFESTS / "transfer-smollm2-135m-graft.json"
    report = build_report([AIME2025, MANIFESTS / "flywheel-smollm2-135m-r1-graft.json", graft], resamples=100)
    assert [run.unverified for run in report.runs] == [
        (), (), (f"12 artifact payloads not checked (report reads no store; `graftbench verify-manifest {graft} "
                 "--store STORE` checks them against the store they were grafted from)",)]
    moved = _forged(AIME2025, tmp_path, lambda m: m["problem_set"].update(source="elsewhere.jsonl"))
    why = ("its source 'elsewhere.jsonl' is not a generated set, and no regular file of its name is in "
           "../shared/data/ here")
    with pytest.raises(UnanchoredRun, match=re.escape(f"'{moved}' is not anchored: {why}")):
        build_report([moved])
    out = tmp_path / "rep"
    result = runner.invoke(app, ["report", str(moved), "--out", str(out), "--resamples", "100"],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 3 and "is not anchored" in result.output and not out.exists()
    result = runner.invoke(app, ["report", str(moved), "--out", str(out), "--resamples", "100", "--allow-unanchored"],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert f"verified, except: problem set not anchored: {why}" in (out / "report.md").read_text()


def test_an_exactness_manifest_is_anchored_to_a_named_problem_set_by_its_sha256():
    expectation = MANIFESTS / "exact-smollm2-135m.json"
    aime = str(ROOT.parent / "shared" / "data" / "aime2024.jsonl")
    assert check_manifest(expectation, problems=ProblemSet(tuple(load_problems(aime)), "aime2024", True)) == (
        [], ["exactness manifest re-checked", "problem set anchored to aime2024 (30 problems, by SHA-256)",
             f"the file's SHA-256 is the one {RESULTS / INDEX_NAME} records for it"])
    mismatches, _ = check_manifest(expectation, problems=ProblemSet(tuple(load_problems("builtin")), "builtin", True))
    assert mismatches == ["problem_set.sha256: recorded 'e2ffcf162467ca41', the problem set (12 problems) is "
                          "'912e2d8ef4440cc3'"]


def test_a_recorded_source_with_markup_is_printed_as_data(tmp_path):
    source = "[/x] [green]ok[/green]"
    forged = _forged(MANIFESTS / "transfer-smollm2-135m-baseline.json", tmp_path,
                     lambda m: m["problem_set"].update(source=source))
    result = runner.invoke(app, ["verify-manifest", str(forged)], env={"COLUMNS": "250"})
    assert result.exit_code == 3, result.output
    assert f"problem set not anchored: its source {source!r} is not a generated set" in result.output


def test_a_sample_whose_problem_id_is_not_a_string_is_counted_as_missing_not_a_crash(tmp_path):
    manifest = copy.deepcopy(load_manifest(AIME2025))
    manifest["samples"][0]["problem_id"] = ["2025-I-1"]
    body = {k: v for k, v in manifest.items() if k not in ("manifest_sha256", "sealed_fields")}
    body["sealed_fields"] = sealed_fields(body)
    forged = tmp_path / "forged.json"
    write_manifest({**body, "manifest_sha256": seal_sha256(body)}, forged)
    mismatches, _ = check_manifest(forged)
    assert "samples: 1 problems of the set do not have 1 samples each (settings.samples): 2025-I-1 has 0" in mismatches


def _sealed_exactness(tmp_path, manifest: dict) -> Path:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    path = tmp_path / "exact.json"
    path.write_text(json.dumps({**body, "manifest_sha256": sha256_json(body)}), encoding="utf-8")
    return path


def test_a_llama_cpp_certificate_commits_each_deposit_by_its_state_hash_and_one_without_it_is_refused(tmp_path):
    manifest = json.loads((MANIFESTS / "exact-smollm2-135m-llama-f16.json").read_text(encoding="utf-8"))
    assert all(isinstance(p["state_sha256"], str) and len(p["state_sha256"]) == 64 for p in manifest["pairs"])
    assert verify_file(MANIFESTS / "exact-smollm2-135m-llama-f16.json").mismatches == []  # as committed, it holds
    del manifest["pairs"][3]["state_sha256"]
    with pytest.raises(ManifestRefused, match=r"pairs: 1 entries \(first at index 3\) are not llama.cpp pair records "
                                              r"with .*state_sha256"):
        check_manifest(_sealed_exactness(tmp_path, manifest))


def test_an_exactness_manifest_whose_engine_section_names_no_engine_is_refused(tmp_path):
    manifest = json.loads((MANIFESTS / "exact-smollm2-135m-llama-f16.json").read_text(encoding="utf-8"))
    manifest["config"]["engine"] = "vllm"
    with pytest.raises(ManifestRefused, match="config.engine: 'vllm' is not an engine section"):
        check_manifest(_sealed_exactness(tmp_path, manifest))


def test_an_exactness_manifest_of_another_engine_commits_its_deposits_by_their_state_hash(tmp_path):
    """results/ knows artifact kinds, not engines: a pin whose engine section names an engine outside the package
    (one registered through graftbench.engine.registry) is checked as any engine state's certificate."""
    manifest = json.loads((MANIFESTS / "exact-smollm2-135m-llama-f16.json").read_text(encoding="utf-8"))
    manifest["config"]["engine"]["engine"] = "vllm"
    del manifest["pairs"][0]["state_sha256"]
    with pytest.raises(ManifestRefused, match=r"are not vllm pair records with .*state_sha256"):
        check_manifest(_sealed_exactness(tmp_path, manifest))


def test_a_torch_certificate_needs_its_artifact_ids(tmp_path):
    manifest = json.loads((MANIFESTS / "exact-smollm2-135m.json").read_text(encoding="utf-8"))
    del manifest["pairs"][0]["artifact_id"]
    with pytest.raises(ManifestRefused, match="are not torch pair records with artifact_id"):
        check_manifest(_sealed_exactness(tmp_path, manifest))


FLYWHEEL_R1 = MANIFESTS / "flywheel-smollm2-135m-r1-graft.json"  # a round's 12 problems of builtin, 0 of 48 correct


def _key_to_the_models_answer(manifest: dict, resealed_set: bool) -> None:
    """The forgery of a flywheel round: problem mod-2's key becomes the model's wrong answer '1' (its third sample),
    so 0 of 48 correct becomes 1; with ``resealed_set`` the forger also recomputes ``problem_set.sha256`` over the
    builtin problems with the new key."""
    problem = next(p for p in manifest["problems"] if p["id"] == "mod-2")
    problem["key"] = "1"
    for sample in manifest["samples"]:
        if sample["problem_id"] == "mod-2":
            sample["key"] = "1"
            verdict = verify_answer(sample["output"], "1", sample["cue"], version=2)
            sample["extracted"], sample["correct"] = verdict.extracted, verdict.correct
    if resealed_set:
        made = generated_by_id("builtin", [p["id"] for p in manifest["problems"]])
        forged = [dataclasses.replace(made[p["id"]], answer=p["key"]) for p in manifest["problems"]]
        manifest["problem_set"]["sha256"] = problem_set_sha256(forged)


@pytest.mark.parametrize("resealed_set", [False, True], ids=["set-digest-kept", "set-digest-recomputed"])
def test_a_resealed_forgery_of_a_flywheel_round_outside_results_is_refused(tmp_path, resealed_set):
    assert verify_file(FLYWHEEL_R1).exit_code() == 0  # the committed round verifies, anchored by id
    forged = _forged(FLYWHEEL_R1, tmp_path, lambda m: _key_to_the_models_answer(m, resealed_set))
    assert load_manifest(forged)["totals"]["correct"] == 1 and RESULTS not in forged.parents
    result = runner.invoke(app, ["verify-manifest", str(forged)], env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    assert "problem set anchored to builtin:2-4 (12 problems, by id)" in result.output
    assert "mismatch problem mod-2: key '1' is not the problem set's '281'" in result.output
    assert ("mismatch problem_set.sha256" in result.output) is resealed_set
    assert "\nok " not in result.output and "verified, except" not in result.output


def test_a_subset_naming_a_problem_the_generator_does_not_make_is_not_anchored(tmp_path):
    def edit(manifest):
        manifest["problems"][0]["id"] = "mod-999"
        for sample in manifest["samples"]:
            sample["problem_id"] = "mod-999" if sample["problem_id"] == "mod-2" else sample["problem_id"]

    checked = verify_file(_forged(FLYWHEEL_R1, tmp_path, edit))
    assert checked.mismatches == [] and checked.exit_code() == EXIT_UNANCHORED
    assert checked.unanchored.endswith("and as a subset of builtin: problem 'mod-999' is not one builtin generates")


def test_an_irregular_subset_is_anchored_problem_by_problem():
    recurring = MANIFESTS / "flywheel-qwen2.5-coder-0.5b-program-r1-recurring.json"
    checked = verify_file(recurring)
    assert checked.mismatches == [] and checked.unanchored is None
    assert "problem set anchored to 9 problems of builtin, by id" in checked.notes


def test_an_exactness_manifest_is_anchored_to_its_problem_file_and_unanchored_without_it(tmp_path):
    expectation = MANIFESTS / "exact-smollm2-135m-llama-q8_0.json"
    checked = verify_file(expectation)
    assert (checked.mismatches, checked.unanchored, checked.exit_code()) == ([], None, 0)
    assert "problem set anchored to ../shared/data/aime2024.jsonl (30 problems, by SHA-256)" in checked.notes
    problem_set, why = resolve_recorded(load_manifest(expectation, schema=EXACTNESS_SCHEMA), cwd=tmp_path)
    assert problem_set is None and why.endswith("no regular file of its name is in ../shared/data/ here")
    manifest = load_manifest(expectation, schema=EXACTNESS_SCHEMA)
    for source, sha256 in (("../shared/data/aime2030.jsonl", None), (None, "0" * 64)):
        edited = seal_exactness_manifest({**manifest, "problem_set": {
            **manifest["problem_set"], **({"source": source} if source else {}), **({"sha256": sha256} if sha256 else {})}})
        path = tmp_path / "expectation.json"
        write_manifest(edited, path)
        result = runner.invoke(app, ["verify-manifest", str(path)], env={"COLUMNS": "400"})
        assert result.exit_code == 3, result.output
        assert f"not checked {path}: problem set not anchored: " in result.output and "\nok " not in result.output


def test_no_committed_manifest_records_a_path_of_the_machine_that_made_it():
    """Every committed manifest names its problem set as a generated set or as ``../shared/data/<file>``. One
    exception, named: the H200 certificate records ``.gpu-carry/data/aime2024.jsonl`` (the GPU machine's copy of
    the data folder, relative to its checkout); it is anchored by that file name and its SHA-256, and it is not
    sealed again because manifests/replays.jsonl, a log never rewritten, names it by its manifest_sha256."""
    exceptions = {"nvidia-h200/exact-random-gemma3-12b-bf16.json": ".gpu-carry/data/aime2024.jsonl"}
    sources = {p.relative_to(RESULTS).as_posix(): json.loads(p.read_text(encoding="utf-8"))["problem_set"]["source"]
               for p in RESULTS.glob("*/*.json")}
    assert len(sources) >= 75
    odd = {name: source for name, source in sources.items()
           if not is_generated(source) and PurePosixPath(source).parent != PurePosixPath("../shared/data")}
    assert odd == exceptions


def test_a_store_that_does_not_exist_is_an_error_naming_it_never_ok(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    graft = MANIFESTS / "transfer-smollm2-135m-graft.json"
    result = runner.invoke(app, ["verify-manifest", str(graft), "--store", "nonexistent-store"],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "--store nonexistent-store cannot be read (nonexistent-store: no such folder)" in (
        result.output)
    assert "ok" not in result.output.split()
    (tmp_path / "not-a-store").mkdir()
    result = runner.invoke(app, ["verify-manifest", str(AIME2025), "--store", "not-a-store"], env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "no store at not-a-store" in result.output


def test_an_empty_store_leaves_payloads_unchecked_exit_4(tmp_path):
    (tmp_path / "store" / "artifacts").mkdir(parents=True)
    graft = MANIFESTS / "transfer-smollm2-135m-graft.json"
    result = runner.invoke(app, ["verify-manifest", str(graft), "--store", str(tmp_path / "store")],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 4, result.output
    assert "12 artifact payloads: 12 not checked (absent from the store)" in result.output
    assert "give their store with --store, or pass --allow-unchecked-payloads" in result.output


def test_verify_manifest_takes_a_run_folder_as_report_does(tmp_path):
    run = tmp_path / "runs" / "aime2025-baseline"
    run.mkdir(parents=True)
    shutil.copy(AIME2025, run / "manifest.json")
    result = runner.invoke(app, ["verify-manifest", str(run)], env={"COLUMNS": "400"})
    assert result.exit_code == 0 and f"ok {run}" in result.output, result.output
    result = runner.invoke(app, ["verify-manifest", str(tmp_path / "runs")], env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "manifest.json" in result.output and "does not exist" in result.output
