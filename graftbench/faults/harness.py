"""The fault harness: processes to kill and a disk to fill.

* Subprocesses: the code they run (:data:`PUT_CODE`, :data:`DEPOSIT_CODE`, :data:`SOLVE_CODE`, :data:`HUB_CODE`),
  :func:`start_python` (with ``GRAFTBENCH_FAULT`` set, so that :func:`graftbench.util.durable.crash_point` kills the
  writer at a named point), :func:`put_in_subprocess`, :func:`wait_for_line`, :func:`sigkill`,
  :func:`kill_when_lines`, :func:`complete_lines`, :func:`lines_of`.
* A full disk: :func:`disk_full` (``os.write`` refuses with ``ENOSPC`` under a folder) and :func:`index_full`
  (every store's SQLite inserts fail as on a full disk).
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..store.ids import artifact_id_of
from ..store.folder import Store

# The folder that holds this graftbench package: subprocesses start there, so that ``python -c`` imports this very
# code (a checkout's, or an installed one's) whatever the caller's working folder.
IMPORT_ROOT = Path(__file__).resolve().parents[2]

PUT_CODE = """
import sys
from graftbench.store.folder import Store
store = Store(sys.argv[1])
for _ in range(int(sys.argv[2])):
    for path in sys.argv[3:]:
        with open(path, "rb") as data:
            store.put(data.read())
print("DONE", flush=True)
"""

SESSION_CODE = """
import sys
from graftbench.engine.registry import DEFAULT_ENGINE, fault_ops
session = fault_ops(DEFAULT_ENGINE).open_for_faults(sys.argv[1], dtype=sys.argv[2], chunk_size=int(sys.argv[3]))
print("READY", flush=True)
"""

DEPOSIT_CODE = SESSION_CODE + """
from graftbench.eval.deposit import deposit_items, items_from_problems
from graftbench.problems.loading import load_problems
from graftbench.store.folder import Store
deposit_items(session, Store(sys.argv[5]), items_from_problems(load_problems(sys.argv[4])))
print("DONE", flush=True)
"""

SOLVE_CODE = SESSION_CODE + """
from graftbench.settings import EvalSettings
from graftbench.eval.eval_run import run_eval
from graftbench.problems.loading import load_problems
run_eval(session, load_problems(sys.argv[4]), "faults", sys.argv[6], EvalSettings(max_new_tokens=int(sys.argv[7])),
         runs_root=sys.argv[5])
print("DONE", flush=True)
"""

# Prints the error that loading an unreachable hub id raises (run offline).
HUB_CODE = """
from graftbench.problems.loading import load_problems
from graftbench.problems.types import ProblemSetError
try:
    load_problems("graftbench-no-such-owner/no-such-problem-set")
except ProblemSetError as exc:
    print(exc)
"""

# --------------------------------------------------------------------------------------------- subprocesses


def write_payloads(folder: Path, artifacts: list[bytes]) -> list[Path]:
    """Write artifact bytes to files (named by their id's first 16 digits) for a depositing subprocess."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for data in artifacts:
        path = folder / artifact_id_of(data)[:16]
        path.write_bytes(data)
        paths.append(path)
    return paths


def start_python(code: str, args: list, fault: str | None = None) -> subprocess.Popen:
    """Start ``python -c code args`` with ``GRAFTBENCH_FAULT`` set to ``fault`` (or unset)."""
    env = {k: v for k, v in os.environ.items() if k != "GRAFTBENCH_FAULT"}
    if fault:
        env["GRAFTBENCH_FAULT"] = fault
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env, cwd=IMPORT_ROOT)


def put_in_subprocess(store_root: Path, paths: list[Path], fault: str | None = None, rounds: int = 1) -> subprocess.Popen:
    """Start a process that puts the artifacts at ``paths`` into the store, ``rounds`` times over."""
    return start_python(PUT_CODE, [store_root, rounds, *paths], fault)


def session_args(session) -> list:
    """The arguments that make a subprocess open the same pinned session."""
    return [session.config.model, session.config.dtype, session.config.chunk_size]


def wait_for_line(proc: subprocess.Popen, word: str, timeout: float = 300) -> bool:
    """Read the process's output until a line equal to ``word``; False if it ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return False
        if line.strip() == word:
            return True
    return False


def sigkill(proc: subprocess.Popen) -> int:
    """SIGKILL the process (if still running) and reap it; returns its exit status."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    return proc.wait(60)


def lines_of(data: bytes) -> list[bytes]:
    """The newline-terminated lines of ``data`` (a torn last line left out), without their newlines."""
    return data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]


def complete_lines(path: Path) -> list[bytes]:
    """The newline-terminated lines of a samples file (none when it does not exist)."""
    return lines_of(path.read_bytes() if path.exists() else b"")


def kill_when_lines(proc: subprocess.Popen, path: Path, lines: int, timeout: float = 300) -> None:
    """SIGKILL ``proc`` as soon as ``path`` holds ``lines`` complete lines (or when it ends on its own)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if len(complete_lines(path)) >= lines:
            break
        time.sleep(0.01)
    sigkill(proc)

# --------------------------------------------------------------------------------------------- full disk


class DiskFull:
    """An ``os.write`` that behaves as if only ``free`` bytes were left for files under ``folder``: writes there
    are cut short at that budget, then fail with ``ENOSPC``; every other write goes through."""

    def __init__(self, folder: Path, free: int = 0):
        self.folder, self.free, self.real = str(Path(folder).resolve()), free, os.write
        self.refused = 0

    def __call__(self, fd: int, data) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if not target.startswith(self.folder):
            return self.real(fd, data)
        if self.free <= 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = self.real(fd, bytes(data[: self.free]))
        self.free -= written
        return written


@contextmanager
def disk_full(folder: Path, free: int = 0) -> Iterator[DiskFull]:
    """Within the block, writes under ``folder`` find a disk with ``free`` bytes left (see :class:`DiskFull`)."""
    fake = DiskFull(folder, free)
    real, os.write = os.write, fake
    try:
        yield fake
    finally:
        os.write = real


class FullIndex:
    """A SQLite connection whose inserts fail as on a full disk; ``before_failure`` (if given) runs just before
    each failing insert raises (to race another writer against the failure)."""

    def __init__(self, connection: sqlite3.Connection, before_failure: Callable[[], None] | None = None):
        self.connection = connection
        self.before_failure = before_failure

    def execute(self, sql: str, *args):
        if sql.lstrip().upper().startswith("INSERT"):
            if self.before_failure is not None:
                self.before_failure()
            raise sqlite3.OperationalError("database or disk is full")
        return self.connection.execute(sql, *args)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.connection.__exit__(*exc)

    def close(self) -> None:
        self.connection.close()


@contextmanager
def index_full() -> Iterator[None]:
    """Within the block, every store's index inserts fail with SQLite's ``database or disk is full``."""
    real = Store._connect
    Store._connect = lambda self: FullIndex(real(self))
    try:
        yield
    finally:
        Store._connect = real

