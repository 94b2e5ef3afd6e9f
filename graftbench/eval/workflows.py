"""The commands' logic, callable from tests: an eval run with its manifest, and the whole flywheel."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .dispatch import DispatchReport
from .deposit import DepositItem, DepositReport, deposit_items, items_from_problems, items_from_samples
from ..util.energy import EnergyMeter
from .evaluate import evaluate
from ..results.manifest import (ManifestError, build_manifest, check_manifest, graft_use, load_manifest,
                                verify_manifest, write_manifest)
from ..problems.types import Problem, problem_set_sha256, problem_text_sha256
from ..results.runs import PIN_RECORD, RunDir
from ..results.samples import Sample
from ..engine.base import EngineSession
from ..settings import EvalSettings, SandboxLimits
from ..problems.shards import parse_shard, select
from ..problems.sources import recorded_source
from ..store.folder import Store
from ..store.open import open_store


@dataclass
class RunResult:
    """A finished (or budget-stopped) run: its folder, samples in problem order, and its sealed manifest."""

    run: RunDir
    samples: list[Sample]
    manifest: dict
    cleaned: list[Path] = field(default_factory=list)  # temporary files of killed writers removed on opening
    dispatch: DispatchReport | None = None  # a run over Ray workers: started, refused, lost (graftbench.eval.dispatch)

    @property
    def certificate_mismatches(self) -> list[str]:
        """Problem ids whose ``--certify`` recompute gave another logits hash than the graft."""
        return [s.problem_id for s in self.samples if s.certified is False]


def problem_entry(problem: Problem) -> dict:
    """A problem as a manifest lists it: id, text SHA-256 and key (never its text), and its family when the set
    gives one."""
    entry = {"id": problem.id, "problem_sha256": problem_text_sha256(problem.problem), "key": problem.answer}
    return {**entry, "family": problem.family} if problem.family else entry


def problem_set_entry(source: str, problems: list[Problem], selected: list[tuple[int, Problem]],
                      shard: str | None) -> dict:
    """The manifest's ``problem_set``: its source, SHA-256 and size. A shard's lists the problems it ran, and under
    ``shard`` the whole set's SHA-256 and size and each of its problems' position in the whole set, which
    :func:`graftbench.scale.merge.merge_runs` checks and orders by. The source is recorded by
    :func:`graftbench.problems.sources.recorded_source` (never an absolute path of this machine)."""
    source = recorded_source(source)
    if shard is None:
        return {"source": source, "sha256": problem_set_sha256(problems), "n": len(problems)}
    shard_problems = [p for _, p in selected]
    return {"source": source, "sha256": problem_set_sha256(shard_problems), "n": len(shard_problems),
            "shard": {"spec": shard, "of_sha256": problem_set_sha256(problems), "of_n": len(problems),
                      "positions": [i for i, _ in selected]}}


def shard_size(problems: list[Problem], settings: EvalSettings) -> int:
    """How many problems a run of ``settings`` evaluates (its shard's, or all)."""
    return len(select(problems, parse_shard(settings.shard)))


def samples_recorded(runs_root: str | Path, run_name: str, problems: list[Problem], settings: EvalSettings) -> int:
    """How many of the samples a run of ``settings`` over ``problems`` (its shard's) makes are already recorded in
    ``runs/<run_name>/samples.jsonl``: where a resumed run's progress starts. 0 for a run that does not exist, or
    whose samples file is damaged (opening the run then names the line)."""
    from ..results.runs import RunError

    ids = {p.id for _, p in select(problems, parse_shard(settings.shard))}
    try:
        recorded = RunDir(runs_root, run_name).read_samples()
    except (RunError, OSError):
        return 0
    return len({(s.get("problem_id"), s.get("sample_index")) for s in recorded
                if s.get("problem_id") in ids and s.get("sample_index") in range(settings.samples)})


def run_record(command: str, config: dict, config_fingerprint: str, problems: list[Problem],
               settings: EvalSettings) -> dict:
    """What a run folder's ``run.json`` records, and what a resumed run must match (:meth:`RunDir.open`): the
    command, the model's name, the pin's fingerprint, the whole problem set's SHA-256 and the settings; and the pin
    itself (``config``, never compared: it names the fields of a fingerprint that differs, e.g. the thread count).
    How the run is executed (one process, or Ray workers) is not part of it: either can resume the other's run."""
    return {**_run_identity(command, config["model"], problems, settings), "config_fingerprint": config_fingerprint,
            PIN_RECORD: config}


def _run_identity(command: str, model: str, problems: list[Problem], settings: EvalSettings) -> dict:
    """:func:`run_record` less the pin's fingerprint: what is known before the model loads."""
    return {"command": command, "model": model, "problem_set_sha256": problem_set_sha256(problems),
            **settings.to_dict()}


def check_resume_before_load(runs_root: str | Path, run_name: str, command: str, model: str,
                             problems: list[Problem], settings: EvalSettings) -> None:
    """Refuse, before a model loads, to resume ``runs/<run_name>`` when its ``run.json`` records another command,
    model spec, problem set or settings than these (:func:`run_record` without the pin's fingerprint, which needs
    the loaded model and is compared when the run opens). Raises :class:`graftbench.results.runs.RunError`."""
    RunDir(runs_root, run_name).check_resumable(_run_identity(command, model, problems, settings), partial=True)


def eval_manifest(*, run_name: str, command: str, config: dict, config_fingerprint: str, settings: EvalSettings,
                  source: str, problems: list[Problem], samples: list[dict], energy: dict,
                  store_root: str | Path | None, extra: dict | None = None) -> dict:
    """The sealed manifest of a solve or eval run over ``problems`` (the whole set; the run's shard of it when
    ``settings.shard`` is given), its ``samples`` in problem order then sample index; ``store_root`` is recorded
    when the run grafted (``None`` otherwise); ``extra`` adds sections. A run with ``settings.graft`` also records
    what it grafted (:func:`graftbench.results.manifest.graft_use`: ``none_grafted`` when nothing). Raises
    ``ValueError`` as :func:`graftbench.results.manifest.build_manifest` does."""
    selected = select(problems, parse_shard(settings.shard))
    if settings.graft:
        extra = {**(extra or {}), "graft_use": graft_use(samples)}
    return build_manifest(
        run=run_name, command=command, config=config, config_fingerprint=config_fingerprint,
        settings=settings.to_dict(), problem_set=problem_set_entry(source, problems, selected, settings.shard),
        problems=[problem_entry(p) for _, p in selected], samples=samples, energy=energy,
        store=str(store_root) if store_root is not None else None, extra=extra,
    )


def options_section(command_options: dict | None) -> dict | None:
    """The manifest section recording the options a command was given (``{"command_options": {flag: value}}``), or
    ``None`` when it was given none or the run was not started from the command line: a manifest without it is one
    written before options were recorded, or by the Python API."""
    return {"command_options": dict(command_options)} if command_options else None


def open_graft_store(store_root: str | Path, new_store: bool = False) -> Store:
    """The store a graft run reads: opened for writing (which removes killed writers' temporary files and brings
    an older index up to date), or read-only when its file system refuses writes (a graft only reads). Raises
    :class:`graftbench.store.index.StoreError` as :func:`graftbench.store.open.open_store` does."""
    try:
        return open_store(store_root, create=new_store)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or new_store:
            raise
        return open_store(store_root, readonly=True)


def run_eval(session: EngineSession, problems: list[Problem], source: str, run_name: str, settings: EvalSettings,
             command: str = "eval", runs_root: str | Path = "runs", store_root: str | Path | None = None,
             on_sample: Callable[[Sample], None] | None = None, new_store: bool = False,
             command_options: dict | None = None) -> RunResult:
    """Open (or resume) ``runs/<run_name>`` holding its lock, evaluate every problem not yet recorded (of
    ``settings.shard`` only, when given), write ``manifest.json``, release the lock.

    With ``settings.graft`` the store at ``store_root`` must exist, unless ``new_store`` (then an empty one is
    created and every problem runs as the baseline). ``command_options``: the options the command was given (flag
    to value), recorded as the manifest's ``command_options`` when not empty. Raises
    :class:`graftbench.results.runs.RunError` when the run folder holds a run with other settings or another process
    holds it, and :class:`graftbench.store.folder.StoreError` for a store that does not exist (without ``new_store``)
    or whose index is missing or damaged.
    """
    run = RunDir(runs_root, run_name)
    shard_problems = [p for _, p in select(problems, parse_shard(settings.shard))]
    store = open_graft_store(store_root, new_store) if settings.graft and store_root is not None else None
    with run:
        run.lock()  # first: a run that another process holds is refused before anything else
        config = session.config.to_dict()
        run.open(run_record(command, config, session.config.fingerprint, problems, settings))
        # NVML reads the GPU the run uses (cuda:N); a session without a torch device gives its pin's device kind
        meter = EnergyMeter(device=getattr(session, "device", session.config.device))
        samples = evaluate(session, shard_problems, run, settings, store, meter, on_sample)
        manifest = eval_manifest(
            run_name=run_name, command=command, config=config, config_fingerprint=session.config.fingerprint,
            settings=settings, source=source, problems=problems, samples=[s.to_json() for s in samples],
            energy=meter.describe(), store_root=store_root if store is not None else None,
            extra=options_section(command_options))
        write_manifest(manifest, run.manifest_path)
    return RunResult(run, samples, manifest, run.cleaned + (store.cleaned if store is not None else []))


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
                mode: str = "text", limits: SandboxLimits = SandboxLimits(), recompute: bool = False) -> DepositReport:
    """Deposit reference solutions (``references``) and/or a solve run's verified samples (or the ``items`` of a
    :func:`deposit_plan` already made) into the store at ``store_root``, created if it does not exist. In
    ``program`` mode a program-mode sample's program is re-run in the sandbox under ``limits`` to re-verify it; in
    ``text`` mode such a sample is refused. A solution whose artifact the store already holds intact is taken
    without a prefill unless ``recompute`` (:func:`graftbench.eval.deposit.deposit_items`).

    Raises :class:`graftbench.store.folder.StoreError` when the store's index is missing or damaged,
    :class:`graftbench.util.durable.StorageError` when a write fails (e.g. disk full), and
    :class:`graftbench.programs.sandbox.SandboxError` when no sandbox can be started."""
    if items is None:
        items = deposit_plan(problems, references=references, from_run=from_run)
    store = open_store(store_root)
    report = deposit_items(session, store, items, on_item, mode=mode, limits=limits, recompute=recompute)
    report.cleaned = store.cleaned
    return report


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
    graft (certified) on all, and verify both manifests."""
    stage = on_stage or (lambda _: None)
    recurring, held_out = split_recurring(problems)
    stage("solve (baseline)")
    baseline = run_eval(session, problems, source, f"{prefix}-baseline", EvalSettings(max_new_tokens=max_new_tokens),
                        command="solve", runs_root=runs_root, on_sample=on_sample)
    stage("deposit")
    report = deposit_job(session, store_root, recurring, references=True, from_run=baseline.run, on_item=on_item)
    stage("eval --graft --certify")
    grafted = run_eval(session, problems, source, f"{prefix}-graft",
                       EvalSettings(max_new_tokens=max_new_tokens, graft=True, certify=True), command="eval",
                       runs_root=runs_root, store_root=store_root, on_sample=on_sample)
    checks = {}
    for result in (baseline, grafted):
        mismatches, _ = verify_manifest(result.run.manifest_path, store_root, require_artifacts=True)
        checks[result.run.name] = mismatches
    return FlywheelResult(baseline, grafted, report, [p.id for p in recurring], [p.id for p in held_out], checks)
