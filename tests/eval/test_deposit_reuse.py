"""A deposit the store already holds intact is taken without a prefill; anything else about it is prefilled again."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from graftbench.engine.torch import graft
from graftbench.eval.deposit import DepositItem, deposit_items, items_from_problems
from graftbench.faults.catalogue import Lab, flip_bit, tiny_problem
from graftbench.store.folder import Store
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def lab(session, tmp_path):
    return Lab(session, Store(tmp_path / "store"))


@pytest.fixture()
def prefills(monkeypatch):
    """Counts the prefills a deposit makes (each artifact it builds)."""
    calls = []
    build = graft.build_artifact

    def counting(*args, **kwargs):
        calls.append(args[2])
        return build(*args, **kwargs)

    monkeypatch.setattr(graft, "build_artifact", counting)
    return calls


def _deposit(lab, items, **kwargs):
    report = deposit_items(lab.session, lab.store, items, **kwargs)
    return [(pid, aid, new) for pid, aid, _, new in report.deposited], report


def test_a_second_deposit_of_the_same_solution_reuses_the_artifact_without_a_prefill(lab, prefills):
    items = items_from_problems([tiny_problem(500), tiny_problem(501)])
    first, report = _deposit(lab, items)
    assert [new for *_, new in first] == [True, True] and report.reused == set() and len(prefills) == 2

    again, report = _deposit(lab, items)
    assert again == [(pid, aid, False) for pid, aid, _ in first]
    assert report.reused == {aid for _, aid, _ in first}
    assert len(prefills) == 2  # nothing prefilled the second time
    assert lab.store.ids() == sorted(aid for _, aid, _ in first) and lab.store.verify() == []


def test_recompute_prefills_again_and_lands_on_the_same_bytes(lab, prefills):
    items = items_from_problems([tiny_problem(502)])
    first, _ = _deposit(lab, items)
    again, report = _deposit(lab, items, recompute=True)
    assert len(prefills) == 2 and report.reused == set()
    assert again == [(first[0][0], first[0][1], False)]  # rebuilt to the same id: the one copy is kept


def test_a_damaged_copy_is_not_reused_but_prefilled_and_replaced(lab, prefills):
    items = items_from_problems([tiny_problem(503)])
    (_, artifact_id, _), = _deposit(lab, items)[0]
    path = lab.store.path(artifact_id)
    path.write_bytes(flip_bit(path.read_bytes(), 4000))
    again, report = _deposit(lab, items)
    assert again == [(items[0].problem.id, artifact_id, True)] and report.reused == set() and len(prefills) == 2
    assert lab.store.verify() == []


def test_another_solution_source_or_pin_for_the_same_problem_is_not_reused(lab, prefills):
    problem = tiny_problem(504)
    (_, reference_id, _), = _deposit(lab, items_from_problems([problem]))[0]

    other_solution = DepositItem(problem, f"So the sum is {problem.answer}. Final answer: {problem.answer}", "reference")
    other_source = DepositItem(problem, problem.solution, "solve:earlier-run")
    deposited, report = _deposit(lab, [other_solution, other_source])
    assert report.reused == set() and len(prefills) == 3
    ids = [aid for _, aid, _ in deposited]
    assert len({reference_id, *ids}) == 3 and all(new for *_, new in deposited)

    other_pin = dataclasses.replace(lab.session.config, weights_sha256="0" * 64)
    lab.store.put(lab.build(tiny_problem(505), config=other_pin)[0])
    deposited, report = _deposit(lab, items_from_problems([tiny_problem(505), tiny_problem(506)]))
    assert report.reused == set() and deposited[0][2] is True  # under the session's own pin it is new
    assert report.other_pins == {other_pin.fingerprint: 1}  # 505 was there under the other pin, 506 nowhere
    assert _deposit(lab, items_from_problems([tiny_problem(507)]))[1].other_pins == {}


def test_the_deposit_command_says_what_it_reused_and_recompute_prefills(session, tmp_path):
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    args = ["deposit", "--problems", "builtin", "--limit", "2", "--store", str(tmp_path / "store")]
    outputs = []
    for extra in ([], [], ["--recompute"]):
        result = CliRunner().invoke(app, [*args, *extra], terminal_width=200)
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    assert "2 deposited (0 reused without a prefill), 0 refused" in outputs[0]
    assert "2 deposited (2 reused without a prefill), 0 refused" in outputs[1]
    assert outputs[1].count("already stored, reused") == 2
    assert "2 deposited (0 reused without a prefill), 0 refused" in outputs[2]
    assert outputs[2].count("already stored, same bytes") == 2


def test_the_deposit_command_notes_problems_stored_under_another_pin(session, tmp_path):
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    args = ["deposit", "--problems", "builtin", "--limit", "2", "--store", str(tmp_path / "store")]
    other = CliRunner().invoke(app, [*args, "--chunk-size", "64"], terminal_width=200)
    assert other.exit_code == 0, other.output
    assert "another pin" not in other.output
    result = CliRunner().invoke(app, args, terminal_width=400)
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "2 deposited (0 reused without a prefill), 0 refused" in text
    assert "note: 2 of the 2 problems prefilled were already stored under another pin, config" in text
    assert "the same weights, dtype, chunk size, thread count, --isa and layout" in text


def test_why_a_deposit_plan_is_empty_names_each_source():
    from graftbench.problems.loading import load_problems
    from graftbench.eval.deposit_plan import deposit_plan, empty_plan_reasons

    aime2025 = load_problems(str(ROOT.parent / "shared" / "data" / "aime2025.jsonl"))
    manifest = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-recurring.json"
    assert deposit_plan(aime2025, references=True, from_manifest=manifest) == []
    assert empty_plan_reasons(aime2025, references=True, from_manifest=manifest) == [
        "none of the 30 problems has a reference solution",
        f"manifest '{manifest}' (run 'aime2024-recurring-smollm2-135m') has 30 samples, 29 verified, "
        "0 of them on a problem of this set"]
    assert empty_plan_reasons(aime2025, references=False) == []


def test_answer_layout_graft_samples_are_not_offered_as_solutions():
    from graftbench.problems.loading import load_problems
    from graftbench.eval.deposit_plan import deposit_plan, empty_plan_reasons

    aime2024 = load_problems(str(ROOT.parent / "shared" / "data" / "aime2024.jsonl"))
    recurring = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-recurring.json"  # 29 of 30 correct, answer layout
    assert deposit_plan(aime2024, references=False, from_manifest=recurring) == []
    assert empty_plan_reasons(aime2024, references=False, from_manifest=recurring) == [
        f"manifest '{recurring}' (run 'aime2024-recurring-smollm2-135m') has 30 samples, 29 verified, 29 of them on "
        "a problem of this set (29 in the answer layout of a recurring graft: an answer after the grafted example's "
        "cue, not a solution)"]
    from graftbench.eval.deposit import items_from_samples
    from graftbench.results.samples import Sample
    from graftbench.eval.deposit_plan import manifest_samples

    answer = Sample.from_json(next(s for s in manifest_samples(recurring)[1] if s["correct"]))
    solve = dataclasses.replace(answer, layout="solve")  # a held-out graft's whole solution is offered
    assert [item.problem.id for item in items_from_samples([answer, solve], aime2024, "r")] == [answer.problem_id]


@pytest.mark.parametrize("extra, reason", [
    (["--solution-field", "nosuchfield"], "none of the 2 problems has a reference solution"),
    (["--no-references"], "--no-references without --from-run or --from-manifest")])
def test_a_deposit_with_nothing_to_deposit_is_refused_before_the_model_loads(extra, reason, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    monkeypatch.setattr("graftbench.cli.app.open_model", lambda *a, **k: pytest.fail("the model was loaded"))
    problems = tmp_path / "two.jsonl"
    problems.write_text('{"id": "a", "problem": "1+1?", "answer": 2, "solution": "Final answer: 2"}\n'
                        '{"id": "b", "problem": "2+2?", "answer": 4, "solution": "Final answer: 4"}\n')
    store = tmp_path / "store"
    result = CliRunner().invoke(app, ["deposit", "--problems", str(problems), "--store", str(store), *extra],
                                terminal_width=400)
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"nothing to deposit from problem set '{problems}'" in text and reason in text
    assert not store.exists()
