"""Which CPU this process sees, asked of the CPU (the CPUID instruction) rather than of the kernel (/proc/cpuinfo).

The two agree on a machine and in a virtual machine. They disagree under a user-mode emulator (``qemu-x86_64
-cpu Haswell``): the process runs on the emulated CPU, CPUID answers with the emulated vendor and brand, while
/proc/cpuinfo still describes the host. A replay run there exercises the code paths a library picks by CPUID
vendor (MKL's dispatch) on the emulator's arithmetic, not any CPU's silicon, so :func:`emulation` is recorded
beside the CPU's environment and such a replay never counts as a replay on a CPU (docs/portable-pin.md).

CPUID runs through py-cpuinfo's ``CPUID`` class (a few bytes of machine code in an executable page, called with
ctypes), in this process: its public ``get_cpu_info`` asks a child process, which an emulator does not run.
"""

from __future__ import annotations

import platform
from pathlib import Path

X86_64 = ("x86_64", "AMD64")


def cpuid_identity() -> dict[str, str] | None:
    """``{"vendor": ..., "brand": ...}`` as the CPUID instruction answers in this process (vendor id such as
    ``GenuineIntel``, the brand string with its padding stripped); ``None`` on a machine that is not x86-64 or where
    the instruction cannot be run (no executable page can be mapped)."""
    if platform.machine() not in X86_64:
        return None
    try:
        from cpuinfo.cpuinfo import CPUID

        cpuid = CPUID()
        return {"vendor": cpuid.get_vendor_id(), "brand": cpuid.get_processor_brand(cpuid.get_max_extension_support())}
    except Exception:  # noqa: BLE001 - py-cpuinfo raises whatever mmap, ctypes or the kernel raise
        return None


def kernel_identity(cpuinfo: str | None = None) -> dict[str, str]:
    """``{"vendor": ..., "brand": ...}`` from the first ``vendor_id`` and ``model name`` lines of ``/proc/cpuinfo``
    (or of ``cpuinfo``); empty values where the file or the line is missing."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields = {}
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    return {"vendor": fields.get("vendor_id", ""), "brand": fields.get("model name", "")}


def emulation(seen: dict[str, str] | None = None, host: dict[str, str] | None = None) -> dict[str, str] | None:
    """``{"seen": "<vendor> <brand>", "host": "<vendor> <brand>"}`` when the CPU this process sees (``seen``,
    :func:`cpuid_identity` by default) is not the one the kernel describes (``host``, :func:`kernel_identity`):
    an emulator. ``None`` when they agree (brands compared with runs of spaces collapsed, as the kernel prints
    them), when CPUID cannot be asked, or when the kernel names no vendor (not an x86 /proc/cpuinfo)."""
    seen = cpuid_identity() if seen is None else seen
    host = kernel_identity() if host is None else host
    if seen is None or not host.get("vendor"):
        return None
    same = seen["vendor"] == host["vendor"] and " ".join(seen["brand"].split()) == " ".join(host["brand"].split())
    return None if same else {"seen": f"{seen['vendor']} {seen['brand']}", "host": f"{host['vendor']} {host['brand']}"}
