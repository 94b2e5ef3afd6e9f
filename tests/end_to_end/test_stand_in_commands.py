"""The stand-in engine (tests/stand_in_engine.py), registered through the public path and touching no module but its
own file and the registry, runs the commands a run is made of: ``solve``, ``deposit``, ``eval --graft --certify``,
``check-exact --controls`` (and its replay), and ``verify-manifest`` on what they wrote; a run manifest records
every option the command was given (``command_options``), sealed like the rest."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app

from tests import stand_in_engine

MODEL = ["--engine", stand_in_engine.NAME, "--model", stand_in_engine.MODEL_PREFIX, "--chunk-size", "16"]


def _invoke(*args: str) -> str:
    """Run the command; its output, one line per line, after checking it exited 0."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


def test_the_stand_in_engine_runs_solve_deposit_eval_check_exact_and_verify_manifest(stand_in, tmp_path):
    runs, store, expect = tmp_path / "runs", tmp_path / "store", tmp_path / "expect.json"
    _invoke("solve", *MODEL, "--limit", "3", "--max-new-tokens", "8", "--run", "baseline", "--runs-dir", str(runs))
    baseline = json.loads((runs / "baseline" / "manifest.json").read_text())
    assert baseline["config"]["engine"]["engine"] == stand_in_engine.NAME and baseline["command"] == "solve"
    assert baseline["command_options"] == {"--model": stand_in_engine.MODEL_PREFIX, "--chunk-size": 16,
                                           "--engine": stand_in_engine.NAME, "--runs-dir": str(runs),
                                           "--run": "baseline", "--limit": 3, "--max-new-tokens": 8}
    assert "3 deposited" in _invoke("deposit", *MODEL, "--limit", "3", "--store", str(store))
    _invoke("eval", *MODEL, "--limit", "3", "--max-new-tokens", "8", "--graft", "--certify", "--store", str(store),
            "--run", "grafted", "--runs-dir", str(runs))
    grafted = json.loads((runs / "grafted" / "manifest.json").read_text())
    assert [(s["mode"], s["certified"]) for s in grafted["samples"]] == [("graft", True)] * 3
    output = _invoke("check-exact", *MODEL, "--samples", "3", "--controls", "--control-pairs", "2",
                     "--write-expect", str(expect), "--runs-dir", str(runs))
    assert "3 of 3 pairs byte-exact" in " ".join(output.split())
    certificate = json.loads(expect.read_text())
    claimed = stand_in_engine.ENGINE.open(stand_in_engine.ENGINE.conformance_options).exactness().control_settings()
    assert certificate["settings"]["must_differ"] == claimed["must_differ"]
    assert all(pair["equal"] for pair in certificate["pairs"])
    assert {"--samples": 3, "--controls": True, "--engine": stand_in_engine.NAME}.items() <= \
        certificate["settings"]["command_options"].items()
    assert all(not pair["controls"][name]["equal"] for pair in certificate["pairs"][:2] for name in claimed["must_differ"])
    for manifest in (runs / "baseline" / "manifest.json", runs / "grafted" / "manifest.json", expect):
        assert "ok " in _invoke("verify-manifest", str(manifest), "--store", str(store))
    assert "3 compared, 3 equal" in _invoke("check-exact", "--expect", str(expect), "--runs-dir", str(runs))
    past_the_last = _invoke("check-exact", "--expect", str(expect), "--limit", "1000", "--runs-dir", str(runs))
    assert "pairs 0 to 2 of the expectation's 3 (0-based)" in past_the_last, past_the_last  # says which it replayed


def test_a_run_manifests_recorded_options_are_sealed(stand_in, tmp_path):
    runs = tmp_path / "runs"
    _invoke("solve", *MODEL, "--limit", "1", "--max-new-tokens", "2", "--run", "r", "--runs-dir", str(runs))
    path = runs / "r" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["command_options"]["--limit"] = 2
    path.write_text(json.dumps(manifest))
    result = CliRunner().invoke(app, ["verify-manifest", str(path), "--allow-unchecked-payloads"])
    assert result.exit_code == 1 and "command_options" in result.output, result.output


@pytest.mark.parametrize("args, refusal", [
    (["solve", *MODEL, "--executor", "ray", "--limit", "1"],
     "engine 'stand-in' does not support Ray workers (--executor ray)"),
    (["solve", *MODEL, "--dtype", "bfloat16", "--limit", "1"], "--engine stand-in does not take --dtype bfloat16"),
    (["check-exact", *MODEL, "--extend", "expectation.json"],
     "engine 'stand-in' does not support extending an expectation (check-exact --extend)"),
])
def test_what_the_stand_in_does_not_declare_is_refused_naming_it(stand_in, args, refusal):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and refusal in " ".join(result.output.split()), result.output


def test_shards_of_a_stand_in_run_merge_into_one_whose_shards_keep_the_options_they_were_given(stand_in, tmp_path):
    runs = tmp_path / "runs"
    for index in (0, 1):
        _invoke("solve", *MODEL, "--limit", "4", "--max-new-tokens", "2", "--shard", f"{index}/2", "--run",
                f"shard-{index}", "--runs-dir", str(runs))
    _invoke("merge", "shard-0", "shard-1", "--out", "merged", "--runs-dir", str(runs))
    merged = json.loads((runs / "merged" / "manifest.json").read_text())
    assert [entry["command_options"]["--shard"] for entry in merged["merged_from"]] == ["0/2", "1/2"]
    assert "command_options" not in merged  # no one command gave the merged run its options
    assert "ok " in _invoke("verify-manifest", str(runs / "merged" / "manifest.json"), "--allow-unchecked-payloads")
