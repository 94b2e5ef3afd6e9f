"""The flywheel over rounds: the pool's slices, the model's own verified samples as the only deposits, and a
resumable run of every round."""

from __future__ import annotations

from types import SimpleNamespace

from graftbench.eval.flywheel import pool_slices, rounds_summary, run_rounds, verified_items
from graftbench.problems.types import Problem
from graftbench.settings import RoundsSettings

FAMILIES = ["mod", "paths", "digits", "divisors", "base", "gcd"]


def test_slices_are_disjoint_with_per_family_new_problems_each():
    slices = pool_slices(RoundsSettings(rounds=3, per_family=2))
    assert len(slices) == 4
    ids = [p.id for s in slices for p in s]
    assert len(ids) == len(set(ids)) == 48
    for r, problems in enumerate(slices):
        assert [p.id for p in problems] == [f"{f}-{k}" for f in FAMILIES for k in (2 * r, 2 * r + 1)]


def _sample(pid: str, index: int, correct: bool, output: str):
    return SimpleNamespace(problem_id=pid, sample_index=index, correct=correct, output=output)


def test_only_the_first_verified_sample_of_each_problem_is_offered():
    problems = [Problem("a-0", "x", "1"), Problem("b-0", "y", "2"), Problem("c-0", "z", "3", solution="reference")]
    base = SimpleNamespace(samples=[_sample("a-0", 0, False, "wrong"), _sample("a-0", 1, True, "first"),
                                    _sample("a-0", 2, True, "second"), _sample("c-0", 0, False, "no")])
    graft = SimpleNamespace(samples=[_sample("b-0", 0, True, "grafted"), _sample("a-0", 0, True, "later")])
    items = verified_items([base, graft], problems, "flywheel:t")
    assert [(i.problem.id, i.solution, i.source) for i in items] == [("a-0", "first", "flywheel:t"),
                                                                    ("b-0", "grafted", "flywheel:t")]


def test_rounds_run_resume_and_label_every_run(session, tmp_path):
    settings = RoundsSettings(rounds=1, per_family=1, samples=2, max_new_tokens=6, prefix="t")
    stages = []
    results = run_rounds(session, settings, runs_root=tmp_path / "runs", store_root=tmp_path / "store",
                         on_stage=lambda name, total: stages.append((name, total)))
    assert [r.round for r in results] == [0, 1]
    assert results[0].graft is None and results[1].graft is not None
    assert stages[0] == ("round 0: baseline", 12)
    assert results[1].library_size == len(results[0].deposit.deposited)
    for result in (results[0].baseline, results[1].baseline, results[1].graft):
        assert result.manifest["settings"]["round"] in (0, 1)
        assert result.manifest["metrics"]["samples_per_problem"] == {"min": 2, "max": 2}
    assert all(source.startswith("flywheel:") for source in
               [row["source"] for row in __import__("graftbench.store.folder", fromlist=["Store"]).Store(
                   tmp_path / "store").rows()])
    summary = rounds_summary(results, settings)
    assert [row["round"] for row in summary["rounds"]] == [0, 1]
    assert summary["rounds"][1]["difference"]["problems"] == 6
    again = run_rounds(session, settings, runs_root=tmp_path / "runs", store_root=tmp_path / "store",
                       on_sample=lambda s: (_ for _ in ()).throw(AssertionError("re-ran a recorded sample")))
    assert [s.output_sha256 for s in again[1].graft.samples] == [s.output_sha256 for s in results[1].graft.samples]
