"""The sandbox's configuration, in one place: the bubblewrap command that contains a program, the seccomp filter it
loads, and the tools and libraries the machine must provide (:func:`missing`).

bubblewrap (``bwrap``, run as root) makes new PID, network, IPC, UTS, mount and cgroup namespaces, a new session
(no terminal to inject into), a root holding only read-only binds of the program environment
(:mod:`graftbench.programs.environment`: the interpreter, its standard library, the offered packages, a reduced
``/etc``, the system library folders they load from) and of the two tools below, with its own ``/proc``, a minimal
``/dev`` and two private size-capped tmpfs (the program's folder and ``/tmp``), remounts that root read-only, dies
with graftbench, and loads the seccomp filter before the program starts. Inside, ``prlimit`` sets per-process
rlimits and ``setpriv`` drops to the ``nobody`` user (a real unprivileged user: no user namespace, so never root
mapped) with no groups, no capabilities and no new privileges. The filter (built with ``pyseccomp`` on libseccomp)
refuses the kernel keyrings, io_uring, Linux AIO, perf events, bpf, ptrace and cross-process memory access, every
mount and namespace call, and every socket family but ``AF_UNIX``. Imports no torch.
"""

from __future__ import annotations

import errno
import os
import shutil

from .environment import Environment, ids
from ..settings import SandboxLimits

PROGRAM_NAME = "main.py"
FOLDER = "/sandbox"  # the program's folder inside the sandbox (its working directory)
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = {"bwrap": "bubblewrap (`apt-get install bubblewrap`, or `make install` as root)",
                "prlimit": "util-linux (`apt-get install util-linux`)",
                "setpriv": "util-linux (`apt-get install util-linux`)"}

# Refused with EPERM: the kernel keyrings (shared by user and session, not by namespace), io_uring (a second
# system-call interface), Linux AIO (its contexts come from one machine-wide budget, fs.aio-max-nr, that a single
# io_setup can take whole), perf events, bpf, ptrace and cross-process memory access, the mount and namespace
# calls, and kernel-wide administration.
REFUSED = ("keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",
           "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
           "perf_event_open", "bpf", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "userfaultfd",
           "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
           "fspick", "mount_setattr", "unshare", "setns", "name_to_handle_at", "open_by_handle_at",
           "fanotify_init", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
           "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "iopl", "ioperm", "modify_ldt", "uselib")
NAMESPACE_FLAGS = (0x10000000, 0x00020000, 0x04000000, 0x08000000, 0x20000000, 0x40000000, 0x02000000, 0x00000080)
# CLONE_NEWUSER, NEWNS, NEWUTS, NEWIPC, NEWPID, NEWNET, NEWCGROUP, NEWTIME: a clone asking for any is refused;
# clone3 (whose flags the filter cannot read) answers ENOSYS, so the C library falls back to clone.
AF_UNIX = 1

# Runs inside the sandbox as `python -I -B -c BOOTSTRAP <ready fd>`: tells graftbench the sandbox is built (one
# byte on the ready pipe, then closes it), then runs main.py as __main__.
BOOTSTRAP = f"""\
import os, sys
os.write(int(sys.argv[1]), b"1")
os.close(int(sys.argv[1]))
sys.argv = [{PROGRAM_NAME!r}]
with open({PROGRAM_NAME!r}, encoding="utf-8") as _f:
    _code = compile(_f.read(), {PROGRAM_NAME!r}, "exec")
del _f
exec(_code, {{"__name__": "__main__", "__file__": {PROGRAM_NAME!r}, "__builtins__": __builtins__}})
"""


def tools() -> dict[str, str | None]:
    """Where ``bwrap``, ``prlimit`` and ``setpriv`` are (``None`` when missing)."""
    return {name: shutil.which(name, path=SYSTEM_PATH) for name in INSTALL_HINT}


def missing() -> str:
    """What the machine lacks to build the sandbox, in one line naming how to get it; ``""`` when nothing."""
    for name, path in tools().items():
        if path is None:
            return f"{name} is not installed: install {INSTALL_HINT[name]}"
        if name != "bwrap" and not os.path.realpath(path).startswith("/usr/"):
            return f"{name} at {path} is not under /usr, so not visible inside the sandbox"
    if os.geteuid() != 0:
        return ("program mode must run as root: it makes a cgroup per run and starts each program as the unprivileged "
                "nobody user")
    try:
        seccomp_filter()
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        return f"the seccomp filter cannot be built ({exc}): install libseccomp (`apt-get install libseccomp2`)"
    return ""


def seccomp_filter() -> bytes:
    """The seccomp BPF program bwrap loads, built for each run (about 0.3 ms). Raises ``ImportError``/``OSError``
    when libseccomp is missing."""
    import tempfile

    import pyseccomp as seccomp

    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in REFUSED:
        rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
    for flag in NAMESPACE_FLAGS:
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for name in ("socket", "socketpair"):
        rules.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), name, seccomp.Arg(0, seccomp.NE, AF_UNIX))
    with tempfile.TemporaryFile() as handle:
        rules.export_bpf(handle)
        handle.seek(0)
        return handle.read()


def syscall_number(name: str) -> int:
    """The number of system call ``name`` on this machine's architecture (libseccomp's table)."""
    import pyseccomp as seccomp

    return seccomp.resolve_syscall(seccomp.system_arch(), name)


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/a", "/a/b"]``."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]


def _top_level() -> list[str]:
    """``/lib``, ``/lib64``... as symbolic links again where the host has them so (a merged ``/usr``): the loader
    and libraries are named by those paths."""
    args = []
    for name in ("lib", "lib32", "lib64", "libx32"):
        top = "/" + name
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
    return args


def command(limits: SandboxLimits, environment: Environment, seccomp_fd: int, program_fd: int,
            ready_fd: int) -> list[str]:
    """The bwrap command running the program read from ``program_fd`` under ``limits`` in ``environment``;
    ``seccomp_fd`` holds :func:`seccomp_filter`, ``ready_fd`` is the ready pipe's write end."""
    found = tools()
    uid, gid = ids()
    binds = []
    made = set()
    for source, destination in [*environment.binds(), *((os.path.realpath(found[name]),) * 2
                                                        for name in ("prlimit", "setpriv"))]:
        for parent in _ancestors(destination):
            if parent not in made:  # traversable by the program's user (bwrap would make them 0700)
                made.add(parent)
                binds += ["--perms", "0755", "--dir", parent]
        binds += ["--ro-bind", source, destination]
    cpu = limits.cpu_s
    # /dev/pts: an empty read-only tmpfs over bwrap's devpts, so no pseudo-terminal can be opened. Every devpts
    # instance but the host's own draws on one machine-wide budget (kernel.pty.max less kernel.pty.reserve: 3,072 by
    # default), and one run's processes could otherwise hold about processes x open_files of it (some 2,000).
    return [found["bwrap"], "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
            "--new-session", "--die-with-parent", "--as-pid-1", "--clearenv",
            *binds, *_top_level(), "--proc", "/proc", "--dev", "/dev", "--size", "4096", "--tmpfs", "/dev/pts",
            "--perms", "1777", "--size", str(limits.disk_bytes), "--tmpfs", "/tmp",
            "--perms", "1777", "--size", str(limits.disk_bytes), "--tmpfs", FOLDER,
            "--perms", "0444", "--file", str(program_fd), f"{FOLDER}/{PROGRAM_NAME}",
            "--remount-ro", "/", "--chdir", FOLDER,
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
            "--seccomp", str(seccomp_fd),
            os.path.realpath(found["prlimit"]), f"--cpu={cpu}:{cpu + 1}", f"--fsize={limits.file_bytes}",
            f"--nofile={limits.open_files}", "--core=0", "--",
            os.path.realpath(found["setpriv"]), f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
            environment.python, "-I", "-B", "-c", BOOTSTRAP, str(ready_fd)]


def describe(environment: Environment) -> str:
    """What the sandbox contains and what a program can see, in one line (recorded with every program-mode
    sample)."""
    uid, gid = ids()
    return ("bwrap: pid, net (no interface), ipc, uts, mount and cgroup namespaces, new session; read-only root "
            f"holding only the {environment.describe()}; the tools prlimit and setpriv; own /proc and /dev; "
            f"private tmpfs {FOLDER} and /tmp; seccomp (no keyrings, io_uring, perf, bpf, ptrace, mounts, "
            f"namespaces; AF_UNIX sockets only); user {uid}:{gid}, no groups, capabilities or new privileges; empty "
            "environment; a cgroup per run (memory incl. memfd and tmpfs, processes, one CPU)")
