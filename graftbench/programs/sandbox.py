"""Run a model-written Python program in a sandbox, never in graftbench's process, and never anywhere else.

The program runs in a fresh interpreter (``python -I -B``: no environment variables read, no user site, no
bytecode written) of the program environment (:mod:`graftbench.programs.environment`: its standard library, sympy,
mpmath and numpy, and nothing of the installation graftbench runs in) with an empty environment, in its own folder,
inside bubblewrap with a seccomp filter (:mod:`graftbench.programs.bwrap`, the one file configuring the
containment) and in a cgroup of its own (:mod:`graftbench.programs.cgroup`: memory, processes and CPU per run), under
:class:`graftbench.settings.SandboxLimits`.

The sandbox fails closed: there is one containment and no weaker level. When the machine cannot build it (no
bubblewrap, not root, no cgroup hierarchy, no libseccomp, no program environment built for this installation or a
stale one), :func:`open_sandbox` raises :class:`SandboxError` with one line naming what is missing and how to get
it, before any program runs. It returns a :class:`Sandbox` value (the loaded program environment and the isolation):
a run opens one where it starts and passes it to what runs programs (:meth:`Sandbox.run`); nothing is kept between
calls in this module.

A failing program (timeout, memory, too much output, a refused fork, a crash, a text over the size limit) is a
result, never an exception. Why it stopped is derived only from what graftbench observes (its exit status, its own
wall clock, the output it read, the run's cgroup counters), never from what the program writes. Imports no torch.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from . import bwrap, cgroup, environment
from ..util.hashing import sha256_text
from ..settings import SandboxLimits

STOPPED = ("timeout", "memory", "output", "crashed", "forbidden")  # the reasons a program did not finish normally
STDERR_TAIL_CHARS = 2000  # characters of stderr's end kept in a result
DEFAULT_LIMITS = SandboxLimits()
PROBE_LIMITS = SandboxLimits(cpu_s=30, wall_s=60.0)
NOT_STARTED = -1  # the exit status of a program graftbench refused to start (its text is over ``file_bytes``)
KILLED = -9  # the exit status of a program graftbench killed (wall time, CPU time or output)


class SandboxError(RuntimeError):
    """graftbench cannot build the sandbox (a tool, a privilege or a kernel facility is missing, or its set-up
    failed); never raised for what the program itself does."""


@dataclass(frozen=True)
class ProgramResult:
    """What one program run gave.

    ``exit_status``: the program's exit code as a shell reports it (128 + N after signal N), :data:`KILLED` when
    graftbench killed it (wall or CPU time, output), :data:`NOT_STARTED` when its text was over the limit.
    ``stdout``: at most ``SandboxLimits.output_bytes`` bytes of it, decoded as UTF-8 (undecodable bytes replaced);
    ``stdout_sha256``: SHA-256 of that text's UTF-8 bytes. ``stderr_tail``: the last :data:`STDERR_TAIL_CHARS`
    characters of stderr. ``run_s``: wall seconds from the sandbox's start to its end (setup included).
    ``stopped``: ``None`` when the program exited 0, else one of :data:`STOPPED`. ``answer``: the last non-empty
    line it printed (stripped) when ``stopped`` is ``None``, else ``None``. ``isolation``: how it was contained.
    ``cpu_s``: CPU seconds of all the run's processes (its cgroup's count; 0 for a program not started): beside
    ``run_s``, it tells a program stopped at the wall time on a busy machine from one that used its CPU time.
    """

    exit_status: int
    stdout: str
    stdout_sha256: str
    stderr_tail: str
    run_s: float
    stopped: str | None
    answer: str | None
    isolation: str
    cpu_s: float = 0.0


def answer_line(stdout: str) -> str | None:
    """The last non-empty line of ``stdout``, stripped, or ``None`` when every line is blank (lines as
    :func:`answer_line_parts` cuts them)."""
    parts = answer_line_parts(stdout)
    return parts[1] if parts else None


def answer_line_parts(stdout: str) -> tuple[str, str, str] | None:
    """``stdout`` cut around the line :func:`answer_line` takes, for a reader to mark it: ``(before, line, after)``
    with ``line`` that line stripped and ``before + line + after == stdout``; ``None`` when every line is blank.
    Lines end where ``str.splitlines`` ends them (``\\n``, ``\\r``, ``\\x1c``, U+2028 and the others), so a
    program printing ``17\\x1c42`` is judged on ``42``, and the mark says so."""
    end = len(stdout)
    for line in reversed(stdout.splitlines(keepends=True)):
        start = end - len(line)
        stripped = line.strip()
        if stripped:
            first = start + len(line) - len(line.lstrip())
            return stdout[:first], stripped, stdout[first + len(stripped):]
        end = start
    return None


@dataclass(frozen=True)
class Isolation:
    """The containment programs run in: ``level`` (``"bwrap"``) and a human ``description`` (recorded with every
    result)."""

    level: str
    description: str


LEVEL = "bwrap"


def _cgroups() -> dict[str, str]:
    try:
        return cgroup.parents(cgroup.ROOT)
    except cgroup.CgroupError as exc:
        raise SandboxError(str(exc)) from exc


def _load_environment() -> environment.Environment:
    """This installation's built program environment. Raises :class:`SandboxError` when it is not built or stale."""
    try:
        return environment.load()
    except environment.ProgramEnvironmentError as exc:
        raise SandboxError(str(exc)) from exc


@dataclass(frozen=True)
class Sandbox:
    """The sandbox of one run, checked (:func:`open_sandbox`): the loaded program ``environment`` programs run in
    and the ``isolation`` recorded with every result. Made once where a run starts and passed to what runs
    programs; it holds no process and no open file."""

    environment: environment.Environment
    isolation: Isolation

    def run(self, source: str, limits: SandboxLimits = DEFAULT_LIMITS) -> ProgramResult:
        """Run ``source`` (Python) in the sandbox under ``limits`` and return its :class:`ProgramResult`.

        A program that loops, allocates, prints or writes too much, is refused an operation, crashes, or whose
        text is over ``limits.file_bytes`` gives a result whose ``stopped`` says so; it never raises for that.
        Raises :class:`SandboxError` when the sandbox cannot be set up for this run (a cgroup or bubblewrap that
        fails to start); nothing then runs."""
        return _run(source, limits, self.environment)


def open_sandbox() -> Sandbox:
    """Check the containment programs will run in (the tools, root, the cgroup hierarchies, libseccomp, the program
    environment, then a tiny program, under :data:`PROBE_LIMITS`, that imports its packages and prints its user
    id) and return it as a :class:`Sandbox`. Each call probes anew (about a second): open one per run and pass it
    down. Raises :class:`SandboxError`, naming what is missing and how to get it, when the sandbox cannot be
    built; no program of the caller's has run then."""
    why = _probe()
    if isinstance(why, str):
        raise SandboxError("program mode needs the sandbox, which cannot be built here: " + " ".join(why.split()))
    return why


def _probe() -> Sandbox | str:
    """The checked :class:`Sandbox`, or why it cannot be built, in one line."""
    lacking = bwrap.missing()
    if lacking:
        return lacking
    try:
        env = _load_environment()
        result = _run("import os, sympy, mpmath, numpy\nprint(os.getuid())\n", PROBE_LIMITS, env)
    except SandboxError as exc:
        return str(exc)
    if result.stopped is not None or result.answer != str(bwrap.ids()[0]):
        return (f"the sandbox's probe program stopped={result.stopped} exit={result.exit_status} printed "
                f"{result.answer!r}: {result.stderr_tail[-300:].strip()}")
    return Sandbox(env, Isolation(LEVEL, bwrap.describe(env)))


def _too_large(size: int, limits: SandboxLimits, env: environment.Environment) -> ProgramResult:
    note = f"graftbench: the program's text is {size} bytes, over the limit of {limits.file_bytes} bytes; not run"
    return ProgramResult(exit_status=NOT_STARTED, stdout="", stdout_sha256=sha256_text(""), stderr_tail=note,
                         run_s=0.0, stopped="forbidden", answer=None, isolation=bwrap.describe(env))


@dataclass
class _Streams:
    stdout: bytearray
    stderr_tail: bytearray
    stderr_bytes: int = 0
    ready: bool = False  # the interpreter in the sandbox started (the set-up is done)


def _pump(proc: subprocess.Popen, ready_r: int, limits: SandboxLimits, deadline: float,
          run_cgroup: cgroup.RunCgroup) -> tuple[_Streams, str]:
    """Read stdout, stderr and the ready pipe until they close, the wall deadline passes or the run's CPU time
    reaches ``cpu_s`` (``timeout``), or a stream goes over ``output_bytes`` (``output``). Returns the streams and
    why reading stopped (``""``: they closed)."""
    streams = _Streams(bytearray(), bytearray())
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, "stdout")
    selector.register(proc.stderr, selectors.EVENT_READ, "stderr")
    selector.register(ready_r, selectors.EVENT_READ, "ready")
    try:
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0 or run_cgroup.counters().cpu_s >= limits.cpu_s:
                return streams, "timeout"
            for key, _ in selector.select(timeout=min(left, 0.1)):
                fd = key.fd if isinstance(key.fileobj, int) else key.fileobj.fileno()
                data = os.read(fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                elif key.data == "stdout":
                    streams.stdout += data
                    if len(streams.stdout) > limits.output_bytes:
                        del streams.stdout[limits.output_bytes:]
                        return streams, "output"
                elif key.data == "stderr":
                    streams.stderr_bytes += len(data)
                    streams.stderr_tail = (streams.stderr_tail + data)[-4 * STDERR_TAIL_CHARS:]
                    if streams.stderr_bytes > limits.output_bytes:
                        return streams, "output"
                else:
                    streams.ready = True
        return streams, ""
    finally:
        selector.close()


def _wait(proc: subprocess.Popen, deadline: float | None) -> int | None:
    """Wait for bwrap: its shell-style exit status, or ``None`` if it is still running at ``deadline``."""
    try:
        code = proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None
    return 128 - code if code < 0 else code


def classify(status: int, counters: cgroup.Counters, limits: SandboxLimits) -> str | None:
    """Why a program that graftbench did not cut off ended as it did (``None``: exit 0), from its exit status and
    the run's cgroup counters only: a kill at the memory cap is ``memory``, CPU time at ``cpu_s`` ``timeout``, a
    charge refused at the memory cap ``memory``, a fork refused at the process cap ``forbidden``, anything else
    ``crashed``."""
    if status == 0:
        return None
    if counters.oom_kills:
        return "memory"
    if counters.cpu_s >= limits.cpu_s:
        return "timeout"
    if counters.memory_failures:
        return "memory"
    if counters.pids_refused:
        return "forbidden"
    return "crashed"


# Runs as root between graftbench and bwrap (``python -I -S -c LAUNCHER <keyctl number> <cgroup.procs>... --
# <bwrap command>``): joins every cgroup of the run and a new, empty session keyring (the program must not possess
# graftbench's), then becomes bwrap.
LAUNCHER = """\
import ctypes, os, sys
end = sys.argv.index("--")
for path in sys.argv[2:end]:
    with open(path, "w") as handle:
        handle.write(str(os.getpid()))
libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(int(sys.argv[1]), 1, None) < 0:  # KEYCTL_JOIN_SESSION_KEYRING, anonymous
    sys.exit("cannot join a new session keyring: " + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[end + 1], sys.argv[end + 1:])
"""


def _start(run_cgroup: cgroup.RunCgroup, limits: SandboxLimits, env: environment.Environment, data: bytes,
           ready_w: int) -> subprocess.Popen:
    """Start bwrap through :data:`LAUNCHER`, in the run's cgroup and a new session keyring."""
    seccomp_r, seccomp_w = os.pipe()
    program = tempfile.TemporaryFile(prefix="graftbench-program-")
    try:
        os.write(seccomp_w, bwrap.seccomp_filter())
        os.close(seccomp_w)
        program.write(data)
        program.flush()
        program.seek(0)
        command = bwrap.command(limits, env, seccomp_r, program.fileno(), ready_w)
        launcher = [sys.executable, "-I", "-S", "-c", LAUNCHER, str(bwrap.syscall_number("keyctl")),
                    *run_cgroup.procs_files(), "--"]
        return subprocess.Popen([*launcher, *command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={}, cwd="/",
                                pass_fds=(seccomp_r, program.fileno(), ready_w), start_new_session=True)
    except OSError as exc:
        raise SandboxError(f"cannot start the sandbox: {exc}") from exc
    finally:
        os.close(seccomp_r)
        program.close()


def _run(source: str, limits: SandboxLimits, env: environment.Environment) -> ProgramResult:
    data = source.encode("utf-8", errors="replace")
    if len(data) > limits.file_bytes:
        return _too_large(len(data), limits, env)
    try:
        run_cgroup = cgroup.RunCgroup(limits, _cgroups())
    except cgroup.CgroupError as exc:
        raise SandboxError(str(exc)) from exc
    ready_r, ready_w = os.pipe()
    started = time.monotonic()
    proc = None
    try:
        try:
            proc = _start(run_cgroup, limits, env, data, ready_w)
        finally:
            os.close(ready_w)
        streams, cut = _pump(proc, ready_r, limits, started + limits.wall_s, run_cgroup)
        status = None if cut else _wait(proc, started + limits.wall_s)
        if status is None:  # still running: over a limit, or past the wall time with its streams closed
            cut = cut or "timeout"
            proc.kill()  # bwrap's child, the sandbox's process 1, dies with it; the cgroup takes the rest
            run_cgroup.kill()
            status = _wait(proc, None)
        run_s = time.monotonic() - started
        counters = run_cgroup.counters()
    finally:
        os.close(ready_r)
        if proc is not None:
            for stream in (proc.stdout, proc.stderr):
                stream.close()
        run_cgroup.remove()
    stderr = streams.stderr_tail.decode("utf-8", errors="replace")[-STDERR_TAIL_CHARS:]
    if not streams.ready:
        late = f" within the wall time of {limits.wall_s:g} s" if cut == "timeout" else ""
        raise SandboxError(f"the sandbox could not be set up{late} (exit {status}): {stderr[-500:].strip()}")
    stopped = cut or classify(status, counters, limits)
    stdout = streams.stdout.decode("utf-8", errors="replace")
    return ProgramResult(exit_status=KILLED if cut else status, stdout=stdout, stdout_sha256=sha256_text(stdout),
                         stderr_tail=stderr, run_s=round(run_s, 6), stopped=stopped,
                         answer=answer_line(stdout) if stopped is None else None,
                         isolation=bwrap.describe(env), cpu_s=round(counters.cpu_s, 6))
