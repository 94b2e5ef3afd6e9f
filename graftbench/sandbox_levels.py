"""How each containment level of :mod:`graftbench.sandbox` starts a program and kills what it started.

``namespaces`` (as root): ``unshare`` into new PID, network, mount, IPC and UTS namespaces, where a root shell (the
namespace's process 1) builds a minimal root on a tmpfs with ``mount`` (read-only binds of ``/usr``, ``/etc`` and
the Python installation, four device nodes, its own ``/proc``, private size-capped tmpfs for the program's folder
and ``/tmp``), remounts it read-only, and runs ``chroot`` → ``prlimit`` → ``setpriv`` (``nobody``, no groups, no
capabilities, no new privileges) → ``env -i`` → ``python -I -B``. ``user-namespace`` (another user): the same in a
user namespace, without the change of user. ``none``: a plain subprocess with rlimits, not contained.

Only util-linux and coreutils tools build the containment; the shell script here only strings them together.
Imports no torch.
"""

from __future__ import annotations

import ctypes
import grp
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys

from .settings import SandboxLimits

PROGRAM_NAME = "main.py"
FOLDER = "/sandbox"  # the program's folder inside the sandbox (its working directory)
NOBODY = 65534  # the user and group when the system names none
LEVELS = ("namespaces", "user-namespace", "none")
READY = "graftbench-sandbox-ready"  # the setup's last line on stderr: what follows is the program's

# Runs inside the sandbox as `python -I -B -c BOOTSTRAP <report fd> <folder>`: moves into the program's folder,
# runs main.py as __main__, and for an uncaught exception of the main process (not of a forked child) writes its
# class names and errno to the report pipe before Python prints the traceback and exits 1.
BOOTSTRAP = f"""\
import os, sys
_fd, _folder = int(sys.argv[1]), sys.argv[2]
_main = os.getpid()
os.chdir(_folder)
sys.argv = [{PROGRAM_NAME!r}]
try:
    with open({PROGRAM_NAME!r}, encoding="utf-8") as _f:
        _code = compile(_f.read(), {PROGRAM_NAME!r}, "exec")
    exec(_code, {{"__name__": "__main__", "__file__": {PROGRAM_NAME!r}, "__builtins__": __builtins__}})
except SystemExit:
    raise
except BaseException as _exc:
    if os.getpid() == _main:
        try:
            _names = ",".join(c.__name__ for c in type(_exc).__mro__)
            os.write(_fd, ("exception %s %s\\n" % (_names, getattr(_exc, "errno", None))).encode())
        except BaseException:
            pass
    raise
"""


def ids() -> tuple[int, int]:
    try:
        uid = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        uid = NOBODY
    for name in ("nogroup", "nobody"):
        try:
            return uid, grp.getgrnam(name).gr_gid
        except KeyError:
            continue
    return uid, NOBODY


def tools() -> dict[str, str] | None:
    found = {name: shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
             for name in ("unshare", "mount", "chroot", "prlimit", "setpriv", "env", "sh")}
    return found if all(found.values()) else None


def python_dirs() -> list[str]:
    """The folders the interpreter needs besides the system's: its prefixes (the venv, the base installation), as
    real paths, leaving out those below a folder already bound."""
    paths = set()
    for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                 os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))):
        paths.add(os.path.realpath(path))
    chosen: list[str] = []
    for path in sorted(paths, key=len):
        if any(path == c or path.startswith(c.rstrip("/") + "/") for c in ["/usr", "/etc", *chosen]):
            continue
        chosen.append(path)
    return chosen


def describe(level: str, uid: int, gid: int, python_dirs: list[str]) -> str:
    """What ``level`` contains, in one line (the limits are recorded apart, with the run's settings)."""
    if level == "none":
        who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
        return (f"none: NOT contained: a plain subprocess as {who} with the host's network, file system and process "
                f"table (it may read and write wherever {who} may); rlimits, empty environment and a temporary "
                f"working folder only" + ("; the processes limit does not bind root" if os.geteuid() == 0 else ""))
    root = (f"read-only root of /usr, /etc, {', '.join(python_dirs)}, 4 device nodes and its own /proc; private "
            f"tmpfs {FOLDER} and /tmp; rlimits; empty environment")
    if level == "namespaces":
        return (f"namespaces: pid, net (no interface up), mount, ipc, uts; {root}; user {uid}:{gid}, no "
                f"supplementary groups, capabilities or new privileges")
    return (f"user-namespace: pid, net (no interface up), mount, ipc, uts in a user namespace; {root}; "
            f"uid {os.geteuid()} mapped to root, no capabilities or new privileges")


def setup_script(level: str, tools: dict[str, str], limits: SandboxLimits, uid: int, gid: int,
            python_dirs: list[str]) -> str:
    """The shell script that is process 1 of the namespaces: it builds the root, reads the program from stdin,
    writes :data:`READY` on stderr, and runs the program (not exec: it stays, as root, the namespace's init)."""
    q = shlex.quote
    privileged = level == "namespaces"
    lines = ['set -eu', 'R=$1; FD=$2',
             'mount -t tmpfs -o size=1m,mode=755,nosuid,nodev graftbench-root "$R"']
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = "/" + name
        if os.path.islink(top):
            lines.append(f'ln -s {q(os.readlink(top))} "$R"/{name}')
        elif os.path.isdir(top) and not os.path.realpath(top).startswith("/usr/"):
            python_dirs = [top, *python_dirs]
    for path in ["/usr", "/etc", *python_dirs]:
        lines.append(f'mkdir -p "$R"{q(path)} && mount --bind -o ro,nosuid,nodev {q(path)} "$R"{q(path)}')
    lines += ['mkdir "$R/dev"',
              'for n in null zero random urandom; do : > "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done',
              'ln -s /proc/self/fd "$R/dev/fd"',
              'mkdir "$R/proc" && { mount -t proc -o nosuid,nodev,noexec proc "$R/proc" || true; }',
              f'mkdir "$R/tmp" "$R"{FOLDER}',
              f'mount -t tmpfs -o size={limits.disk_bytes},mode=1777,nosuid,nodev,noexec graftbench-tmp "$R/tmp"']
    owner = f",uid={uid},gid={gid}" if privileged else ""
    lines += [(f'mount -t tmpfs -o size={limits.disk_bytes},mode=700{owner},nosuid,nodev,noexec graftbench-work '
               f'"$R"{FOLDER}'),
              f'cat > "$R"{FOLDER}/{PROGRAM_NAME}']
    if privileged:
        lines.append(f'chown {uid}:{gid} "$R"{FOLDER}/{PROGRAM_NAME}')
    lines += ['mount -o remount,ro,nosuid,nodev "$R"', 'cd /', f'echo {READY} >&2', 'set +e']
    cpu = limits.cpu_s
    prlimit = (f'{q(tools["prlimit"])} --cpu={cpu}:{cpu + 1} --as={limits.memory_bytes} --fsize={limits.file_bytes} '
               f'--nproc={limits.processes} --nofile={limits.open_files} --core=0 --')
    drop = f"--reuid={uid} --regid={gid} --clear-groups " if privileged else ""
    setpriv = f'{q(tools["setpriv"])} {drop}--inh-caps=-all --bounding-set=-all --no-new-privs --'
    python = f'{q(tools["env"])} -i {q(sys.executable)} -I -B -c {q(BOOTSTRAP)} "$FD" {FOLDER}'
    lines.append(f'{q(tools["chroot"])} "$R" {prlimit} {setpriv} {python} </dev/null')
    return "\n".join(lines) + "\n"


def unshare_args(level: str, tools: dict[str, str]) -> list[str]:
    """``unshare`` with its namespaces, under ``setpriv --pdeathsig KILL`` so that it dies with graftbench (and
    ``--kill-child`` takes the namespace's process 1 with it)."""
    user = ["--user", "--map-root-user"] if level == "user-namespace" else []
    return [tools["setpriv"], "--pdeathsig", "KILL", "--", tools["unshare"], *user, "--pid", "--net", "--mount",
            "--ipc", "--uts", "--fork", "--kill-child"]


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here, so the child after fork only calls prctl


def plain_limits(limits: SandboxLimits):
    """The ``none`` level's preparation of the child (between fork and exec): a parent-death signal and the
    rlimits (``prlimit`` and ``setpriv`` may be missing on that level)."""
    import resource

    def apply() -> None:
        try:
            _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except AttributeError:
            pass
        for kind, value in ((resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1)),
                            (resource.RLIMIT_AS, (limits.memory_bytes,) * 2),
                            (resource.RLIMIT_FSIZE, (limits.file_bytes,) * 2),
                            (resource.RLIMIT_NPROC, (limits.processes,) * 2),
                            (resource.RLIMIT_NOFILE, (limits.open_files,) * 2),
                            (resource.RLIMIT_CORE, (0, 0))):
            try:
                resource.setrlimit(kind, value)
            except (ValueError, OSError):
                pass
    return apply


class Level:
    """One level's way of starting a program, and of killing what it started."""

    def __init__(self, level: str, limits: SandboxLimits):
        self.level, self.limits = level, limits
        self.tools = tools()
        self.uid, self.gid = ids()
        self.python_dirs = python_dirs()
        self.description = describe(level, self.uid, self.gid, self.python_dirs)

    def start(self, folder: str, report_fd: int) -> subprocess.Popen:
        common = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "env": {},
                  "pass_fds": (report_fd,), "start_new_session": True}
        if self.level == "none":
            return subprocess.Popen([sys.executable, "-I", "-B", "-c", BOOTSTRAP, str(report_fd), folder],
                                    cwd=folder, preexec_fn=plain_limits(self.limits), **common)
        script = setup_script(self.level, self.tools, self.limits, self.uid, self.gid, self.python_dirs)
        return subprocess.Popen([*unshare_args(self.level, self.tools), self.tools["sh"], "-c", script, "sandbox",
                                 folder, str(report_fd)], cwd="/", **common)

    def kill(self, proc: subprocess.Popen) -> None:
        """Kill the namespace's process 1 (the kernel then kills everything in the namespace; ``unshare`` reaps
        it and exits), or the process group where there is no namespace yet or at all."""
        children = children_of(proc.pid) if self.level != "none" else []
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not children:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(p) for p in handle.read().split()]
    except (OSError, ValueError):
        return []
