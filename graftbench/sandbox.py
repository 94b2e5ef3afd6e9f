"""Run a model-written Python program in a sandbox, never in graftbench's process.

The program runs in a fresh interpreter (``python -I -B``: no environment variables read, no user site, no
bytecode written; the venv's site-packages, so sympy imports) with an empty environment, in its own folder, under
limits (:class:`graftbench.settings.SandboxLimits`). The containment is built from util-linux tools, never by
hand: ``unshare`` (new PID, network, mount, IPC and UTS namespaces), ``mount`` (a minimal root on a tmpfs:
read-only binds of ``/usr``, ``/etc`` and the Python installation, four device nodes, the namespace's own
``/proc``, and two private size-capped tmpfs, the program's folder ``/sandbox`` and ``/tmp``), ``chroot``,
``prlimit`` (CPU seconds, address space, file size, processes, open files, no core files) and ``setpriv`` (the
``nobody`` user and group, no supplementary groups, no capabilities, no new privileges). A root shell stays the
namespace's process 1 while the program runs: when it exits (the program ended, or graftbench killed it), the
kernel kills every process left in the namespace, so a fork bomb or a daemonized child cannot outlive its run.
``unshare --kill-child`` and a parent-death signal on ``unshare`` tie the sandbox to graftbench's own life.

What the kernel and the caller allow is probed once per process (:func:`isolation`): the full sandbox as root; as
another user, the same inside a user namespace (the program then runs as that user mapped to root, without
capabilities); where neither works, a plain subprocess with the same limits, empty environment and a temporary
folder, *not* contained. The level reached is never silent: each :class:`ProgramResult` carries its
``isolation`` description, recorded with every program-mode sample.

A failing program (timeout, memory, too much output, a refused operation, a crash) is a result, never an
exception: :func:`run_program` raises only when graftbench cannot start a sandbox at all (:class:`SandboxError`).
Imports no torch.
"""

from __future__ import annotations

import errno
import functools
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from .hashing import sha256_text
from .sandbox_levels import LEVELS, PROGRAM_NAME, READY, Level, tools
from .settings import SandboxLimits

STOPPED = ("timeout", "memory", "output", "crashed", "forbidden")  # the reasons a program did not finish normally
STDERR_TAIL_CHARS = 2000  # characters of stderr's end kept in a result
DEFAULT_LIMITS = SandboxLimits()
PROBE_LIMITS = SandboxLimits(cpu_s=30, wall_s=60.0)

# Errors that mean "the sandbox refused this": permissions, a read-only file system, no network, the process,
# file-size or disk limits. An uncaught exception of the program's main process whose errno is one of these (or
# whose class is PermissionError or socket.gaierror) is reported as ``forbidden``.
FORBIDDEN_ERRNOS = frozenset({errno.EPERM, errno.EACCES, errno.EROFS, errno.ENETUNREACH, errno.EHOSTUNREACH,
                              errno.EADDRNOTAVAIL, errno.ECONNREFUSED, errno.EAGAIN, errno.EFBIG, errno.ENOSPC,
                              errno.EMFILE})
FORBIDDEN_CLASSES = ("PermissionError", "gaierror", "herror")


class SandboxError(RuntimeError):
    """graftbench could not start a sandbox at all (no interpreter, a setup step failed); never raised for what
    the program itself does."""


@dataclass(frozen=True)
class ProgramResult:
    """What one program run gave.

    ``exit_status``: the program's exit code as a shell reports it (a program killed by signal N shows 128 + N),
    or ``-9`` when graftbench killed the sandbox (wall time or output). ``stdout``: at most
    ``SandboxLimits.output_bytes`` bytes of it, decoded as UTF-8 (undecodable bytes replaced); ``stdout_sha256``:
    SHA-256 of that text's UTF-8 bytes. ``stderr_tail``: the last :data:`STDERR_TAIL_CHARS` characters of stderr.
    ``run_s``: wall seconds from the sandbox's start to its end (setup included). ``stopped``: ``None`` when the
    program exited 0 on its own, else one of :data:`STOPPED`. ``answer``: the last non-empty line it printed
    (stripped) when ``stopped`` is ``None``, else ``None``. ``isolation``: how it was contained
    (:attr:`Isolation.description`).
    """

    exit_status: int
    stdout: str
    stdout_sha256: str
    stderr_tail: str
    run_s: float
    stopped: str | None
    answer: str | None
    isolation: str


def answer_line(stdout: str) -> str | None:
    """The last non-empty line of ``stdout``, stripped, or ``None`` when every line is blank."""
    for line in reversed(stdout.splitlines()):
        if line.strip():
            return line.strip()
    return None


@dataclass(frozen=True)
class Isolation:
    """The containment a process can build: ``level`` (one of :data:`LEVELS`), a human ``description`` of what is
    and is not contained (recorded with every result), and ``reason`` why a stronger level was not reached."""

    level: str
    description: str
    reason: str = ""


@dataclass
class _Streams:
    stdout: bytearray
    stderr_tail: bytearray
    stderr_bytes: int
    report: bytearray
    ready: bool  # the setup said READY: stderr from here on is the program's
    setup: bytearray  # stderr before READY (the setup's own messages)

    def stderr(self, data: bytes) -> None:
        if not self.ready:
            self.setup += data
            marker = self.setup.find(READY.encode() + b"\n")
            if marker < 0:
                del self.setup[:-65536]
                return
            self.ready, data = True, bytes(self.setup[marker + len(READY) + 1:])
            del self.setup[marker:]
        self.stderr_bytes += len(data)
        self.stderr_tail = (self.stderr_tail + data)[-4 * STDERR_TAIL_CHARS:]


def _pump(proc: subprocess.Popen, report_r: int, limits: SandboxLimits, deadline: float,
          ready: bool) -> tuple[_Streams, str]:
    """Read stdout, stderr and the report pipe until all close, the wall deadline passes (``timeout``) or a stream
    goes over ``output_bytes`` (``output``). Returns the streams and why reading stopped (``""``: they closed)."""
    streams = _Streams(bytearray(), bytearray(), 0, bytearray(), ready, bytearray())
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, "stdout")
    selector.register(proc.stderr, selectors.EVENT_READ, "stderr")
    selector.register(report_r, selectors.EVENT_READ, "report")
    try:
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return streams, "timeout"
            for key, _ in selector.select(timeout=min(left, 0.5)):
                fd = key.fd if isinstance(key.fileobj, int) else key.fileobj.fileno()
                data = os.read(fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                if key.data == "stdout":
                    streams.stdout += data
                    if len(streams.stdout) > limits.output_bytes:
                        del streams.stdout[limits.output_bytes:]
                        return streams, "output"
                elif key.data == "stderr":
                    streams.stderr(data)
                    if streams.stderr_bytes > limits.output_bytes:
                        return streams, "output"
                else:
                    streams.report = (streams.report + data)[-4096:]
        return streams, ""
    finally:
        selector.close()


def _wait(proc: subprocess.Popen, deadline: float | None) -> tuple[int | None, float]:
    """``os.wait4`` the sandbox's first process: (its shell-style exit status, CPU seconds of its reaped tree),
    or ``(None, 0)`` if it is still running at ``deadline``."""
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG if deadline is not None else 0)
        if pid:
            code = os.waitstatus_to_exitcode(status)
            proc.returncode = code
            return (128 - code if code < 0 else code), usage.ru_utime + usage.ru_stime
        if deadline is not None and time.monotonic() >= deadline:
            return None, 0.0
        time.sleep(0.01)


def _classify(status: int, report: str, cpu_s: float, limits: SandboxLimits) -> str | None:
    """Why a program that graftbench did not kill ended as it did (``None``: exit 0)."""
    if status == 0:
        return None
    if status == 128 + signal.SIGXCPU or (status == 128 + signal.SIGKILL and cpu_s >= limits.cpu_s):
        return "timeout"
    line = next((ln for ln in reversed(report.splitlines()) if ln.startswith("exception ")), "")
    if line:
        _, names, err = (line.split(" ") + ["", ""])[:3]
        classes = names.split(",")
        if "MemoryError" in classes:
            return "memory"
        if any(c in FORBIDDEN_CLASSES for c in classes) or (err.lstrip("-").isdigit() and int(err) in FORBIDDEN_ERRNOS):
            return "forbidden"
        return "crashed"
    if status == 128 + signal.SIGKILL:
        return "memory"  # killed by the kernel, not by graftbench and not for CPU time: the out-of-memory killer
    return "crashed"


@functools.cache
def _probe(level: str) -> str:
    """Run a tiny program at ``level`` (under :data:`PROBE_LIMITS`, whatever a run's limits: a slow machine must
    not pass for a weaker kernel): ``""`` when it runs as expected, else why not."""
    if level != "none":
        if tools() is None:
            return "a util-linux or coreutils tool is missing (unshare, mount, chroot, prlimit, setpriv, env, sh)"
        if level == "namespaces" and os.geteuid() != 0:
            return "not root: the sandbox's user cannot be changed without a user namespace"
    sandbox = Level(level, PROBE_LIMITS)
    expect = str(sandbox.uid) if level == "namespaces" else None
    try:
        result = _run(sandbox, "import os, sympy\nprint(os.getuid())\n")
    except SandboxError as exc:
        return str(exc)
    if result.stopped is not None or (expect is not None and result.answer != expect):
        return (f"probe program stopped={result.stopped} exit={result.exit_status} printed {result.answer!r}: "
                f"{result.stderr_tail[-300:].strip()}")
    return ""


def isolation(prefer: str = "namespaces") -> Isolation:
    """The strongest containment this process can build, starting at ``prefer`` (one of :data:`LEVELS`): each
    level is probed once (a tiny program that imports sympy and prints its user id) and cached; a level that fails
    is skipped with its reason kept in :attr:`Isolation.reason`. Raises ``ValueError`` for an unknown level and
    :class:`SandboxError` when no level works."""
    if prefer not in LEVELS:
        raise ValueError(f"isolation level {prefer!r} is not one of {', '.join(LEVELS)}")
    reasons = []
    for level in LEVELS[LEVELS.index(prefer):]:
        why = _probe(level)
        if not why:
            return Isolation(level, Level(level, PROBE_LIMITS).description, "; ".join(reasons))
        reasons.append(f"{level}: {why}")
    raise SandboxError("no sandbox level works: " + "; ".join(reasons))


def run_program(source: str, limits: SandboxLimits = DEFAULT_LIMITS, level: str | None = None) -> ProgramResult:
    """Run ``source`` (Python) in the sandbox under ``limits`` and return its :class:`ProgramResult`.

    ``level`` forces a containment level (one of :data:`LEVELS`, e.g. for tests); by default the strongest that
    :func:`isolation` finds. A program that loops, allocates, prints or writes too much, is refused an operation
    or crashes gives a result whose ``stopped`` says so; it never raises. Raises :class:`SandboxError` only when
    no sandbox can be started, and ``ValueError`` for an unknown level.
    """
    chosen = isolation().level if level is None else level
    if chosen not in LEVELS:
        raise ValueError(f"isolation level {chosen!r} is not one of {', '.join(LEVELS)}")
    return _run(Level(chosen, limits), source)


def _run(sandbox: Level, source: str) -> ProgramResult:
    limits = sandbox.limits
    folder = tempfile.mkdtemp(prefix="graftbench-sandbox-")
    report_r, report_w = os.pipe()
    started = time.monotonic()
    deadline = started + limits.wall_s
    proc = None
    data = source.encode("utf-8", errors="replace")
    try:
        if sandbox.level == "none":
            with open(os.path.join(folder, PROGRAM_NAME), "wb") as handle:
                handle.write(data)
            data = b""
        try:
            proc = sandbox.start(folder, report_w)
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox ({sandbox.level}): {exc}") from exc
        finally:
            os.close(report_w)
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        streams, cut = _pump(proc, report_r, limits, deadline, ready=sandbox.level == "none")
        status, cpu_s = (None, 0.0) if cut else _wait(proc, deadline)
        if status is None:  # still running: over a limit, or past the wall time with its streams closed
            cut = cut or "timeout"
            sandbox.kill(proc)
            status, cpu_s = _wait(proc, time.monotonic() + 5)
        if status is None:  # the namespace's init did not go: kill the whole group, then wait for good
            os.killpg(proc.pid, signal.SIGKILL)
            status, cpu_s = _wait(proc, None)
        run_s = time.monotonic() - started
    finally:
        os.close(report_r)
        if proc is not None:
            for stream in (proc.stdout, proc.stderr):
                stream.close()
        shutil.rmtree(folder, ignore_errors=True)
    report = streams.report.decode("utf-8", errors="replace")
    if not streams.ready:
        late = f" within the wall time of {limits.wall_s:g} s" if cut == "timeout" else ""
        raise SandboxError(f"the sandbox ({sandbox.level}) could not be set up{late} (exit {status}): "
                           + streams.setup.decode("utf-8", errors="replace")[-500:].strip())
    stopped = cut or _classify(status, report, cpu_s, limits)
    stdout = streams.stdout.decode("utf-8", errors="replace")
    stderr = streams.stderr_tail.decode("utf-8", errors="replace")[-STDERR_TAIL_CHARS:]
    return ProgramResult(exit_status=-9 if cut else status, stdout=stdout, stdout_sha256=sha256_text(stdout),
                         stderr_tail=stderr, run_s=round(run_s, 6), stopped=stopped,
                         answer=answer_line(stdout) if stopped is None else None, isolation=sandbox.description)
