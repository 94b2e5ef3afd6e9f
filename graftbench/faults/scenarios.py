"""Fault scenarios that the runner (:mod:`graftbench.faults.runner`) and the tests both play: each applies one
fault to a real store or run and returns what happened, for the runner to score and the tests to assert on.

* :func:`graft_refusal`: restore an artifact's chain, and the :class:`ArtifactError` that refused it.
* Crashes: :func:`kill_put` (a ``Store.put`` SIGKILLed at a named point), :func:`kill_a_resumed_solve`.
* Concurrency: :func:`put_concurrently` (two depositing processes while this one reads).
* Full disk: :func:`deposit_on_a_full_disk`, :func:`solve_on_a_full_disk`, :func:`write_manifest_on_a_full_disk`.
* Bad inputs: :func:`apply_manifest_edit`, :func:`verify_edited_manifest`, :func:`problem_set_error`.
* Losses: :func:`inventory` before and after a fault, :func:`count_losses`, :func:`store_consistent`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..store.codec import ArtifactError
from ..eval.deposit import DepositReport, deposit_items, items_from_problems
from ..util.durable import StorageError
from ..results.manifest import verify_manifest, write_manifest
from ..problems.loading import load_problems
from ..problems.types import Problem, ProblemSetError
from ..results.runs import RunDir
from ..settings import EvalSettings
from ..store.folder import Store
from ..eval.eval_run import RunResult, run_eval
from .harness import (
    SOLVE_CODE,
    complete_lines,
    disk_full,
    index_full,
    kill_when_lines,
    put_in_subprocess,
    session_args,
    start_python,
    write_payloads,
)

SOURCE = "faults"  # the problem-set source recorded by every run the scenarios make


def graft_refusal(session, store: Store, artifact_id: str) -> ArtifactError | None:
    """Graft ``artifact_id``'s chain (:meth:`graftbench.engine.base.EngineSession.graft`); the
    :class:`ArtifactError` that refused it, or None when it grafted (any other exception propagates)."""
    try:
        session.graft(store, artifact_id)
    except ArtifactError as exc:
        return exc
    return None

# --------------------------------------------------------------------------------------------- crashes


def kill_put(store_root: Path, data: bytes, point: str, payloads: Path) -> int:
    """Put artifact ``data`` into the store from a subprocess that ``GRAFTBENCH_FAULT=point`` SIGKILLs at that point
    of :meth:`Store.put` (``deposit-before-rename``, ``deposit-before-index``); returns its exit status
    (``-SIGKILL`` when the kill happened). The payload file is written under ``payloads``."""
    return put_in_subprocess(store_root, write_payloads(payloads, [data]), fault=point).wait(300)


class _Interrupt(Exception):
    pass


def _bytes(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


@dataclass
class KilledSolve:
    """What :func:`kill_a_resumed_solve` saw: the samples file's bytes before the solve process, at its kill and
    after the resume, the process's exit status, and the problems the resume evaluated."""

    run: RunDir
    interrupted: bool  # the first run stopped after the samples asked for
    prior: bytes
    exit_code: int
    at_kill: bytes
    after: bytes
    resumed: list[str]


def kill_a_resumed_solve(session, problems_path: Path, runs: Path, name: str, mode: str, recorded: int = 2,
                         max_new_tokens: int = 4) -> KilledSolve:
    """Record ``recorded`` samples of the set at ``problems_path`` in ``runs/name``, then a solve process resumes
    the run and is SIGKILLed: at a named point (``sample-torn``: mid-write of its first sample;
    ``sample-before-append``) or as soon as it has recorded one more sample (``random``). Then this process
    resumes the run to the end."""
    problems = load_problems(str(problems_path))
    settings = EvalSettings(max_new_tokens=max_new_tokens)
    run = RunDir(runs, name)

    def stop(sample):
        if len(complete_lines(run.samples_path)) == recorded:
            raise _Interrupt

    try:
        run_eval(session, problems, SOURCE, name, settings, runs_root=runs, on_sample=stop)
        interrupted = False
    except _Interrupt:
        interrupted = True
    prior = _bytes(run.samples_path)
    proc = start_python(SOLVE_CODE, [*session_args(session), problems_path, runs, name, max_new_tokens],
                        fault=None if mode == "random" else mode)
    if mode == "random":
        kill_when_lines(proc, run.samples_path, len(complete_lines(run.samples_path)) + 1)
    code = proc.wait(300)
    at_kill = _bytes(run.samples_path)
    resumed: list[str] = []
    run_eval(session, problems, SOURCE, name, settings, runs_root=runs,
             on_sample=lambda sample: resumed.append(sample.problem_id))
    return KilledSolve(run, interrupted, prior, code, at_kill, _bytes(run.samples_path), resumed)

# --------------------------------------------------------------------------------------------- concurrency


@dataclass
class ConcurrentPuts:
    """What :func:`put_concurrently` saw: the two processes' exit statuses, the reads made while they ran, and
    every read that was refused or returned another artifact."""

    exit_codes: list[int]
    reads: int
    refused: list[str]


def put_concurrently(store_root: Path, artifacts: list[bytes], same: bool, payloads: Path,
                     rounds: int = 3) -> ConcurrentPuts:
    """Two processes put artifacts into the store at once, ``rounds`` times each: the same ones in opposite
    orders (``same``) or one half each. Meanwhile this process reads every artifact the index shows."""
    paths = write_payloads(payloads, artifacts)
    half = len(paths) // 2
    sets = (paths, paths[::-1]) if same else (paths[:half], paths[half:])
    procs = [put_in_subprocess(store_root, s, rounds=rounds) for s in sets]
    reads, refused = 0, []
    while any(p.poll() is None for p in procs):
        for artifact_id in Store(store_root).ids():
            try:
                read = Store(store_root).read(artifact_id)
                reads += 1
                if read.id != artifact_id:
                    refused.append(f"{artifact_id[:16]} read as {read.id[:16]}")
            except ArtifactError as exc:
                refused.append(str(exc))
    return ConcurrentPuts([p.wait() for p in procs], reads, refused)

# --------------------------------------------------------------------------------------------- full disk


@dataclass
class FullDiskDeposit:
    """What :func:`deposit_on_a_full_disk` saw: the error, the store's inventory before the deposit and right
    after the failure, and the report of the deposit repeated with space back."""

    error: StorageError | None
    before: dict
    after: dict
    retry: DepositReport


def deposit_on_a_full_disk(session, store: Store, problem: Problem, where: str) -> FullDiskDeposit:
    """Deposit ``problem`` on a full disk: ``where="file"`` fills it while the artifact file is written (4 KiB
    left), ``"index"`` while the SQLite row is inserted; then deposit it again with space back."""
    if where not in ("file", "index"):
        raise ValueError(f"where is 'file' or 'index', not {where!r}")
    before, error = store.inventory(), None
    full = disk_full(store.artifacts, free=4096) if where == "file" else index_full()
    with full:
        try:
            deposit_items(session, store, items_from_problems([problem]))
        except StorageError as exc:
            error = exc
    after = store.inventory()
    return FullDiskDeposit(error, before, after, deposit_items(session, store, items_from_problems([problem])))


@dataclass
class FullDiskSolve:
    """What :func:`solve_on_a_full_disk` saw: the error, the ``ENOSPC`` refusals, the samples file when the disk
    filled and after the error, whether a manifest was written, and the run resumed with space back."""

    run: RunDir
    error: StorageError | None
    refused: int
    at_fill: bytes | None
    after_error: bytes
    manifest_written: bool
    resumed: RunResult


def solve_on_a_full_disk(session, problems: list[Problem], runs: Path, name: str, free: int = 40,
                         max_new_tokens: int = 4) -> FullDiskSolve:
    """Solve ``problems`` in ``runs/name``; the disk under the run folder fills (``free`` bytes left) once the
    first sample is recorded. Then resume the run with space back."""
    run = RunDir(runs, name)
    settings = EvalSettings(max_new_tokens=max_new_tokens)
    state: dict = {}

    def fill_the_disk(sample):
        if not state:
            state["bytes"] = run.samples_path.read_bytes()
            state["full"] = disk_full(run.path, free=free)
            state["disk"] = state["full"].__enter__()

    error = None
    try:
        run_eval(session, problems, SOURCE, name, settings, runs_root=runs, on_sample=fill_the_disk)
    except StorageError as exc:
        error = exc
    finally:
        if "full" in state:
            state["full"].__exit__(None, None, None)
    after_error, manifest_written = _bytes(run.samples_path), run.manifest_path.exists()
    resumed = run_eval(session, problems, SOURCE, name, settings, runs_root=runs)
    refused = state["disk"].refused if "disk" in state else 0
    return FullDiskSolve(run, error, refused, state.get("bytes"), after_error, manifest_written, resumed)


def write_manifest_on_a_full_disk(manifest: dict, path: Path, free: int) -> StorageError | None:
    """Write ``manifest`` to ``path`` while the disk under its folder has ``free`` bytes left; the error, or None
    when the write succeeded."""
    with disk_full(path.parent, free=free):
        try:
            write_manifest(manifest, path)
        except StorageError as exc:
            return exc
    return None

# --------------------------------------------------------------------------------------------- bad inputs


def verify_edited_manifest(manifest: dict, path: Path, store: Path) -> list[str]:
    """Write ``manifest`` to ``path`` (re-serialized, NOT re-sealed) and verify it against ``store``; the
    mismatches."""
    write_manifest(manifest, path)
    return verify_manifest(path, store=store)[0]


def apply_manifest_edit(manifest: dict, edit: Callable[[dict], str], path: Path, store: Path) -> tuple[str, list[str]]:
    """Apply one edit (of :data:`~graftbench.faults.catalogue.MANIFEST_EDITS`, say) to a copy of ``manifest`` and
    verify it (:func:`verify_edited_manifest`); returns (the text the edit says a mismatch must contain, the
    mismatches)."""
    manifest = copy.deepcopy(manifest)
    expected = edit(manifest)
    return expected, verify_edited_manifest(manifest, path, store)


def problem_set_error(path: Path, content: bytes) -> ProblemSetError | None:
    """Write ``content`` to ``path`` and load it as a problem set; the :class:`ProblemSetError` raised, or None
    when it loaded."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    try:
        load_problems(str(path))
    except ProblemSetError as exc:
        return exc
    return None

# --------------------------------------------------------------------------------------------- inventory


def inventory(stores: list[Path], samples_files: list[Path]) -> dict:
    """What must never be lost: per store, the indexed ids whose file is intact; per samples file, its complete
    lines. Also the store's damaged, missing and orphaned entries, for consistency checks."""
    snapshot = {"artifacts": {}, "samples": {}, "stores": {}}
    for root in stores:
        inv = Store(root).inventory()
        snapshot["stores"][str(root)] = inv
        snapshot["artifacts"].update({f"{root}:{i}": True for i in set(inv["indexed"]) & set(inv["intact"])})
    for path in samples_files:
        snapshot["samples"][str(path)] = complete_lines(path)
    return snapshot


def count_losses(before: dict, after: dict) -> tuple[int, int]:
    """(artifacts lost, samples lost): indexed intact artifacts that are no longer both, and sample lines that
    are no longer present, byte-identical, at their place."""
    artifacts = sum(1 for key in before["artifacts"] if key not in after["artifacts"])
    samples = 0
    for path, lines in before["samples"].items():
        later = after["samples"].get(path, [])
        samples += sum(1 for i, line in enumerate(lines) if i >= len(later) or later[i] != line)
    return artifacts, samples


def store_consistent(root: Path) -> list[str]:
    """Problems with a store after a fault: damaged or missing indexed files, or a failed ``verify``."""
    inv = Store(root).inventory()
    problems = [f"damaged {i[:12]}" for i in inv["damaged"]] + [f"missing {i[:12]}" for i in inv["missing"]]
    return problems + Store(root).verify()
