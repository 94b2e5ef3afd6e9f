"""The command line: verify-manifest without torch, clear errors on bad input, committed manifests re-check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graftbench.problems.builtin import builtin_problems
from graftbench.cli.app import app
from graftbench.settings import EvalSettings
from graftbench.eval.eval_run import run_eval
from graftbench.results.layout import manifest_folders
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def manifest_path(session, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    result = run_eval(session, builtin_problems(1)[:2], "builtin", "cli", EvalSettings(max_new_tokens=4), runs_root=runs)
    return result.run.manifest_path


def test_verify_manifest_imports_no_torch(manifest_path):
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from graftbench.cli.app import app\n"
        f"result = CliRunner().invoke(app, ['verify-manifest', {str(manifest_path)!r}])\n"
        "print(result.output)\n"
        "assert result.exit_code == 0, result.output\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok" in done.stdout


def test_verify_manifest_exit_code_and_named_sample(manifest_path, tmp_path):
    text = manifest_path.read_text()
    assert runner.invoke(app, ["verify-manifest", str(manifest_path)]).exit_code == 0
    sample_id = f"{builtin_problems(1)[0].id}#0"
    marker = '"output":"'
    at = text.index(marker) + len(marker)
    tampered = tmp_path / "tampered.json"
    tampered.write_text(text[:at] + ("X" if text[at] != "X" else "Y") + text[at + 1:])
    result = runner.invoke(app, ["verify-manifest", str(tampered)])
    assert result.exit_code == 1
    assert f"sample {sample_id}: output_sha256 does not match" in result.output


def test_verify_manifest_on_a_broken_or_foreign_file(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    result = runner.invoke(app, ["verify-manifest", str(bad)])
    assert result.exit_code == 1 and "is not valid JSON" in result.output  # a damaged manifest fails the check
    bad.write_text('{"schema": "other"}')
    result = runner.invoke(app, ["verify-manifest", str(bad)])
    assert result.exit_code == 2 and "is not a graftbench.manifest/1 or graftbench.manifest/2 document" in result.output
    result = runner.invoke(app, ["verify-manifest", str(tmp_path / "absent.json")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_bad_problem_file_is_named(tmp_path):
    bad = tmp_path / "set.jsonl"
    bad.write_text('{"id": "a", "problem": "p", "answer": "1"}\n{"id": "b", "problem": "", "answer": "2"}\n')
    result = runner.invoke(app, ["solve", "--problems", str(bad), "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "set.jsonl" in result.output and "row 2" in result.output and "problem" in result.output


def test_bad_model_is_named(tmp_path):
    result = runner.invoke(app, ["solve", "--model", "nope.gguf", "--limit", "1", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2 and "GGUF file 'nope.gguf' does not exist" in result.output


@pytest.mark.parametrize("path", [p for folder in manifest_folders(ROOT) for p in sorted(folder.glob("*.json"))],
                         ids=lambda p: p.relative_to(ROOT / "manifests").as_posix())
def test_committed_manifests_of_every_kind_of_machine_verify_anchored(path):
    """Every committed manifest verifies anchored to its problem set, without --allow-unanchored. The artifact
    stores of the graft runs are not committed (gigabytes of KV caches): a manifest that lists artifacts exits 4
    (payloads not checked) on its own and 0 only when the caller accepts that with --allow-unchecked-payloads."""
    result = runner.invoke(app, ["verify-manifest", str(path)], env={"COLUMNS": "250"})
    assert "problem set anchored to " in result.output and "not anchored" not in result.output, result.output
    assert "the file's SHA-256 is the one" in result.output  # each is listed in manifests/SHA256SUMS
    listed = json.loads(path.read_text(encoding="utf-8")).get("artifacts")
    if listed:
        assert result.exit_code == 4, result.output
        assert f"{len(listed)} artifact payloads not checked (no store given with --store)" in result.output
        accepted = runner.invoke(app, ["verify-manifest", str(path), "--allow-unchecked-payloads"],
                                 env={"COLUMNS": "250"})
        assert accepted.exit_code == 0, accepted.output
        assert f"verified, except {path}: {len(listed)} artifact payloads not checked" in accepted.output
        assert "\nok " not in accepted.output
    else:
        assert result.exit_code == 0 and f"ok {path}" in result.output, result.output


def test_committed_aime_manifests_are_present():
    names = {p.name for p in REFERENCE_MANIFESTS.glob("*.json")}
    assert {"aime2024-smollm2-135m-baseline.json", "aime2024-smollm2-135m-recurring.json"} <= names


@pytest.mark.parametrize("model, label", [
    ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b"),  # an alias keeps its dots (Path.stem would cut ".5b")
    ("HuggingFaceTB/SmolLM2-135M", "SmolLM2-135M"),
    ("/models/gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-q4_k_m"),
    ("/models/my model/", "my_model"),
])
def test_model_label_names_outputs_and_runs(model, label):
    from graftbench.cli.common import model_label

    assert model_label(model) == label


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_an_interrupted_eval_says_where_its_samples_are_and_how_to_resume(tmp_path, monkeypatch):
    from graftbench.cli.app import app

    monkeypatch.setattr("graftbench.scale.eval_job._executor", lambda *args: _interrupt)
    result = runner.invoke(app, ["solve", "--problems", "builtin", "--limit", "1", "--run", "cut",
                                 "--runs-dir", str(tmp_path)], terminal_width=400)
    assert result.exit_code == 130, result.output
    assert (f"interrupted: the samples finished so far are kept in {tmp_path / 'cut'}; the same command resumes "
            "the run") in " ".join(result.output.split())


def test_an_interrupted_deposit_says_the_same_command_reuses_what_it_stored(tmp_path, monkeypatch):
    from graftbench.cli.app import app
    from graftbench.eval import deposit_plan

    monkeypatch.setattr("graftbench.cli.app.open_model", lambda *args, **kwargs: None)
    monkeypatch.setattr(deposit_plan, "deposit_job", _interrupt)
    result = runner.invoke(app, ["deposit", "--problems", "builtin", "--limit", "1", "--store",
                                 str(tmp_path / "store")], terminal_width=400)
    assert result.exit_code == 130, result.output
    assert (f"interrupted: the artifacts deposited so far are kept in {tmp_path / 'store'}; the same command "
            "reuses them without a prefill") in " ".join(result.output.split())


@pytest.mark.parametrize("model, problems, name", [
    ("smollm2-135m", "../shared/data/aime2024.jsonl", "solve-smollm2-135m-aime2024"),
    ("../models/tiny.gguf", "builtin", "solve-tiny-builtin"),
    ("HuggingFaceTB/SmolLM2-135M", "a..b.jsonl", "solve-SmolLM2-135M-a_b")])
def test_default_run_names_are_plain_folder_names(model, problems, name):
    from graftbench.cli.app import default_run_name
    from graftbench.results.runs import check_run_name

    assert check_run_name(default_run_name("solve", model, problems, False)) == name
    assert default_run_name("eval", "x" * 300, "p", True).startswith("eval-xxx")
    assert len(default_run_name("eval", "x" * 300, "p", True)) == 128


def test_a_run_name_that_leaves_the_runs_folder_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    from graftbench.cli.app import app

    monkeypatch.setattr("graftbench.cli.app.open_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    result = runner.invoke(app, ["solve", "--problems", "builtin", "--run", "../escape", "--runs-dir",
                                 str(tmp_path)], terminal_width=400)
    assert result.exit_code == 2, result.output
    assert "run name '../escape' is not a plain folder name" in result.output


def _recorded_run(runs: Path, name: str, **settings) -> None:
    """A run folder whose run.json records a solve of builtin:0-1 on smollm2-135m with ``settings``."""
    from graftbench.problems.types import problem_set_sha256

    record = {"command": "solve", "model": "smollm2-135m", "config_fingerprint": "f" * 64,
              "problem_set_sha256": problem_set_sha256(builtin_problems()[:2]), **EvalSettings(**settings).to_dict()}
    (runs / name).mkdir(parents=True)
    (runs / name / "run.json").write_text(json.dumps(record))


def test_resuming_a_run_with_other_settings_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    from graftbench.cli.app import app

    monkeypatch.setattr("graftbench.cli.app.open_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    _recorded_run(tmp_path, "r", max_new_tokens=64)
    result = runner.invoke(app, ["solve", "--problems", "builtin", "--limit", "2", "--run", "r", "--runs-dir",
                                 str(tmp_path), "--max-new-tokens", "32"], terminal_width=400)
    assert result.exit_code == 2, result.output
    assert "run 'r' exists with other settings (max_new_tokens)" in " ".join(result.output.split())


def test_the_check_before_load_accepts_the_recorded_settings_and_names_each_difference(tmp_path):
    from graftbench.results.runs import RunError
    from graftbench.eval.run_identity import check_resume_before_load

    _recorded_run(tmp_path, "r", max_new_tokens=64)
    two = builtin_problems()[:2]
    check_resume_before_load(tmp_path, "r", "solve", "smollm2-135m", two, EvalSettings(max_new_tokens=64))
    check_resume_before_load(tmp_path, "new", "solve", "smollm2-135m", two, EvalSettings(max_new_tokens=8))
    with pytest.raises(RunError, match=r"other settings \(command, model, problem_set_sha256\)"):
        check_resume_before_load(tmp_path, "r", "eval", "gemma3-270m", builtin_problems()[:3],
                                 EvalSettings(max_new_tokens=64))
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("store", ["file", "file/store"])
def test_a_deposit_into_a_store_path_that_is_or_runs_through_a_file_is_refused_before_the_model_loads(
        store, tmp_path, monkeypatch):
    from graftbench.cli.app import app

    monkeypatch.setattr("graftbench.cli.app.open_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    (tmp_path / "file").write_text("not a store")
    result = runner.invoke(app, ["deposit", "--problems", "builtin", "--limit", "2", "--store",
                                 str(tmp_path / store)], terminal_width=400)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"{tmp_path / 'file'} is " in text and "a file, not a folder" in text


@pytest.mark.parametrize("options, reason", [
    (["--dtype", "bfloat16", "--threads", "2", "--samples", "60"],
     "recorded under another pin; differing: dtype, threads"),
    (["--model", "gemma3-270m", "--threads", "1", "--samples", "60"], "differing: weights_sha256"),
    (["--threads", "1", "--samples", "40"], "40 pairs asked for, fewer than the expectation's 50")])
def test_an_extension_that_cannot_be_made_is_refused_before_the_model_loads(options, reason, monkeypatch):
    from graftbench.cli import exact

    from tests.conftest import AIME2024

    monkeypatch.setattr(exact, "open_model", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    expectation = REFERENCE_MANIFESTS / "exact-smollm2-135m.json"
    result = runner.invoke(app, ["check-exact", "--problems", str(AIME2024), "--extend", str(expectation),
                                 *options], terminal_width=400)
    assert result.exit_code == 2, result.output
    assert f"{expectation}: " in " ".join(result.output.split()) and reason in " ".join(result.output.split())


def test_a_resumed_runs_progress_starts_at_the_samples_already_recorded_in_its_shard(tmp_path):
    from graftbench.eval.run_identity import samples_recorded

    problems = builtin_problems()[:4]  # shard 0/2 holds the first alone (shards hash the problem id)
    run = tmp_path / "r"
    run.mkdir()
    lines = [{"problem_id": problems[0].id, "sample_index": 0}, {"problem_id": problems[0].id, "sample_index": 1},
             {"problem_id": problems[0].id, "sample_index": 1},  # a duplicate counts once
             {"problem_id": problems[0].id, "sample_index": 2},  # beyond --samples 2
             {"problem_id": problems[1].id, "sample_index": 0},  # another shard's problem
             {"problem_id": problems[2].id, "sample_index": 0}]
    (run / "samples.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert samples_recorded(tmp_path, "r", problems, EvalSettings(samples=2, temperature=0.7, shard="0/2")) == 2
    assert samples_recorded(tmp_path, "r", problems, EvalSettings(samples=1)) == 3
    assert samples_recorded(tmp_path, "missing", problems, EvalSettings()) == 0
    (run / "samples.jsonl").write_text("not json\n")
    assert samples_recorded(tmp_path, "r", problems, EvalSettings()) == 0
