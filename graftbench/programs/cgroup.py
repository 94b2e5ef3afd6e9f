"""A control group per program run (:mod:`graftbench.programs.sandbox`): memory, processes and CPU bounded per run, not
per user, and the counters graftbench reads to say why a run stopped.

The machine must mount the cgroup v1 ``memory``, ``pids``, ``cpu`` and ``cpuacct`` hierarchies, writable by
graftbench (root). Each run gets one cgroup in each, below graftbench's own cgroup, created before the run and removed
after it: ``memory.limit_in_bytes`` and (where swap accounting exists) ``memory.memsw.limit_in_bytes`` cap every
page of the run (anonymous memory, memfd and tmpfs pages) at ``memory_bytes``; ``pids.max`` caps its processes and
threads; ``cpu.cfs_quota_us`` gives it one CPU at most; ``cpuacct.usage`` counts its CPU time. A cgroup v2-only
machine is refused (:class:`CgroupError`) with what is missing. Imports no torch.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass

from ..settings import SandboxLimits

ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
GROUP = "graftbench-sandbox"  # the folder below graftbench's own cgroup holding one cgroup per run
CPU_PERIOD_US = 100_000
CPU_QUOTA_US = 100_000  # one CPU per run
MONITOR_PROCESSES = 1  # bubblewrap's monitor process, in the run's cgroup besides the program's processes
_serial = itertools.count()


class CgroupError(RuntimeError):
    """The machine gives no per-run cgroup: the message names what is missing and how to get it."""


def _own_path(controller: str, proc_cgroup: str = "/proc/self/cgroup") -> str:
    """This process's cgroup path in the v1 hierarchy of ``controller`` (``"/"`` when listed at the root)."""
    with open(proc_cgroup, encoding="ascii") as handle:
        for line in handle:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(","):
                return path
    return "/"


def parents(root: str = ROOT) -> dict[str, str]:
    """The folder each run's cgroup is made in, by controller (created if needed). Raises :class:`CgroupError`
    naming the hierarchy that is not mounted or not writable."""
    if not os.path.isdir(os.path.join(root, "memory")) and os.path.isfile(os.path.join(root, "cgroup.controllers")):
        raise CgroupError(f"only cgroup v2 is mounted at {root}: a cgroup per run needs the v1 memory, pids, cpu "
                          f"and cpuacct hierarchies (e.g. boot with systemd.unified_cgroup_hierarchy=0)")
    found = {}
    for controller in CONTROLLERS:
        mount = os.path.join(root, controller)
        if not os.path.isfile(os.path.join(mount, "cgroup.procs")):
            raise CgroupError(f"the cgroup v1 {controller!r} hierarchy is not mounted at {mount} (a cgroup per run "
                              f"needs the v1 memory, pids, cpu and cpuacct hierarchies mounted, writable by root)")
        base = os.path.join(mount, _own_path(controller).lstrip("/"))
        if not os.path.isdir(base):
            base = mount  # this process's cgroup is not visible (another namespace's view): use the mount's root
        parent = os.path.join(base, GROUP)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create a cgroup in {base} ({exc.strerror}): program mode must run as root "
                              f"on a machine whose cgroup v1 hierarchies are writable") from exc
        found[controller] = parent
    _remove_stale(found)
    return found


def _remove_stale(found: dict[str, str]) -> None:
    """Remove the empty run cgroups left by a graftbench process that is gone (killed before its clean-up)."""
    for parent in found.values():
        for name in os.listdir(parent):
            pid = name.split("-")[1] if name.startswith("run-") and name.count("-") >= 2 else ""
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                try:
                    os.rmdir(os.path.join(parent, name))
                except OSError:
                    pass


def _write(path: str, value: object) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(f"{value}\n")


def _read_counter(path: str, key: str | None = None) -> int:
    """An integer counter file, or the value of ``key`` in a ``key value`` file; 0 when absent."""
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read()
    except OSError:
        return 0
    if key is None:
        return int(text.split()[0]) if text.split() else 0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


@dataclass(frozen=True)
class Counters:
    """What a run's cgroup counted: ``cpu_s`` CPU seconds of all its processes; ``oom_kills`` processes the
    kernel killed at the memory cap; ``memory_failures`` charges refused at the cap; ``pids_refused`` forks and
    thread starts refused at the process cap."""

    cpu_s: float
    oom_kills: int
    memory_failures: int
    pids_refused: int


class RunCgroup:
    """One run's cgroups (one per controller), created with the run's limits; :meth:`remove` kills what is left
    in them and removes them. Raises :class:`CgroupError` when they cannot be made."""

    def __init__(self, limits: SandboxLimits, found: dict[str, str]):
        name = f"run-{os.getpid()}-{next(_serial)}-{time.monotonic_ns()}"
        self.paths = {controller: os.path.join(parent, name) for controller, parent in found.items()}
        try:
            for path in self.paths.values():
                os.mkdir(path)
            memory = self.paths["memory"]
            _write(os.path.join(memory, "memory.limit_in_bytes"), limits.memory_bytes)
            if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):
                _write(os.path.join(memory, "memory.memsw.limit_in_bytes"), limits.memory_bytes)
            _write(os.path.join(self.paths["pids"], "pids.max"), limits.processes + MONITOR_PROCESSES)
            _write(os.path.join(self.paths["cpu"], "cpu.cfs_period_us"), CPU_PERIOD_US)
            _write(os.path.join(self.paths["cpu"], "cpu.cfs_quota_us"), CPU_QUOTA_US)
        except OSError as exc:
            self.remove()
            raise CgroupError(f"cannot set up a run's cgroup ({exc})") from exc

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to, to join every cgroup of the run."""
        return [os.path.join(path, "cgroup.procs") for path in self.paths.values()]

    def counters(self) -> Counters:
        memory, pids = self.paths["memory"], self.paths["pids"]
        return Counters(cpu_s=_read_counter(os.path.join(self.paths["cpuacct"], "cpuacct.usage")) / 1e9,
                        oom_kills=_read_counter(os.path.join(memory, "memory.oom_control"), "oom_kill"),
                        memory_failures=max(_read_counter(os.path.join(memory, "memory.failcnt")),
                                            _read_counter(os.path.join(memory, "memory.memsw.failcnt"))),
                        pids_refused=_read_counter(os.path.join(pids, "pids.events"), "max"))

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.paths["pids"], "cgroup.procs"), encoding="ascii") as handle:
                return [int(p) for p in handle.read().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL every process of the run."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def remove(self, wait_s: float = 5.0) -> None:
        """Kill what is left and remove the cgroups (waiting up to ``wait_s`` seconds for them to empty)."""
        deadline = time.monotonic() + wait_s
        for path in self.paths.values():
            while os.path.isdir(path):
                try:
                    os.rmdir(path)
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    self.kill()
                    time.sleep(0.01)
