"""Which CPU this process sees, asked of the CPU (the CPUID instruction) rather than of the kernel (/proc/cpuinfo).

The two agree on a machine and in an ordinary virtual machine. They disagree under a user-mode emulator
(``qemu-x86_64 -cpu Haswell``): the process runs on the emulated CPU, CPUID answers with the emulated vendor, brand
and features, while /proc/cpuinfo still describes the host. A replay run there exercises the code paths a library
picks by CPUID (MKL's dispatch by vendor) on the emulator's arithmetic, not any CPU's silicon, so :func:`emulation`
is recorded beside the CPU's environment and such a replay never counts as a replay on a CPU
(docs/portable-pin.md, "An emulated Intel CPU").

CPUID is executed in this process (a child started with exec would run natively, outside the emulator) through
a 27-byte x86-64 System V function that saves ``rbx``, which CPUID overwrites and the calling convention keeps
(py-cpuinfo's in-process code does not, and its own docs run it in a child process for that reason). The page is
written, then made read-and-execute (never writable and executable at once). The check fails open: where the
page cannot be made executable, or the kernel describes no x86 CPU to compare with, :func:`emulation_fields` says the
check was not made (``emulation_unchecked``, a kind of its own) rather than claiming a real CPU; an emulator that
copies the host's vendor, brand and features is not noticed.

This module also holds the one reader of ``/proc/cpuinfo`` (:func:`read_cpuinfo`, :func:`cpuinfo_field`), which
:mod:`graftbench.util.isa` uses for the CPU's model and flags.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
from pathlib import Path

X86_64 = ("x86_64", "AMD64")
# void cpuid(uint32_t leaf /* edi */, uint32_t subleaf /* esi */, uint32_t out[4] /* rdx */)
CPUID_FUNCTION = bytes([
    0x53,                    # push rbx           (callee-saved; cpuid writes ebx)
    0x49, 0x89, 0xD0,        # mov r8, rdx        (the out pointer; cpuid writes edx)
    0x89, 0xF8,              # mov eax, edi
    0x89, 0xF1,              # mov ecx, esi
    0x0F, 0xA2,              # cpuid
    0x41, 0x89, 0x00,        # mov [r8], eax
    0x41, 0x89, 0x58, 0x04,  # mov [r8 + 4], ebx
    0x41, 0x89, 0x48, 0x08,  # mov [r8 + 8], ecx
    0x41, 0x89, 0x50, 0x0C,  # mov [r8 + 12], edx
    0x5B,                    # pop rbx
    0xC3,                    # ret
])
# Features compared with the kernel's flags: (name in /proc/cpuinfo, CPUID leaf, register index eax=0..edx=3, bit)
# (Intel SDM vol. 2A, CPUID: leaf 1 ECX bits 12 FMA and 28 AVX; leaf 7 subleaf 0 EBX bits 5 AVX2 and 16 AVX512F).
FEATURES = (("fma", 1, 2, 12), ("avx", 1, 2, 28), ("avx2", 7, 1, 5), ("avx512f", 7, 1, 16))
UNNAMED_BRANDS = ("", "unknown")  # a kernel (or sandbox such as gVisor) that names no brand: nothing to compare


def _cpuid_registers(leaves: list[tuple[int, int]]) -> list[tuple[int, int, int, int]] | None:
    """``(eax, ebx, ecx, edx)`` for each ``(leaf, subleaf)``, or ``None`` where the function cannot be run."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                               ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = mmap.PAGESIZE
    address = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        return None
    try:
        ctypes.memmove(address, CPUID_FUNCTION, len(CPUID_FUNCTION))
        if libc.mprotect(address, size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            return None
        registers = ctypes.c_uint32 * 4
        function = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(registers))(address)
        answers = []
        for leaf, subleaf in leaves:
            out = registers()
            function(leaf, subleaf, out)
            answers.append(tuple(out))
        return answers
    finally:
        libc.munmap(address, size)


def _text(*words: int) -> str:
    return b"".join(word.to_bytes(4, "little") for word in words).split(b"\0", 1)[0].decode("ascii", "replace")


def cpuid_identity() -> dict | None:
    """``{"vendor": ..., "brand": ..., "features": [...]}`` as the CPUID instruction answers in this process: the
    vendor id (``GenuineIntel``, ``AuthenticAMD``), the brand string (up to its first NUL, ends stripped) and which of
    :data:`FEATURES` it reports. ``None`` on a machine that is not x86-64 or where the function cannot be run (no page
    can be made executable)."""
    if platform.machine() not in X86_64:
        return None
    # One call for every leaf: a leaf past the CPU's highest answers something harmless, ignored below.
    answers = _cpuid_registers([(0, 0), (0x80000000, 0), (1, 0), (7, 0), (0x80000002, 0), (0x80000003, 0),
                                (0x80000004, 0)])
    if answers is None:
        return None
    (max_leaf, ebx, ecx, edx), (max_extended, *_), leaf_1, leaf_7, *brand_leaves = answers
    by_leaf = {1: leaf_1, 7: leaf_7 if max_leaf >= 7 else (0, 0, 0, 0)}
    words = [word for answer in brand_leaves for word in answer] if max_extended >= 0x80000004 else []
    brand = _text(*words).strip()
    features = [name for name, leaf, register, bit in FEATURES if by_leaf[leaf][register] >> bit & 1]
    return {"vendor": _text(ebx, edx, ecx).strip(), "brand": brand, "features": features}


def read_cpuinfo() -> str:
    """The text of ``/proc/cpuinfo``, ``""`` where it cannot be read (not Linux, or a sandbox that hides it)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _cpuinfo_lines(cpuinfo: str):
    """``(name, value)`` of each ``name : value`` line, both stripped, in file order."""
    for line in cpuinfo.splitlines():
        name, colon, value = line.partition(":")
        if colon:
            yield name.strip(), value.strip()


def cpuinfo_field(name: str, cpuinfo: str | None = None) -> str:
    """The value of the first ``name : value`` line of ``cpuinfo`` (``/proc/cpuinfo`` by default): the first
    processor's; ``""`` where there is none."""
    cpuinfo = read_cpuinfo() if cpuinfo is None else cpuinfo
    return next((value for key, value in _cpuinfo_lines(cpuinfo) if key == name), "")


def kernel_identity(cpuinfo: str | None = None) -> dict:
    """What ``/proc/cpuinfo`` (or ``cpuinfo``) says: ``vendor`` (the first ``vendor_id``), ``brands`` (every distinct
    ``model name``, sorted: sockets may differ) and ``features`` (which of :data:`FEATURES` the first processor's
    ``flags`` list). Empty values where the file or the lines are missing."""
    cpuinfo = read_cpuinfo() if cpuinfo is None else cpuinfo
    brands = {value for key, value in _cpuinfo_lines(cpuinfo) if key == "model name"}
    flags = set(cpuinfo_field("flags", cpuinfo).split())
    return {"vendor": cpuinfo_field("vendor_id", cpuinfo), "brands": sorted(brands),
            "features": [name for name, *_ in FEATURES if name in flags]}


def _same_brand(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def emulation(seen: dict | None = None, host: dict | None = None) -> dict | None:
    """``{"seen": "<vendor> <brand>", "seen_features": [...], "host": "<vendor> <brand>"}`` when the CPU this process
    sees (``seen``, :func:`cpuid_identity` by default) is not the one the kernel describes (``host``,
    :func:`kernel_identity`): another vendor, a brand no processor of the kernel's carries (compared with runs of
    white space collapsed; not compared where the kernel names none), or a feature of :data:`FEATURES` the kernel
    lists that CPUID lacks (the kernel may hide a feature the CPU has, never the reverse). ``None`` when they agree,
    when CPUID cannot be asked, or when the kernel names no vendor (not an x86 /proc/cpuinfo)."""
    seen = cpuid_identity() if seen is None else seen
    host = kernel_identity() if host is None else host
    if seen is None or not host.get("vendor"):
        return None
    brands = [brand for brand in host.get("brands", []) if brand.strip().lower() not in UNNAMED_BRANDS]
    other = (seen["vendor"] != host["vendor"].strip()
             or bool(brands) and not any(_same_brand(seen["brand"], brand) for brand in brands)
             or bool(set(host.get("features", [])) - set(seen.get("features", []))))
    if not other:
        return None
    host_brand = (host.get("brands") or [""])[0]
    return {"seen": f"{seen['vendor']} {seen['brand']}", "seen_features": list(seen.get("features", [])),
            "host": f"{host['vendor']} {host_brand}"}


NO_CPUID = "CPUID could not be run in this process (no page could be made executable)"
NO_X86_KERNEL = "/proc/cpuinfo names no x86 vendor to compare CPUID's answer with"


def emulation_fields(cpuinfo: str | None = None, seen: dict | None = None) -> dict:
    """The CPU environment's fields about emulation (:func:`graftbench.util.isa.environment`), for ``cpuinfo``
    (``/proc/cpuinfo`` by default) and what CPUID answers (``seen``, :func:`cpuid_identity` by default):
    ``{"emulated": {...}}`` (:func:`emulation`) where this process sees another CPU than the kernel describes;
    ``{"emulation_unchecked": why}`` where an x86-64 process could not make the comparison (CPUID could not be run,
    :data:`NO_CPUID`; or the kernel describes no x86 CPU, :data:`NO_X86_KERNEL`, as for an x86 emulator on another
    architecture's host), so the environment never claims a real CPU it did not check; ``{}`` where both agree or
    the process is not x86-64 (no x86 pin runs there)."""
    if platform.machine() not in X86_64:
        return {}
    seen = cpuid_identity() if seen is None else seen
    if seen is None:
        return {"emulation_unchecked": NO_CPUID}
    host = kernel_identity(cpuinfo)
    if not host["vendor"]:
        return {"emulation_unchecked": NO_X86_KERNEL}
    found = emulation(seen, host)
    return {"emulated": found} if found else {}
