"""What a deposit run deposits (reference solutions, a run's or a manifest's verified samples), why a plan is empty,
and the deposit job over a store."""

from __future__ import annotations

from pathlib import Path

from .deposit import DepositItem, DepositReport, deposit_items, items_from_problems, items_from_samples
from ..results.manifest import ManifestError, check_manifest, load_manifest
from ..problems.types import Problem
from ..results.runs import RunDir
from ..results.samples import Sample
from ..engine.base import EngineSession
from ..programs.sandbox import Sandbox
from ..settings import SandboxLimits
from ..store.open import open_store


def deposit_plan(problems: list[Problem], *, references: bool, from_run: RunDir | None = None,
                 from_manifest: str | Path | None = None) -> list[DepositItem]:
    """The solutions a deposit job offers, in order: the problems' reference solutions (``references``), then
    the verified samples of the solve run ``from_run`` whose problem is in ``problems``, then those recorded in the
    run manifest ``from_manifest`` (a committed manifest stands in for its run folder; see
    :func:`manifest_samples`). Each is re-verified when deposited; its length is the deposit's progress total.

    Raises :class:`graftbench.results.runs.RunError` for a damaged samples line,
    :class:`graftbench.results.manifest.ManifestError` for a manifest that is not one or does not verify, and
    ``ValueError`` for a recorded sample without the fields of a :class:`~graftbench.results.samples.Sample`."""
    items = items_from_problems(problems) if references else []
    for _, run_name, samples in _sample_sources(from_run, from_manifest):
        items += items_from_samples(samples, problems, run_name)
    return items


def _sample_sources(from_run: RunDir | None, from_manifest: str | Path | None) -> list[tuple[str, str, list[Sample]]]:
    """The samples a deposit may draw from, per source: (label, run name, samples) for the run folder ``from_run``
    and the run manifest ``from_manifest``, in that order (each only when given). Raises what
    :func:`deposit_plan` raises."""
    sources = []
    if from_run is not None:
        sources.append((f"run '{from_run.name}'", from_run.name, from_run.read_samples()))
    if from_manifest is not None:
        run_name, samples = manifest_samples(from_manifest)
        sources.append((f"manifest '{from_manifest}' (run '{run_name}')", run_name, samples))
    return [(label, name, [Sample.from_json(s) for s in samples]) for label, name, samples in sources]


def empty_plan_reasons(problems: list[Problem], *, references: bool, from_run: RunDir | None = None,
                       from_manifest: str | Path | None = None) -> list[str]:
    """Why :func:`deposit_plan` offers nothing for these arguments: one clause per source asked for (the problem
    set's reference solutions, the run, the manifest), each saying what it held. An empty list when no source was
    asked for at all. Raises what :func:`deposit_plan` raises."""
    reasons = [f"none of the {len(problems)} problems has a reference solution"] if references else []
    ids = {p.id for p in problems}
    for label, _, samples in _sample_sources(from_run, from_manifest):
        correct = [s for s in samples if s.correct and s.problem_id in ids]
        cued = sum(s.layout == "answer" for s in correct)
        reasons.append(f"{label} has {len(samples)} samples, {sum(s.correct for s in samples)} verified, "
                       f"{len(correct)} of them on a problem of this set"
                       + (f" ({cued} in the answer layout of a recurring graft: an answer after the grafted "
                          "example's cue, not a solution)" if cued else ""))
    return reasons


def manifest_samples(path: str | Path) -> tuple[str, list[dict]]:
    """The run name and the samples recorded in the run manifest at ``path``, once
    :func:`graftbench.results.manifest.verify_manifest` holds for it (artifacts are not required). A deposit from it
    writes the same ``solve:RUN`` source as a deposit from the run folder, so the artifacts are the same bytes.

    Raises :class:`graftbench.results.manifest.ManifestError` naming ``path`` when it is not a run manifest or does not
    verify (with its first mismatch)."""
    manifest = load_manifest(path)
    mismatches, _ = check_manifest(manifest)
    if mismatches:
        raise ManifestError(f"manifest '{path}' does not verify ({len(mismatches)} mismatches; the first: "
                            f"{mismatches[0]}): refusing to deposit its samples")
    return manifest["run"], manifest["samples"]


def deposit_job(session: EngineSession, store_root: str | Path, problems: list[Problem], *, references: bool,
                from_run: RunDir | None = None, on_item=None, items: list[DepositItem] | None = None,
                mode: str = "text", limits: SandboxLimits = SandboxLimits(), recompute: bool = False,
                sandbox: Sandbox | None = None) -> DepositReport:
    """Deposit reference solutions (``references``) and/or a solve run's verified samples (or the ``items`` of a
    :func:`deposit_plan` already made) into the store at ``store_root``, created if it does not exist. In
    ``program`` mode a program-mode sample's program is re-run in ``sandbox`` (opened when ``None`` and a program
    is to run) under ``limits`` to re-verify it; in
    ``text`` mode such a sample is refused. A solution whose artifact the store already holds intact is taken
    without a prefill unless ``recompute`` (:func:`graftbench.eval.deposit.deposit_items`).

    Raises :class:`graftbench.store.folder.StoreError` when the store's index is missing or damaged,
    :class:`graftbench.util.durable.StorageError` when a write fails (e.g. disk full), and
    :class:`graftbench.programs.sandbox.SandboxError` when no sandbox can be started."""
    if items is None:
        items = deposit_plan(problems, references=references, from_run=from_run)
    store = open_store(store_root)
    report = deposit_items(session, store, items, on_item, mode=mode, limits=limits, recompute=recompute,
                           sandbox=sandbox)
    report.cleaned = store.cleaned
    return report
