"""The instruction-set pin: which CPU kernels torch's math libraries may use, set before torch is imported.

torch's CPU math picks code by instruction set in three places, and each has a documented cap:

- ATen's own kernels dispatch on ``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``, ``avx512``), read once at
  the first dispatch (PyTorch docs, "CPU capability");
- MKL's BLAS honours ``MKL_ENABLE_INSTRUCTIONS`` and its conditional numerical reproducibility mode
  ``MKL_CBWR`` (Intel oneMKL developer guide, "Getting Started with Conditional Numerical Reproducibility": with
  ``AVX2`` and a fixed thread count, results are the same on every *Intel* CPU with AVX2; on non-Intel CPUs the
  setting "may cause results to differ because the AUTO branch is used instead");
- oneDNN honours ``ONEDNN_MAX_CPU_ISA`` (oneDNN docs, "CPU Dispatcher Control"); torch calls it for bfloat16
  matrix products only on CPUs with AVX-512, so the portable pin also turns torch's oneDNN use off
  (``torch.backends.mkldnn.enabled = False``) and bfloat16 products take ATen's own kernels on every CPU.

``native`` leaves all of them alone (fastest, numbers tied to this CPU's instruction set). ``avx2`` caps every
library at AVX2, first meant as the portable pin: the same bytes on an AVX-512 machine and on an AVX2 machine. Measured,
it is not portable across CPU vendors: expectations recorded under it on an AMD EPYC gave other bytes on an Intel
Xeon (float32 and bfloat16, ``manifests/replays.jsonl``), so an expectation is trusted only on the kind of CPU
(:func:`same_cpu_kind`) it was recorded or replayed on. ``portable`` is the candidate across vendors: ATen at AVX2,
MKL's ``COMPATIBLE`` branch (SSE2, no approximate reciprocals) with its dynamic threading off, oneDNN capped and
unused; it is proven portable only by a logged replay on a CPU of the other vendor (docs/portable-pin.md).
The library variables are read when the libraries load, so the pin is applied through the environment before
torch is imported (:func:`apply`); a process that already imported torch under another pin is refused.

This module imports no torch: ``verify-manifest`` and the manifest's environment read it on any machine.
"""

from __future__ import annotations

import os
import sys

from .cpuid import cpuinfo_field, emulation_fields, read_cpuinfo

ENV_VAR = "GRAFTBENCH_ISA"
ISAS = ("native", "avx2", "portable")
CAPS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "MKL_CBWR": "AVX2,STRICT",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
    # The candidate across vendors: MKL's COMPATIBLE branch is one SSE2 code path without the approximate reciprocal
    # instructions (rcpps, rsqrtps), the only branch besides AUTO that oneMKL supports on non-Intel CPUs (oneMKL
    # developer guide, "Specifying Code Branches"); MKL_DYNAMIC=FALSE keeps MKL at the pin's thread count.
    "portable": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE",
        "MKL_DYNAMIC": "FALSE",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
}
CAP_VARIABLES = tuple(sorted({name for caps in CAPS.values() for name in caps}))
# The CPU flags each pin needs (Linux /proc/cpuinfo names); AVX2 kernels are compiled with FMA.
REQUIRED_FLAGS = {"native": (), "avx2": ("avx2", "fma"), "portable": ("avx2", "fma")}
# Flags beyond the native capability that the math libraries dispatch on (bfloat16 and float16 arithmetic, VNNI dot
# products, AMX tiles). Not part of the pin: they tell apart two CPUs of one capability, which may still compute
# other bytes under one pin (an AMD EPYC and an Intel Xeon with AMX did, float32 included: manifests/replays.jsonl).
KERNEL_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni")


class IsaError(RuntimeError):
    """An instruction-set pin that cannot be applied: unknown name, a CPU without the instructions, or a
    process that imported torch under another pin. The message names the pin and what to do."""


def check_name(isa: str) -> str:
    """Return ``isa`` if it is a known pin; raises :class:`IsaError` otherwise."""
    if isa not in ISAS:
        raise IsaError(f"unknown instruction-set pin {isa!r}: choose one of {', '.join(ISAS)}")
    return isa


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU feature flags of the first processor in ``/proc/cpuinfo`` (empty where it cannot be read)."""
    return set(cpuinfo_field("flags", cpuinfo).split())


def native_capability(flags: set[str] | None = None) -> str:
    """The instruction set this CPU offers, in torch's names: ``AVX512`` (AVX-512 F/BW/VL/DQ, what ATen's
    AVX512 kernels need), ``AVX2`` (AVX2 and FMA), else ``DEFAULT``. Read from the CPU, not from torch, which
    reports the capped capability once a pin is applied."""
    flags = cpu_flags() if flags is None else flags
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "AVX512"
    if {"avx2", "fma"} <= flags:
        return "AVX2"
    return "DEFAULT"


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``""`` where it cannot be read)."""
    return cpuinfo_field("model name", cpuinfo)


def supported(isa: str, flags: set[str] | None = None) -> bool:
    """Whether this CPU can run the pin ``isa``."""
    flags = cpu_flags() if flags is None else flags
    return set(REQUIRED_FLAGS[check_name(isa)]) <= flags


def current() -> str:
    """The pin this process's environment carries: the one whose cap variables all hold their values (and no
    other cap variable is set), ``native`` when none is set. Raises :class:`IsaError` for a mix."""
    for isa in ISAS:
        caps = CAPS[isa]
        if all(os.environ.get(name) == value for name, value in caps.items()) and not any(
                name in os.environ for name in CAP_VARIABLES if name not in caps):
            return isa
    set_vars = {name: os.environ[name] for name in CAP_VARIABLES if name in os.environ}
    raise IsaError(f"the environment sets {set_vars}, which is neither pin ({', '.join(ISAS)}): unset them or "
                   f"choose a pin with --isa / {ENV_VAR}")


def apply(isa: str) -> None:
    """Put the pin ``isa`` into this process's environment, before torch is imported.

    Raises :class:`IsaError` for an unknown pin, a CPU without the pin's instructions, or a process that already
    imported torch under another pin (start a fresh process, e.g. with ``GRAFTBENCH_ISA`` set).
    """
    check_name(isa)
    if "torch" in sys.modules:
        if current() != isa:
            raise IsaError(f"torch is already imported in this process under --isa {current()}; the pin {isa!r} "
                           f"must be set before torch is imported: run it in a fresh process ({ENV_VAR}={isa})")
        return
    if not supported(isa):
        raise IsaError(f"--isa {isa} needs CPU flags {', '.join(REQUIRED_FLAGS[isa])}; this CPU "
                       f"({cpu_model() or 'unknown'}) offers {native_capability()}")
    for name in CAP_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(CAPS[isa])
    os.environ[ENV_VAR] = isa


def kernel_flags(flags: set[str] | None = None) -> list[str]:
    """The :data:`KERNEL_FLAGS` this CPU has, sorted."""
    flags = cpu_flags() if flags is None else flags
    return sorted(set(KERNEL_FLAGS) & flags)


def environment() -> dict:
    """What the manifest's environment records about the CPU: model name, native capability and
    :func:`kernel_flags` (none of them pinned: under ``--isa avx2`` two CPUs of different native capability share
    one pin), all read from /proc/cpuinfo; and, from :func:`graftbench.util.cpuid.emulation_fields`, ``emulated``
    only where the CPU this process sees is not that one (a user-mode emulator) or ``emulation_unchecked`` (why)
    only where that could not be checked."""
    cpuinfo = read_cpuinfo()  # read once for every field below
    flags = cpu_flags(cpuinfo)
    return {"cpu_model": cpu_model(cpuinfo), "cpu_capability_native": native_capability(flags),
            "cpu_kernel_flags": kernel_flags(flags), **emulation_fields(cpuinfo)}


# What a recorded CPU environment (environment()) says about the kind of CPU, and of those the marks of a CPU that
# no replay proves anything about (an emulated one, or one whose emulation could not be checked)
UNPROVEN_FIELDS = ("emulated", "emulation_unchecked")
KIND_FIELDS = ("cpu_model", "cpu_capability_native", "cpu_kernel_flags", *UNPROVEN_FIELDS)
_KIND_KEYS = tuple(field for field in KIND_FIELDS if field != "cpu_kernel_flags")  # compared as they are


def same_cpu_kind(a: dict, b: dict) -> bool:
    """Whether two recorded CPU environments (:func:`environment`) name one kind of CPU: the same model name and
    native capability, and the same kernel flags where both record them (records older than the flags match on
    the first two). An emulated CPU (``emulated``) is a kind only with the same emulation on the same host; a CPU
    whose emulation could not be checked (``emulation_unchecked``) only with one unchecked for the same reason.
    Expectations are known to reproduce only on a kind they were recorded or replayed on."""
    if not a.get("cpu_model") or [a.get(field) for field in _KIND_KEYS] != [b.get(field) for field in _KIND_KEYS]:
        return False
    return "cpu_kernel_flags" not in a or "cpu_kernel_flags" not in b or a["cpu_kernel_flags"] == b["cpu_kernel_flags"]


def describe_cpu(env: dict) -> str:
    """``model (capability; flags)`` for messages, from a recorded CPU environment; ``?`` for what is missing. An
    environment that names a GPU (``gpu``, a replay record's) reads ``gpu, on a host with model (...)``; an emulated
    CPU's (``emulated``) ``seen, emulated on a host with model (...)``; one not checked for emulation
    (``emulation_unchecked``) ends ``, emulation not checked: why``."""
    flags = env.get("cpu_kernel_flags")
    extra = "" if flags is None else "; " + (" ".join(flags) or "no kernel flags")
    cpu = f"{env.get('cpu_model') or '?'} ({env.get('cpu_capability_native') or '?'}{extra})"
    if env.get("emulated"):
        cpu = f"{env['emulated'].get('seen', '?')}, emulated on a host with {cpu}"
    if env.get("emulation_unchecked"):
        cpu = f"{cpu}, emulation not checked: {env['emulation_unchecked']}"
    return f"{env['gpu']}, on a host with {cpu}" if env.get("gpu") else cpu
