"""Program mode (issue #13): the layout, the program's extraction and verdict, the settings and sample records,
verify-manifest re-checking program verdicts from the recorded stdout without running anything, program-mode
deposits, and an end-to-end program-mode solve and graft with the default model (those carry the ``model`` marker).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graftbench.programs import sandbox
from graftbench.problems.builtin import builtin_problems
from graftbench.cli.app import app
from graftbench.eval.deposit import DepositItem, deposit_items, item_from_sample, items_from_samples
from graftbench.util.hashing import sha256_text
from graftbench.results.manifest import build_manifest, sealed_fields, seal_sha256, verify_manifest, write_manifest
from graftbench.problems.types import Problem
from graftbench.problems.prompts import PROGRAM_CLOSE, PROGRAM_FENCE, PROGRAM_LAYOUT, program_query_text
from graftbench.programs.mode import extract_program, program_verdict, solution_text
from graftbench.results.samples import PROGRAM_FIELDS, Sample
from graftbench.settings import EvalSettings, RoundsSettings, SandboxLimits
from graftbench.store.folder import Store
from graftbench.eval.eval_run import run_eval
from graftbench.eval.evaluate import run_problem
from tests.conftest import REFERENCE_MANIFESTS
from tests.programs import sandbox_here

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.mark.parametrize("output, program", [
    ("print(6 * 7)\n```", "print(6 * 7)\n"),
    ("x = 3\nprint(x)\n```\nThe output is 3.", "x = 3\nprint(x)\n"),
    ("for i in range(3):\n    print(i)   \n\n```", "for i in range(3):\n    print(i)\n"),
    ("print(1", "print(1\n"),  # cut by the budget: run as it is (and fails to compile)
    ("```", ""),
    ("   \n", ""),
])
def test_the_program_is_the_text_before_the_closing_fence(output, program):
    assert extract_program(output) == program


def test_a_deposited_program_is_shown_in_a_python_fence():
    assert solution_text("print(42)\n") == "```python\nprint(42)\n```"
    assert program_query_text("What is 6 times 7?") == (
        "Problem: What is 6 times 7?\nWrite one short Python program that prints only the final number.\n"
        "Solution: ```python\n")


@pytest.mark.parametrize("stdout, stopped, key, extracted, correct", [
    ("42\n", None, "42", "42", True),
    ("12\n13\n\n", None, "13", "13", True),  # the last non-empty line counts
    ("12\n13\n", None, "12", "13", False),
    ("Answer: 12\n", None, "12", "12", True),
    ("3/4\n", None, "0.75", "3/4", True),
    ("", None, "42", None, False),  # printed nothing
    ("42\n", "timeout", "42", None, False),  # a program that did not end normally has no answer
    ("42\n", "crashed", "42", None, False),
    (None, None, "42", None, False),
])
def test_the_verdict_reads_the_last_printed_line(stdout, stopped, key, extracted, correct):
    verdict = program_verdict(stdout, stopped, key)
    assert (verdict.extracted, verdict.correct) == (extracted, correct)


def test_an_unknown_verifier_version_is_refused():
    with pytest.raises(ValueError, match="verifier version 99 is not known"):
        program_verdict("", "crashed", "1", version=99)


def test_text_mode_settings_record_exactly_what_they_did_before():
    recorded = EvalSettings().to_dict()
    assert "mode" not in recorded and "sandbox" not in recorded and "program_layout" not in recorded
    assert "mode" not in RoundsSettings().to_dict()


def test_program_mode_settings_record_the_mode_limits_and_layout():
    recorded = EvalSettings(mode="program", sandbox=SandboxLimits(cpu_s=3)).to_dict()
    assert recorded["mode"] == "program"
    assert recorded["sandbox"] == {"cpu_s": 3, "wall_s": 20.0, "memory_bytes": 1 << 30, "output_bytes": 65536,
                                   "file_bytes": 16 << 20, "disk_bytes": 64 << 20, "processes": 32,
                                   "open_files": 64}
    assert recorded["program_layout"] == PROGRAM_LAYOUT
    assert RoundsSettings(mode="program").to_dict()["mode"] == "program"
    with pytest.raises(ValueError, match="mode 'python'"):
        EvalSettings(mode="python")


def _sample(problem_id: str, key: str, program: str | None, limits=SandboxLimits()) -> Sample:
    output = program + PROGRAM_CLOSE if program is not None else " 42\n"
    fields, verdict = {}, None
    if program is not None:
        result = sandbox_here().run(program, limits)
        fields = dict(program=program, exit_status=result.exit_status, stdout=result.stdout,
                      stdout_sha256=result.stdout_sha256, stderr_tail=result.stderr_tail, program_s=result.run_s,
                      stopped=result.stopped, isolation=result.isolation)
        verdict = program_verdict(result.stdout, result.stopped, key)
    from graftbench.verify.answers import verify_answer

    verdict = verdict or verify_answer(output, key, cue="Final answer:")
    return Sample(problem_id=problem_id, problem_sha256=sha256_text(problem_id), key=key, mode="baseline",
                  route=None, similarity=None, fallback=None, cue="" if program is not None else "Final answer:",
                  prefill_tokens=10, prefill_tokens_saved=0, artifact_id=None, artifact_tokens=0,
                  logits_sha256="0" * 64, output=output, output_sha256=sha256_text(output),
                  extracted=verdict.extracted, correct=verdict.correct, finish_reason="stop", decode_tokens=5,
                  ttft_s=0.1, wall_s=0.5, energy_j=1.0, certificate_sha256=None, certify_s=None, certified=None,
                  **fields)


def test_a_text_sample_is_written_without_program_fields_and_both_kinds_read_back():
    text = _sample("a", "42", None)
    assert not set(PROGRAM_FIELDS) & set(text.to_json())
    assert Sample.from_json(text.to_json()) == text
    program = _sample("b", "42", "print(6 * 7)\n")
    record = program.to_json()
    assert set(PROGRAM_FIELDS) <= set(record) and record["stdout"] == "42\n" and record["exit_status"] == 0
    assert Sample.from_json(json.loads(json.dumps(record))) == program
    assert program.correct and program.extracted == "42"


def _manifest(samples: list[Sample]) -> dict:
    records = [s.to_json() for s in samples]
    return build_manifest(run="p", command="solve", config={"model": "m"}, config_fingerprint="",
                          settings=EvalSettings(mode="program").to_dict(),
                          problem_set={"source": "hand", "sha256": "0" * 64, "n": len(records)},
                          problems=[{"id": r["problem_id"], "problem_sha256": r["problem_sha256"], "key": r["key"]}
                                    for r in records],
                          samples=records, energy={"method": "none"}, store=None)


def _fingerprinted_and_resealed(manifest: dict) -> dict:
    from graftbench.results.fingerprint import pin_fingerprint

    body = {k: v for k, v in manifest.items() if k not in ("manifest_sha256", "sealed_fields")}
    body["config_fingerprint"] = pin_fingerprint(body["config"])
    body["sealed_fields"] = sealed_fields(body)
    return {**body, "manifest_sha256": seal_sha256(body)}


@pytest.fixture(scope="module")
def program_samples():
    return [_sample("ok", "42", "print(6 * 7)\n"), _sample("two", "13", "print(12)\nprint(13)\n"),
            _sample("loop", "1", "while True:\n    pass\n", SandboxLimits(cpu_s=1, wall_s=2.0)),
            _sample("text", "42", None)]


def test_verify_manifest_rechecks_program_verdicts_without_running_them(program_samples, tmp_path, monkeypatch):
    assert [(s.problem_id, s.stopped, s.correct) for s in program_samples] == [
        ("ok", None, True), ("two", None, True), ("loop", "timeout", False), ("text", None, True)]
    path = tmp_path / "m.json"
    write_manifest(_fingerprinted_and_resealed(_manifest(program_samples)), path)

    def no_programs(*args, **kwargs):
        raise AssertionError("verify-manifest ran a program")

    monkeypatch.setattr(sandbox, "_run", no_programs)  # every program run (and the sandbox's probe) goes through it
    mismatches, notes = verify_manifest(path)
    assert mismatches == [] and "4 samples re-verified" in notes[0]
    result = runner.invoke(app, ["verify-manifest", str(path), "--allow-unanchored"])  # a hand-made problem set
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("field, value, expected", [
    ("stdout", "41\n", ["sample ok#0: stdout_sha256 does not match the stored stdout",
                        "sample ok#0: extracted recorded '42', re-extracted '41'",
                        "sample ok#0: correct recorded True, re-verified False"]),
    ("program", "print(41)\n", ["sample ok#0: program is not the program extracted from the stored output"]),
    ("stopped", "timeout", ["sample ok#0: extracted recorded '42', re-extracted None",
                            "sample ok#0: correct recorded True, re-verified False"]),
    ("stopped", "bored", ["sample ok#0: stopped 'bored' is not a known reason",
                          "sample ok#0: extracted recorded '42', re-extracted None",
                          "sample ok#0: correct recorded True, re-verified False"]),
])
def test_an_edited_program_record_is_a_mismatch(program_samples, tmp_path, field, value, expected):
    manifest = copy.deepcopy(_manifest(program_samples))
    sample = next(s for s in manifest["samples"] if s["problem_id"] == "ok")
    sample[field] = value
    path = tmp_path / "m.json"
    write_manifest(_fingerprinted_and_resealed(manifest), path)
    mismatches, _ = verify_manifest(path)
    checks = [m for m in mismatches if m.startswith("sample ok#0")]
    assert checks == expected
    assert all(m.startswith(("sample ok#0", "totals.", "metrics.")) for m in mismatches)


def test_a_program_sample_without_its_fields_is_a_mismatch(program_samples, tmp_path):
    manifest = copy.deepcopy(_manifest(program_samples))
    del next(s for s in manifest["samples"] if s["problem_id"] == "two")["stderr_tail"]
    path = tmp_path / "m.json"
    write_manifest(_fingerprinted_and_resealed(manifest), path)
    mismatches, _ = verify_manifest(path)
    assert "sample two#0: program fields ['stderr_tail'] are missing" in mismatches


@pytest.mark.parametrize("name", ["transfer-smollm2-135m-baseline.json", "transfer-smollm2-135m-graft.json",
                                  "aime2024-smollm2-135m-recurring.json"])
def test_committed_text_manifests_verify_unchanged(name):
    mismatches, _ = verify_manifest(REFERENCE_MANIFESTS / name)
    assert mismatches == []


def test_a_text_mode_deposit_refuses_a_program_sample_and_runs_nothing(monkeypatch):
    problem = Problem("p-0", "What is 6 times 7?", "42")
    item = item_from_sample(problem, _sample("p-0", "42", "print(6 * 7)\n"), "solve:r")
    monkeypatch.setattr("graftbench.eval.deposit.open_sandbox", lambda: pytest.fail("the sandbox was opened"))
    monkeypatch.setattr(sandbox, "_run", lambda *a, **k: pytest.fail("a program was run"))
    assert item == DepositItem(problem, "```python\nprint(6 * 7)\n```", "solve:r", program="print(6 * 7)\n")
    report = deposit_items(None, None, [item], mode="text")
    assert report.refused == [("p-0", "a program-mode sample: deposit with --mode program to re-run its program "
                                      "in the sandbox")]
    assert report.deposited == []


def test_a_program_mode_deposit_reruns_the_program_and_refuses_a_wrong_one():
    sandbox_here()  # the deposit opens its own (none is passed)
    problem = Problem("p-0", "What is 6 times 7?", "42")
    wrong = DepositItem(problem, solution_text("print(41)\n"), "solve:r", program="print(41)\n")
    crash = DepositItem(problem, solution_text("print(1/0)\n"), "solve:r", program="print(1/0)\n")
    report = deposit_items(None, None, [wrong, crash], mode="program")
    assert report.refused == [("p-0", "its program printed '41': does not verify against key '42'"),
                              ("p-0", "its program stopped (crashed): does not verify against key '42'")]


def test_items_from_a_program_run_carry_their_programs():
    problems = [Problem("a", "x", "42"), Problem("b", "y", "13")]
    samples = [_sample("a", "42", "print(6 * 7)\n"), _sample("b", "13", "print(12)\n")]
    items = items_from_samples(samples, problems, "r")
    assert [(i.problem.id, i.program, i.solution) for i in items] == [
        ("a", "print(6 * 7)\n", "```python\nprint(6 * 7)\n```")]


def test_program_mode_without_a_sandbox_is_refused_before_anything_decodes():
    problem = Problem("p-0", "What is 6 times 7?", "42")
    with pytest.raises(ValueError, match="program mode runs each program in a sandbox"):
        run_problem(None, problem, EvalSettings(mode="program"), 8, None, None)


def test_an_unknown_mode_is_refused_before_the_model_loads():
    for command in (["solve"], ["eval"], ["deposit"], ["flywheel"]):
        result = runner.invoke(app, [*command, "--mode", "python"])
        assert result.exit_code == 2 and "mode 'python' is not one of text, program" in result.output


# ---------------------------------------------------------------------------------------------------------------
# With the default model (smollm2-135m): the ``session`` fixture adds the ``model`` marker.


def test_program_mode_solve_end_to_end(session, tmp_path):
    description = sandbox_here().isolation.description
    problems = builtin_problems(n_per_family=1)[:2]
    settings = EvalSettings(max_new_tokens=48, mode="program")
    result = run_eval(session, problems, "builtin", "prog", settings, command="solve", runs_root=tmp_path)
    assert [s.problem_id for s in result.samples] == [p.id for p in problems]
    for sample in result.samples:
        assert sample.program == extract_program(sample.output)
        assert isinstance(sample.exit_status, int) and isinstance(sample.stdout, str)
        assert len(sample.stdout.encode()) <= settings.sandbox.output_bytes
        assert sample.stdout_sha256 == sha256_text(sample.stdout)
        assert sample.program_s > 0 and sample.isolation == description
        assert sample.stopped in (None, *sandbox.STOPPED)
        assert (sample.stopped is None) == (sample.exit_status == 0)
        verdict = program_verdict(sample.stdout, sample.stopped, sample.key)
        assert (sample.extracted, sample.correct) == (verdict.extracted, verdict.correct)
        assert sample.finish_reason in ("stop", "budget", "eos") and 0 < sample.decode_tokens <= 48
        if sample.finish_reason == "stop":
            assert PROGRAM_CLOSE in sample.output
    manifest = result.manifest
    assert manifest["settings"]["mode"] == "program" and manifest["settings"]["program_layout"] == PROGRAM_LAYOUT
    recorded = [json.loads(line) for line in result.run.samples_path.read_text().splitlines()]
    assert [r["program"] for r in recorded] == [s.program for s in result.samples]
    mismatches, _ = verify_manifest(result.run.manifest_path)
    assert mismatches == []
    cli = runner.invoke(app, ["verify-manifest", str(result.run.manifest_path)])
    assert cli.exit_code == 0 and "ok" in cli.output
    # the baseline prompt ends inside the opened fence: the model's first token is code
    prompt = session.tokenizer.decode(session.program_prompt_ids(problems[0].problem))
    assert prompt.endswith(PROGRAM_FENCE) and "Write one short Python program" in prompt


def test_a_deposited_program_is_grafted_recurring_answers_new_problems_write_programs(session, tmp_path):
    box = sandbox_here()
    problems = [p for p in builtin_problems(n_per_family=2) if p.family == "mod"]
    first, second = problems
    store = Store(tmp_path / "store")
    item = DepositItem(first, solution_text(f"print({first.answer})\n"), "hand", program=f"print({first.answer})\n")
    report = deposit_items(session, store, [item], mode="program", sandbox=box)
    assert report.refused == [] and len(report.deposited) == 1
    settings = EvalSettings(max_new_tokens=24, graft=True, min_similarity=0.3, mode="program")
    result = run_eval(session, problems, "builtin", "g", settings, runs_root=tmp_path, store_root=tmp_path / "store")
    recurring, new = result.samples
    assert (recurring.route, recurring.layout, recurring.program) == ("exact", "answer", None)  # a few tokens, no program
    assert "program" not in recurring.to_json()
    assert (new.route, new.layout) == ("similar", "solve") and isinstance(new.program, str)
    assert new.stdout_sha256 == sha256_text(new.stdout)
    assert verify_manifest(result.run.manifest_path, store=store.root, require_artifacts=True)[0] == []
