"""Replays that find their expectation: a bare file name picks the one recorded for this kind of CPU, and a replay
of another kind's expectation names this kind's, or says that expectations are per kind and which kinds have one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.results import expectation_kind as ek

AMD = {"cpu_model": "AMD EPYC 9B14", "cpu_capability_native": "AVX512", "cpu_kernel_flags": ["avx512_bf16"]}
INTEL = {"cpu_model": "Intel Xeon 8481C", "cpu_capability_native": "AVX512", "cpu_kernel_flags": ["amx_bf16"]}
ARM = {"cpu_model": "Neoverse-V2", "cpu_capability_native": "DEFAULT", "cpu_kernel_flags": []}


def _root(tmp_path: Path) -> Path:
    for kind, env in (("amd-epyc-avx512", AMD), ("intel-xeon-amx", INTEL)):
        folder = tmp_path / "manifests" / kind
        folder.mkdir(parents=True)
        (folder / "exact-m.json").write_text(json.dumps({"environment": env, "manifest_sha256": kind}))
    return tmp_path


def test_a_bare_name_picks_this_kinds_expectation(tmp_path):
    root = _root(tmp_path)
    assert ek.resolve(Path("exact-m.json"), root, INTEL, []) == root / "manifests/intel-xeon-amx/exact-m.json"
    assert ek.resolve(Path("exact-m.json"), root, AMD, []) == root / "manifests/amd-epyc-avx512/exact-m.json"
    given = root / "manifests/amd-epyc-avx512/exact-m.json"
    assert ek.resolve(given, root, INTEL, []) == given  # a path is replayed as asked


def test_a_kind_with_none_is_told_expectations_are_per_kind_and_which_kinds_exist(tmp_path):
    root = _root(tmp_path)
    with pytest.raises(FileNotFoundError, match="per kind of CPU.*Neoverse-V2.*kinds with one: amd-epyc-avx512, "
                                                "intel-xeon-amx"):
        ek.resolve(Path("exact-m.json"), root, ARM, [])
    # a logged replay that found every pair equal makes an expectation this kind's too
    replayed = [{"expectation_sha256": "amd-epyc-avx512", "compared": 5, "equal": 5, "replayed_on": ARM}]
    assert ek.resolve(Path("exact-m.json"), root, ARM, replayed).parts[-2] == "amd-epyc-avx512"


def test_a_replay_of_another_kinds_expectation_names_this_kinds(tmp_path):
    root = _root(tmp_path)
    amd = root / "manifests/amd-epyc-avx512/exact-m.json"
    expected = json.loads(amd.read_text())
    note = ek.advice(amd, expected, root, INTEL, [])
    assert "per kind of CPU" in note and str(root / "manifests/intel-xeon-amx/exact-m.json") in note
    assert ek.advice(amd, expected, root, AMD, []) is None
    assert "kinds with one: amd-epyc-avx512, intel-xeon-amx" in ek.advice(amd, expected, root, ARM, [])


def test_check_exact_expect_with_an_unknown_bare_name_lists_the_kinds_before_any_model_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(_root(tmp_path))
    result = CliRunner().invoke(app, ["check-exact", "--expect", "exact-no-such-model.json"])
    assert result.exit_code == 2 and "per kind of CPU" in result.output and "kinds with one: none" in result.output


def test_a_bare_name_outside_a_checkout_says_there_is_no_manifests_folder_to_look_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["check-exact", "--expect", "exact-smollm2-135m.json"])
    assert result.exit_code == 2, result.output
    assert "holds no manifests/ folder" in " ".join(result.output.split()), result.output
