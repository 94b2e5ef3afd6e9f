"""Faults of the store and run folders, played by the runner (``benchmarks/faults.py``) and the tests:
a damaged index rebuilt from the files, two artifact files swapped on disk, two processes resuming one run, and
temporary files of killed writers cleaned while a live writer's is kept.

Each scenario returns what it saw; :data:`FAULTS` scores them for the runner as ``(survived, detail)``.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..store.ids import artifacts_dir
from ..util.durable import clean_temporaries
from ..problems.loading import load_problems
from ..results.runs import RunDir, RunError
from ..settings import EvalSettings
from ..store.folder import Store
from ..store.index import StoreError
from ..store.open import reindex_store
from ..eval.eval_run import run_eval
from .harness import (
    SOLVE_CODE,
    lines_of,
    put_in_subprocess,
    session_args,
    sigkill,
    start_python,
    wait_for_line,
    write_payloads,
)

SOURCE = "faults"

# A process that writes a temporary file the way every atomic write does (locked), then waits to be killed.
WRITING_CODE = """
import sys, time
from pathlib import Path
from graftbench.util.durable import locked_temp
fd, path = locked_temp(Path(sys.argv[1]))
print("HELD", flush=True)
time.sleep(600)
"""


@dataclass
class DamagedIndex:
    """What :func:`damage_and_reindex` saw: the errors opening the store and a graft eval raised, the rows
    before and after the rebuild, and the rebuild's skipped files."""

    open_error: StoreError | None
    eval_error: StoreError | None
    rows_before: list[dict]
    rows_after: list[dict]
    skipped: list[tuple[str, str]]


def damage_and_reindex(session, store_root: Path, runs: Path, problems,
                       damage: bytes = b"\x00garbage" * 512) -> DamagedIndex:
    """Overwrite the store's index with ``damage``; open the store and run a graft eval on it (both must raise a
    :class:`StoreError` that names the index and advises ``store reindex``); then rebuild the index from the files
    and read the rows again."""
    rows_before = Store(store_root).rows()
    Store(store_root).index_path.write_bytes(damage)
    open_error = eval_error = None
    try:
        Store(store_root).ids()
    except StoreError as exc:
        open_error = exc
    try:
        run_eval(session, problems, SOURCE, "damaged-index", EvalSettings(max_new_tokens=4, graft=True),
                 runs_root=runs, store_root=store_root)
    except StoreError as exc:
        eval_error = exc
    report, _ = reindex_store(store_root)
    return DamagedIndex(open_error, eval_error, rows_before, Store(store_root).rows(), report.skipped)


def swap_files(store: Store, first: str, second: str) -> None:
    """Swap the contents of two artifact files on disk (each keeps the other's bytes under its own name)."""
    a, b = store.path(first), store.path(second)
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)


@dataclass
class ConcurrentResume:
    """What :func:`resume_while_another_runs` saw: the refusal of the second resume, the holder's pid and exit
    status, the samples file when it was killed and after this process resumed, and the problems resumed here."""

    error: RunError | None
    holder_pid: int
    exit_code: int
    at_kill: bytes
    after: bytes
    resumed: list[str]
    run: RunDir


def resume_while_another_runs(session, problems_path: Path, runs: Path, name: str,
                              max_new_tokens: int = 4) -> ConcurrentResume:
    """A solve process runs the set at ``problems_path`` into ``runs/name``; as soon as it holds the run, this
    process tries to resume the same run (it must be refused, naming that process). Then the solve process is
    SIGKILLed (if still running) and this process resumes the run to the end."""
    problems = load_problems(str(problems_path))
    run = RunDir(runs, name)
    proc = start_python(SOLVE_CODE, [*session_args(session), problems_path, runs, name, max_new_tokens])
    wait_for_line(proc, "READY")
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and _owner_pid(run) != proc.pid:
        time.sleep(0.002)
    error = None
    try:
        run_eval(session, problems, SOURCE, name, EvalSettings(max_new_tokens=max_new_tokens), runs_root=runs)
    except RunError as exc:
        error = exc
    code = sigkill(proc)
    at_kill = run.samples_path.read_bytes() if run.samples_path.exists() else b""
    resumed: list[str] = []
    run_eval(session, problems, SOURCE, name, EvalSettings(max_new_tokens=max_new_tokens), runs_root=runs,
             on_sample=lambda sample: resumed.append(sample.problem_id))
    return ConcurrentResume(error, proc.pid, code, at_kill, run.samples_path.read_bytes(), resumed, run)


def _owner_pid(run: RunDir) -> int | None:
    try:
        return json.loads(run.owner_path.read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


@dataclass
class Cleanup:
    """What :func:`clean_after_a_killed_write` saw: the killed deposit's exit status, the temporary files before
    cleaning, those removed by opening the store, and those left (the live writer's)."""

    exit_code: int
    before: list[str]
    removed: list[str]
    left: list[str]


def clean_after_a_killed_write(store_root: Path, data: bytes, payloads: Path) -> Cleanup:
    """Kill a deposit of ``data`` before its rename (it leaves a temporary file) while another process is in the
    middle of writing one; then open the store for writing, which cleans: only the killed writer's file goes."""
    killed = put_in_subprocess(store_root, write_payloads(payloads, [data]), fault="deposit-before-rename").wait(300)
    live = start_python(WRITING_CODE, [artifacts_dir(store_root)])  # (opening a Store here would clean already)
    try:
        wait_for_line(live, "HELD")
        before = Store(store_root, readonly=True).temporaries()
        removed = [path.name for path in Store(store_root).cleaned]
        left = Store(store_root, readonly=True).temporaries()
    finally:
        sigkill(live)
    clean_temporaries(artifacts_dir(store_root))  # the live writer is gone now: its file goes too
    return Cleanup(killed, before, removed, left)

# --------------------------------------------------------------------------------------------- scored for the runner


def _damaged_index(bench) -> tuple[bool, str]:
    problems = bench.fresh_problems(1)
    seen = damage_and_reindex(bench.session, bench.main, bench.runs, problems)
    advice = f"graftbench store reindex --store {bench.main}"
    named = [e is not None and str(Store(bench.main).index_path) in str(e) and advice in str(e)
             for e in (seen.open_error, seen.eval_error)]
    same = seen.rows_after == seen.rows_before
    detail = (f"open and eval --graft: StoreError naming the index and `store reindex`: {all(named)}; reindexed "
              f"{len(seen.rows_after)} rows, equal to before: {same}; skipped: {len(seen.skipped)}")
    return all(named) and same and not seen.skipped, detail


def _swapped(bench) -> tuple[bool, str]:
    problems = bench.fresh_problems(2)
    ids = [bench.lab.deposit(problem) for problem in problems]
    swap_files(bench.lab.store, *ids)
    samples = bench.eval(problems, f"swapped-{problems[0].id}", max_new_tokens=4, graft=True,
                         store_root=bench.lab.store.root).samples
    refused = [s.mode == "baseline" and s.artifact_id is None and s.fallback is not None
               and s.fallback.split(":")[0] in ("hash", "size") and artifact_id[:16] in s.fallback
               for s, artifact_id in zip(samples, ids)]
    return all(refused), f"both refused, baseline recorded: {all(refused)}; " + \
        "; ".join((s.fallback or "grafted")[:44] for s in samples)


def _concurrent_resume(bench) -> tuple[bool, str]:
    problems = bench.fresh_problems(5)
    seen = resume_while_another_runs(bench.session, bench.problems_file(problems), bench.runs,
                                     f"resume-{problems[0].id}")
    named = seen.error is not None and f"in use by pid {seen.holder_pid} " in str(seen.error)
    after = [json.loads(line)["problem_id"] for line in lines_of(seen.after)]
    kept = seen.after.startswith(seen.at_kill[: seen.at_kill.rfind(b"\n") + 1])
    once = after == [p.id for p in problems]
    detail = (f"second resume refused naming the holder: {named}; holder exit {seen.exit_code}; "
              f"{len(lines_of(seen.at_kill))} lines at the kill, each problem once after: {once}")
    return named and once and kept and seen.exit_code in (0, -signal.SIGKILL), detail


def _cleanup(bench) -> tuple[bool, str]:
    (problem,) = bench.fresh_problems(1)
    seen = clean_after_a_killed_write(bench.main, bench.lab.build(problem)[0], bench.root / "payloads")
    ok = (seen.exit_code == -signal.SIGKILL and len(seen.before) == 2 and len(seen.removed) == 1
          and len(seen.left) == 1 and seen.left[0] not in seen.removed)
    return ok, (f"deposit killed before its rename (exit {seen.exit_code}); {len(seen.before)} temporary files, "
                f"{len(seen.removed)} removed on opening the store, the live writer's kept: {len(seen.left) == 1}")


FAULTS: tuple[tuple[str, Callable[[object], tuple[bool, str]]], ...] = (
    ("index overwritten with garbage, then store reindex", _damaged_index),
    ("two artifact files swapped on disk", _swapped),
    ("two processes resume the same run", _concurrent_resume),
    ("temporary files: a killed writer's and a live one's", _cleanup),
)
