"""The flywheel's one round (``graftbench run``): solve every problem, deposit the recurring part's verified and
reference solutions, evaluate with the graft (certified) on all, and verify both manifests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .deposit import DepositReport
from ..results.manifest import verify_manifest
from ..problems.types import Problem
from ..engine.base import EngineSession
from ..settings import EvalSettings
from .eval_run import RunResult, run_eval
from ..util.provenance import code_version
from .deposit_plan import deposit_job


@dataclass
class FlywheelResult:
    """What ``graftbench run`` did: the baseline and graft runs, the deposit, the split and the manifest checks."""

    baseline: RunResult
    grafted: RunResult
    deposit: DepositReport
    recurring: list[str]
    held_out: list[str]
    manifest_checks: dict[str, list[str]] = field(default_factory=dict)

    def _parts(self) -> list[tuple[str, list[dict]]]:
        """``(label, sample dicts)``: baseline and graft, each on the recurring and the held-out part."""
        return [(f"{label} · {part}", [s.to_json() for s in result.samples if s.problem_id in ids])
                for part, ids in (("recurring", set(self.recurring)), ("held-out", set(self.held_out)))
                for label, result in (("baseline", self.baseline), ("graft", self.grafted))]

    def rows(self) -> list[tuple[str, dict]]:
        """Summary rows: baseline and graft, each on the recurring and the held-out part."""
        from ..results.manifest import compute_totals

        return [(label, compute_totals(samples)) for label, samples in self._parts()]

    def checks(self) -> dict:
        """What each row of :meth:`rows` checked (:func:`graftbench.results.metrics.run_checks`), by its label."""
        from ..results.metrics import run_checks

        return {label: run_checks(samples) for label, samples in self._parts()}


def split_recurring(problems: list[Problem]) -> tuple[list[Problem], list[Problem]]:
    """The first instance of each family is recurring (its solution gets deposited); the rest are held out."""
    seen, recurring, held_out = set(), [], []
    for p in problems:
        (held_out if p.family in seen else recurring).append(p)
        seen.add(p.family)
    return recurring, held_out


def flywheel(session: EngineSession, problems: list[Problem], source: str, *, prefix: str, max_new_tokens: int,
             runs_root: str | Path = "runs", store_root: str | Path = "store", on_sample=None, on_item=None,
             on_stage: Callable[[str], None] | None = None) -> FlywheelResult:
    """Solve all problems (baseline), deposit the recurring part's verified and reference solutions, eval with
    graft (certified) on all, and verify both manifests. Both manifests name the code version read when it started
    (``environment.code``)."""
    code = code_version()  # at the start: the checkout may move during the runs
    stage = on_stage or (lambda _: None)
    recurring, held_out = split_recurring(problems)
    stage("solve (baseline)")
    baseline = run_eval(session, problems, source, f"{prefix}-baseline", EvalSettings(max_new_tokens=max_new_tokens),
                        command="solve", runs_root=runs_root, on_sample=on_sample, code=code)
    stage("deposit")
    report = deposit_job(session, store_root, recurring, references=True, from_run=baseline.run, on_item=on_item)
    stage("eval --graft --certify")
    grafted = run_eval(session, problems, source, f"{prefix}-graft",
                       EvalSettings(max_new_tokens=max_new_tokens, graft=True, certify=True), command="eval",
                       runs_root=runs_root, store_root=store_root, on_sample=on_sample, code=code)
    checks = {}
    for result in (baseline, grafted):
        mismatches, _ = verify_manifest(result.run.manifest_path, store_root, require_artifacts=True)
        checks[result.run.name] = mismatches
    return FlywheelResult(baseline, grafted, report, [p.id for p in recurring], [p.id for p in held_out], checks)
