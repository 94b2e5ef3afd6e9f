"""An expectation's engine reopened under its pin (:func:`graftbench.eval.expectation_pin.adopt_expectation`), what
``check-exact --expect`` and ``trace-pair --expect`` open their model with: read from committed expectations, without
loading a model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from unittest import mock

import pytest

from graftbench.engine.base import ACROSS_CPU_KINDS, CapabilityError
from graftbench.eval.errors import Refused
from graftbench.eval.expectation_pin import adopt_expectation
from graftbench.settings import ModelOptions
from graftbench.results.manifest import ManifestError
from graftbench.util import isa

from tests.conftest import REFERENCE_MANIFESTS, ROOT

TORCH_EXPECTATION = REFERENCE_MANIFESTS / "exact-smollm2-135m.json"  # torch, --isa avx2, float32, chunk 256, 1 thread
LLAMA_EXPECTATION = REFERENCE_MANIFESTS / "exact-smollm2-135m-llama-f16.json"  # llama.cpp, native build, f16 cache
GIVEN = ModelOptions(engine="torch", model="gemma3-270m", dtype="bfloat16", chunk_size=64, threads=4, device="cpu",
                     kernels="graftbench", kv_type="q8_0", flash_attn=True)

# Run in a fresh process: the instruction-set pin can only be applied before torch is imported.
ADOPT_IN_A_FRESH_PROCESS = """
import json, os, sys
from pathlib import Path
from graftbench.eval.expectation_pin import adopt_expectation
from graftbench.settings import ModelOptions
given = ModelOptions(**json.loads(sys.argv[2]))
try:
    adopted = adopt_expectation(Path(sys.argv[1]), given)
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"options": adopted.options.__dict__, "recorded": adopted.recorded,
                      "pairs": len(adopted.expected["pairs"]), "torch_imported": "torch" in sys.modules,
                      "process_isa": os.environ.get("GRAFTBENCH_ISA")}))
"""


def _adopt_in_a_fresh_process(expectation, given: ModelOptions) -> dict:
    env = {k: v for k, v in os.environ.items() if k != isa.ENV_VAR and k not in isa.CAP_VARIABLES}
    done = subprocess.run([sys.executable, "-c", ADOPT_IN_A_FRESH_PROCESS, str(expectation),
                           json.dumps(given.__dict__)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_torch_expectation_reopens_under_its_pin_with_its_isa_applied_before_torch():
    found = _adopt_in_a_fresh_process(TORCH_EXPECTATION, GIVEN)
    if isa.supported("avx2"):
        assert found["options"] == {**GIVEN.__dict__, "engine": "torch", "isa": "avx2", "model": "smollm2-135m",
                                    "dtype": "float32", "chunk_size": 256, "threads": 1}
        assert found["recorded"] == {} and found["pairs"] == 50
        assert found["process_isa"] == "avx2" and not found["torch_imported"]
    else:  # a CPU without AVX2 cannot take the recorded pin: refused, naming it
        assert found["error"] == "IsaError" and "--isa avx2" in found["message"], found


def test_an_isa_given_replaces_the_recorded_one():
    found = _adopt_in_a_fresh_process(TORCH_EXPECTATION, ModelOptions(engine="torch", model="x", isa="native"))
    assert found["options"]["isa"] == "native" and found["process_isa"] == "native", found


def test_a_llama_cpp_expectation_reopens_with_its_cache_options_and_no_isa():
    with mock.patch.dict(os.environ):  # adopting the pin selects the build it names (an environment variable)
        adopted = adopt_expectation(LLAMA_EXPECTATION, replace(GIVEN, isa="avx2"))
    assert adopted.options == ModelOptions(engine="llama.cpp", model="smollm2-135m", dtype="auto", chunk_size=256,
                                           threads=1, isa=None, device="cpu", kernels="graftbench", kv_type="q8_0",
                                           flash_attn=True)
    assert adopted.recorded == {"kv_type": "f16", "flash_attn": False, "n_ctx": 8192}  # they replace the given ones
    assert adopted.expected["manifest_sha256"] == json.loads(LLAMA_EXPECTATION.read_text())["manifest_sha256"]


def _copy(tmp_path, source, change, seal=True) -> os.PathLike:
    """A copy of the expectation ``source`` changed by ``change`` and sealed again (``seal``: else left with the
    original's ``manifest_sha256``)."""
    from graftbench.results.exact_manifest import seal_exactness_manifest

    manifest = json.loads(source.read_text())
    change(manifest)
    path = tmp_path / source.name
    path.write_text(json.dumps(seal_exactness_manifest(manifest) if seal else manifest))
    return path


def test_a_copy_changed_after_it_was_sealed_is_refused_before_anything_is_adopted(tmp_path):
    """A replay logs its outcome under the expectation's manifest_sha256: a changed copy that still carries the
    original's would be logged as the original."""
    def zero_last_pair(manifest):
        manifest["pairs"][-1]["graft_logits_sha256"] = "0" * 64

    path = _copy(tmp_path, LLAMA_EXPECTATION, zero_last_pair, seal=False)
    with mock.patch.object(isa, "apply", side_effect=AssertionError("the pin was applied")), \
            pytest.raises(ManifestError, match=f"{path}: its manifest_sha256 is not the SHA-256 of its content"):
        adopt_expectation(path, GIVEN)


def test_an_engine_this_graftbench_does_not_run_is_refused_naming_the_file(tmp_path):
    path = _copy(tmp_path, LLAMA_EXPECTATION, lambda m: m["config"]["engine"].update(engine="no-such-engine"))
    with pytest.raises(Refused, match=f"{path}: engine 'no-such-engine' is not one this graftbench runs"):
        adopt_expectation(path, GIVEN)


def test_a_pin_the_engine_cannot_adopt_is_refused_naming_the_file(tmp_path):
    path = _copy(tmp_path, LLAMA_EXPECTATION, lambda m: m["config"]["engine"].update(build="no-such-build"))
    with mock.patch.dict(os.environ), pytest.raises(Refused, match=f"^{path}: .*no-such-build"):
        adopt_expectation(path, GIVEN)


def test_a_first_pair_past_the_last_and_a_missing_capability_are_refused_before_the_pin_is_adopted(tmp_path):
    with pytest.raises(Refused, match=r"--pairs starts at pair 50, but .* holds 50 pairs \(0-based\)"):
        adopt_expectation(TORCH_EXPECTATION, GIVEN, first_pair=50)
    with mock.patch.object(isa, "apply", side_effect=AssertionError("the pin was applied")), \
            pytest.raises(CapabilityError, match="torch"):
        adopt_expectation(TORCH_EXPECTATION, GIVEN, needs=[(ACROSS_CPU_KINDS, "--across-cpu-kinds")])


def test_a_file_that_is_not_an_expectation_is_refused_naming_it(tmp_path):
    from graftbench.results.manifest import ManifestError

    with pytest.raises(ManifestError, match="does not exist"):
        adopt_expectation(tmp_path / "none.json", GIVEN)


def test_a_replay_finds_the_recorded_problems_by_name_and_never_opens_the_recorded_path(tmp_path):
    """The recorded problem-set path is data: a replay looks its file name up under ../shared/data/ (or takes the
    set --problems names); a path elsewhere is never opened, and a set not found is refused naming --problems."""
    from graftbench.eval.expectation_pin import expectation_problems

    expected = json.loads(TORCH_EXPECTATION.read_text())
    elsewhere = {**expected, "problem_set": {**expected["problem_set"], "source": "/elsewhere/aime2024.jsonl"}}
    found = expectation_problems(TORCH_EXPECTATION, elsewhere)
    assert [p.id for p in found][:2] == [p.id for p in expectation_problems(TORCH_EXPECTATION, expected)][:2]
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"id": "s", "problem": "p", "answer": "1", "solution": "s"}\n')
    pointed = {**expected, "problem_set": {**expected["problem_set"], "source": str(secret)}}
    with pytest.raises(Refused, match=r"cannot find the problems .* name the problem file with --problems"):
        expectation_problems(TORCH_EXPECTATION, pointed)
    assert [p.id for p in expectation_problems(TORCH_EXPECTATION, pointed, str(secret))] == ["s"]  # named: used


@pytest.mark.parametrize("change, wrong", [
    (lambda m: m.update(config="x"), "config: not an object"),
    (lambda m: m.update(environment="x"), "environment: not an object"),
    (lambda m: m.update(pairs=[5] * 50), "pairs: 50 entries"),
    (lambda m: m.update(pairs="x"), "pairs: not a non-empty list"),
    (lambda m: m.pop("problem_set"), "problem_set: required"),
])
def test_a_resealed_copy_not_shaped_as_an_expectation_is_refused_naming_it_before_its_pin_is_read(tmp_path, change,
                                                                                                   wrong):
    """A re-sealed copy passes the seal: its shape is still checked before anything reads its pin (else a crash)."""
    path = _copy(tmp_path, LLAMA_EXPECTATION, change)
    with mock.patch.object(isa, "apply", side_effect=AssertionError("the pin was applied")), \
            pytest.raises(ManifestError, match=f"^{path}: not an exactness manifest a replay can read: .*{wrong}"):
        adopt_expectation(path, GIVEN)


def test_a_recorded_source_holding_a_nul_byte_is_not_found_not_a_crash():
    from graftbench.eval.expectation_pin import expectation_problems

    expected = json.loads(TORCH_EXPECTATION.read_text())
    nul = {**expected, "problem_set": {**expected["problem_set"], "source": "aime2024.jsonl\x00x"}}
    with pytest.raises(Refused, match=r"cannot find the problems .* name the problem file with --problems"):
        expectation_problems(TORCH_EXPECTATION, nul)


def test_check_exact_refuses_a_resealed_copy_whose_environment_is_not_an_object_naming_it(tmp_path):
    """The advice printed before a replay reads the recorded environment: a copy not shaped as an expectation gets
    none, and the replay's loading refuses it (exit 2), never a traceback."""
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    path = _copy(tmp_path, LLAMA_EXPECTATION, lambda m: m.update(environment="x"))
    result = CliRunner().invoke(app, ["check-exact", "--expect", str(path), "--pairs", "49:"])
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and "environment: not an object" in output, result.output


@pytest.mark.parametrize("field", ["model", "chunk_size"])
def test_a_resealed_pin_lacking_a_field_its_engine_reopens_with_is_refused_naming_it(tmp_path, field):
    path = _copy(tmp_path, LLAMA_EXPECTATION, lambda m: m["config"].pop(field))
    with mock.patch.dict(os.environ), pytest.raises(Refused, match=f"^{path}: its pin \\(config\\) records no '{field}'"):
        adopt_expectation(path, GIVEN)


@pytest.mark.parametrize("recorded", ["attacker/model", "/etc", "../../../../elsewhere", "~", "~/models/x",
                                      "weights.gguf", "C:\\models\\x", ".", ""])
def test_a_recorded_model_that_is_a_path_or_hub_id_is_refused_never_opened_or_downloaded(tmp_path, recorded):
    """The model an expectation's pin records is data, as its problem-set path is: a path (anywhere on this machine)
    or a hub id (a repository to download) is refused naming the file and --model, before any pin is applied."""
    path = _copy(tmp_path, TORCH_EXPECTATION, lambda m: m["config"].update(model=recorded))
    with mock.patch.object(isa, "apply", side_effect=AssertionError("the pin was applied")), \
            pytest.raises(Refused, match=f"^{path}: its pin records the model .*pass --model naming that model"):
        adopt_expectation(path, GIVEN)


def test_a_model_named_with_model_replaces_the_recorded_one_and_a_recorded_name_is_kept():
    from graftbench.eval.expectation_pin import recorded_location

    assert not any(map(recorded_location, ["smollm2-135m", "qwen2.5-coder-0.5b", "random:gemma3-reduced",
                                           "stand-in-tiny@3"]))
    with mock.patch.object(isa, "apply"):
        named = adopt_expectation(TORCH_EXPECTATION, GIVEN, named_model="/models/smollm2")
        kept = adopt_expectation(TORCH_EXPECTATION, GIVEN)
    assert named.options.model == "/models/smollm2" and kept.options.model == "smollm2-135m"


def test_check_exact_refuses_a_recorded_hub_id_without_contacting_the_hub(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from graftbench.cli.app import app
    from graftbench.util import hub_access

    monkeypatch.setattr(hub_access, "hub_model_refusal", mock.Mock(side_effect=AssertionError("the hub was asked")))
    path = _copy(tmp_path, TORCH_EXPECTATION, lambda m: m["config"].update(model="attacker/model"))
    result = CliRunner().invoke(app, ["check-exact", "--expect", str(path), "--runs-dir", str(tmp_path / "runs")])
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and "its pin records the model 'attacker/model'" in output, result.output
