"""Inputs and defaults that work from any folder: the commands that read runs accept the same arguments (a run
folder, a run manifest) and refuse the same ones; ``report`` names the command that checks artifact payloads, not an
option it lacks; the benchmark commands' default ``../shared/data/`` problem files are found beside the checkout, or
the error names ``--problems builtin``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graftbench import api
from graftbench.cli.app import app
from graftbench.problems.sources import MissingDataFile, data_file
from graftbench.report.compare import ReportError
from graftbench.results.manifest import NO_STORE, ManifestError

from tests.conftest import REFERENCE_MANIFESTS, ROOT

runner = CliRunner()
BASELINE = REFERENCE_MANIFESTS / "aime2025-smollm2-135m-baseline.json"
GRAFT = REFERENCE_MANIFESTS / "transfer-smollm2-135m-graft.json"  # grafted 12 artifacts: payloads to check


@pytest.fixture
def run_folder(tmp_path) -> Path:
    folder = tmp_path / "runs" / "baseline"
    folder.mkdir(parents=True)
    shutil.copy(BASELINE, folder / "manifest.json")
    return folder


def _invoke(*args) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})
    return result.exit_code, result.output


def test_a_run_folder_and_its_manifest_are_accepted_alike_by_every_command_that_reads_runs(run_folder, tmp_path):
    for given in (run_folder, f"{run_folder}/", run_folder / "manifest.json"):
        code, output = _invoke("verify-manifest", given)
        assert code == 0 and f"ok {Path(given)}" in output, output
        code, output = _invoke("report", given, "--out", tmp_path / "report", "--resamples", "100")
        assert code == 0, output
        assert api.verify_manifest(given).exit_code() == 0
        assert list(api.load_runs([given])["run"]) == ["aime2025-smollm2-135m-baseline"]
        assert len(api.load_samples([given])) == 30


def test_a_folder_without_a_manifest_or_a_missing_path_is_refused_alike(tmp_path):
    empty = tmp_path / "runs" / "unfinished"
    empty.mkdir(parents=True)
    for given in (empty, tmp_path / "runs" / "absent"):
        for command in ("verify-manifest", "report"):
            code, output = _invoke(command, given)
            assert code == 2 and str(given) in output, (command, output)
        with pytest.raises(ManifestError):
            api.verify_manifest(given)
        with pytest.raises(ReportError):
            api.load_runs([given])


def test_report_names_the_command_that_checks_payloads_and_no_option_it_lacks(tmp_path):
    code, output = _invoke("report", GRAFT, "--out", tmp_path / "report", "--resamples", "100")
    assert code == 0, output
    assert "--store" not in _invoke("report", "--help")[1]  # report has no --store option ...
    assert NO_STORE not in output  # ... so it never tells the user to pass one
    assert (f"12 artifact payloads not checked (report reads no store; `graftbench verify-manifest {GRAFT} --store "
            "STORE` checks them") in output
    code, output = _invoke("verify-manifest", GRAFT)  # verify-manifest has --store: its line names it
    assert code == 4 and f"12 artifact payloads not checked ({NO_STORE})" in output


def test_a_shared_data_file_is_found_from_the_working_folder_then_beside_the_checkout(tmp_path):
    checkout = tmp_path / "work" / "checkout"
    (tmp_path / "work" / "shared" / "data").mkdir(parents=True)
    (tmp_path / "work" / "shared" / "data" / "set.jsonl").write_text("{}\n")
    checkout.mkdir()
    elsewhere = tmp_path / "elsewhere" / "deep"
    elsewhere.mkdir(parents=True)
    assert data_file("../shared/data/set.jsonl", cwd=checkout, checkout=checkout) == "../shared/data/set.jsonl"
    assert data_file("../shared/data/set.jsonl", cwd=elsewhere, checkout=checkout) == str(
        tmp_path / "work" / "shared" / "data" / "set.jsonl")
    for other in ("builtin", "builtin:1-2", "owner/dataset", "mine.jsonl", str(tmp_path / "x.jsonl")):
        assert data_file(other, cwd=elsewhere, checkout=checkout) == other  # never redirected
    with pytest.raises(MissingDataFile, match=r"no such file from this folder .* nor beside the checkout .*"
                                              r"pass --problems builtin"):
        data_file("../shared/data/other.jsonl", cwd=elsewhere, checkout=checkout)


def test_bench_from_an_empty_folder_names_its_fix_when_the_data_is_nowhere(tmp_path, monkeypatch):
    monkeypatch.setattr("graftbench.util.checkout.ROOT", tmp_path / "no-checkout" / "here")
    for args in (["bench", "--smoke"], ["bench-isa"], ["bench-portable"]):  # each refuses before any model loads
        code, output = _invoke(*args)
        assert code == 2 and "../shared/data/aime2024.jsonl: no such file" in output, output
        assert "pass --problems builtin" in output


def test_bench_smoke_runs_from_an_empty_folder_with_its_default_problems(session, tmp_path):
    """The working folder is an empty temporary one (tests/conftest.py); the default ../shared/data file is found
    beside the checkout. The store-scale section alone keeps it short."""
    assert not Path("../shared/data/aime2024.jsonl").exists() and (ROOT.parent / "shared" / "data").is_dir()
    code, output = _invoke("bench", "--smoke", "--only", "store-scale", "--out", tmp_path / "out")
    assert code == 0, output
    assert (tmp_path / "out" / "store-scale-smoke.json").is_file()
