"""The flywheel over rounds (``graftbench flywheel --rounds R``): the library grows from the model's own verified
samples, and each round measures held-out transfer (baseline against graft) and recurring recall.

The pool is the built-in problem set, cut into R + 1 slices of ``per_family`` new problems per family. Round 0
solves slice 0 (N samples each) and deposits the first verified sample of every problem it solved. Round r (1..R)
then evaluates slice r as held-out twice, baseline and graft, evaluates every problem in the library again as
recurring (graft), and deposits slice r's verified samples (from either arm) before the next round. Reference
solutions are never deposited. In program mode (``settings.mode``) every run asks for programs and a verified
program is re-run in the sandbox before it is deposited. Every run is a resumable run folder with its own manifest
(``settings.round`` = r), so an interrupted flywheel resumes where it stopped, and ``graftbench report --rounds``
draws the curve.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..problems.builtin import builtin_problems
from .deposit import DepositItem, DepositReport, deposit_items, item_from_sample
from ..results.metrics import paired_difference
from ..problems.types import Problem
from ..results.samples import Sample
from ..engine.base import EngineSession
from ..programs.sandbox import Sandbox, open_sandbox
from ..settings import EvalSettings, RoundsSettings
from ..store.open import open_store
from .eval_run import RunResult, run_eval
from ..util.provenance import code_version
from .run_identity import problem_entry


@dataclass
class RoundResult:
    """One round: the library size its grafts could draw on (artifacts), its runs (``None`` in round 0 where
    there is no library yet), what it deposited, and the paired graft − baseline difference on its held-out slice."""

    round: int
    library_size: int
    held_out: list[str]
    baseline: RunResult
    graft: RunResult | None = None
    recurring: RunResult | None = None
    deposit: DepositReport = field(default_factory=DepositReport)
    difference: dict | None = None

    def row(self) -> dict:
        """The round's figures as a JSON-ready dict (accuracies are avg@N over the slice's problems)."""
        def metrics(result):
            return result.manifest["metrics"] if result is not None else None

        def accuracy(result):
            m = metrics(result)
            return None if m is None else {"avg_at_n": m["avg_at_n"], "ci95": m["accuracy_ci95"],
                                           "decode_tokens_per_correct": m["decode_tokens_per_correct"]}

        return {"round": self.round, "library_size": self.library_size, "held_out_problems": len(self.held_out),
                "held_out_baseline": accuracy(self.baseline), "held_out_graft": accuracy(self.graft),
                "difference": self.difference, "recurring": accuracy(self.recurring),
                "deposited": len(self.deposit.deposited)}


def pool_slices(settings: RoundsSettings) -> list[list[Problem]]:
    """The R + 1 slices of the built-in pool: slice r holds problems ``r * per_family`` to
    ``(r + 1) * per_family - 1`` of every family, in family order."""
    pool = builtin_problems(n_per_family=settings.per_family * (settings.rounds + 1), seed=settings.pool_seed)
    slices: list[list[Problem]] = [[] for _ in range(settings.rounds + 1)]
    for problem in pool:
        index = int(problem.id.rsplit("-", 1)[1]) // settings.per_family
        slices[index].append(problem)
    return slices


def verified_items(results: list[RunResult], problems: list[Problem], source: str) -> list[DepositItem]:
    """The first verified sample (by run, then sample index) of each problem: the model's own solutions only (a
    program-mode sample's program, :func:`graftbench.eval.deposit.item_from_sample`)."""
    by_id = {p.id: p for p in problems}
    chosen: dict[str, Sample] = {}
    for result in results:
        for sample in result.samples:
            if sample.correct and sample.problem_id in by_id and sample.problem_id not in chosen:
                chosen[sample.problem_id] = sample
    return [item_from_sample(by_id[pid], chosen[pid], source) for pid in by_id if pid in chosen]


def _eval_settings(settings: RoundsSettings, round_: int, graft: bool) -> EvalSettings:
    return EvalSettings(max_new_tokens=settings.max_new_tokens, graft=graft, samples=settings.samples,
                        temperature=settings.temperature, top_p=settings.top_p, seed=settings.seed, round=round_,
                        mode=settings.mode)


def run_rounds(session: EngineSession, settings: RoundsSettings, runs_root: str | Path = "runs",
               store_root: str | Path = "store", on_sample: Callable[[Sample], None] | None = None,
               on_stage: Callable[[str, int], None] | None = None,
               on_item: Callable[[DepositItem], None] | None = None,
               sandbox: Sandbox | None = None) -> list[RoundResult]:
    """Run (or resume) the flywheel: round 0 and rounds 1..R as the module docstring says. Returns one
    :class:`RoundResult` per round. The store at ``store_root`` is created if needed and should hold nothing but
    this flywheel's deposits. ``on_stage(name, total)`` announces each stage and how many samples (or deposit
    items) it will report through ``on_sample`` (``on_item``). In program mode every program of every round runs
    in ``sandbox``, opened here (:func:`graftbench.programs.sandbox.open_sandbox`) when ``None``.

    Raises :class:`graftbench.results.runs.RunError` when a run folder of the flywheel holds other settings (another
    model or sampling), :class:`graftbench.programs.sandbox.SandboxError` in program mode when the sandbox cannot
    be built, and the store and storage errors of :func:`graftbench.eval.eval_run.run_eval`. Every run's
    manifest names the code version read when the flywheel started (``environment.code``).
    """
    if settings.mode == "program" and sandbox is None:
        sandbox = open_sandbox()
    code = code_version()  # at the start: the rounds may take hours while the checkout moves
    stage = on_stage or (lambda name, total: None)
    n = settings.samples
    slices, store = pool_slices(settings), open_store(store_root)
    results: list[RoundResult] = []
    for round_, problems in enumerate(slices):
        name = f"{settings.prefix}-r{round_}"
        library_size = len(store.ids())
        stage(f"round {round_}: {'held-out ' if round_ else ''}baseline", len(problems) * n)
        base = run_eval(session, problems, "builtin", f"{name}-baseline", _eval_settings(settings, round_, False),
                        command="solve", runs_root=runs_root, on_sample=on_sample, code=code,
                        sandbox=sandbox)
        result = RoundResult(round_, library_size, [p.id for p in problems], base)
        arms = [base]
        if round_ > 0:
            stage(f"round {round_}: held-out graft (library of {library_size})", len(problems) * n)
            result.graft = run_eval(session, problems, "builtin", f"{name}-graft",
                                    _eval_settings(settings, round_, True), runs_root=runs_root,
                                    store_root=store_root, on_sample=on_sample, code=code, sandbox=sandbox)
            arms.append(result.graft)
            entries = [problem_entry(p) for p in problems]
            result.difference = paired_difference([s.to_json() for s in result.graft.samples],
                                                  [s.to_json() for s in base.samples], entries, seed=settings.seed)
            solved = _library_problems(slices[:round_], results)
            if solved:
                stage(f"round {round_}: recurring", len(solved) * n)
                result.recurring = run_eval(session, solved, "builtin", f"{name}-recurring",
                                            _eval_settings(settings, round_, True), runs_root=runs_root,
                                            store_root=store_root, on_sample=on_sample, code=code,
                                            sandbox=sandbox)
        if round_ < settings.rounds:
            items = verified_items(arms, problems, f"flywheel:{name}")
            stage(f"round {round_}: deposit", len(items))
            result.deposit = deposit_items(session, store, items, on_item, mode=settings.mode, sandbox=sandbox)
        results.append(result)
    return results


def _library_problems(earlier: list[list[Problem]], results: list[RoundResult]) -> list[Problem]:
    """The problems of earlier slices that a deposit put in the library."""
    deposited = {pid for r in results for pid, *_ in r.deposit.deposited}
    return [p for problems in earlier for p in problems if p.id in deposited]


def rounds_summary(results: list[RoundResult], settings: RoundsSettings) -> dict:
    """The flywheel's JSON summary: its settings and one row per round (:meth:`RoundResult.row`)."""
    return {"settings": settings.to_dict(), "rounds": [r.row() for r in results]}
