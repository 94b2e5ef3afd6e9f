"""Which code branch MKL's BLAS runs under an instruction-set pin, as MKL itself reports it.

With ``MKL_VERBOSE=1`` oneMKL prints a header naming the processors its code path is for (``Intel(R) Advanced
Vector Extensions 2 (Intel(R) AVX2) enabled processors``, ``Intel(R) Architecture processors``) and, for each call,
the conditional numerical reproducibility branch it ran (``CNR:OFF``, ``CNR:AUTO,STRICT``, ``CNR:AVX2,STRICT``,
``CNR:COMPATIBLE``), whether its dynamic threading was on (``Dyn:0``) and its thread count (``NThr:1``) (oneMKL
developer reference, "Verbose Mode"). So whether a pin's MKL settings took effect is read, not assumed: a fresh
process applies the pin, runs one float32 matrix product through torch and reports what MKL printed
(:func:`probe`).

What each pin is meant to give (:func:`intended_branch`), from oneMKL's developer guide ("Specifying Code Branches"):
``native`` sets nothing (``OFF``); ``avx2`` asks for ``AVX2,STRICT``, which oneMKL honours on Intel CPUs only and
replaces with ``AUTO,STRICT`` on any other vendor's, so the branch, and with it the bytes, depend on the vendor (on
this project's AMD EPYC MKL reports ``AUTO,STRICT``; on an emulated Intel Haswell ``AVX2,STRICT``:
docs/portable-pin.md); ``portable`` asks for ``COMPATIBLE``, supported on every vendor's CPU.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

CALL_PATTERN = re.compile(r"MKL_VERBOSE SGEMM\(.*?\)\s+\S+\s+CNR:(\S+)\s+Dyn:(\d+)\b.*?NThr:(\d+)")
HEADER_PATTERN = re.compile(r"MKL_VERBOSE oneMKL .*? for Intel\(R\) 64 architecture (.*?), Lnx")
# One float32 matrix product through torch's MKL path, in a process whose pin is applied before torch loads
_PROGRAM = ("import sys\n"
            "from graftbench.util import isa\n"
            "isa.apply(sys.argv[1])\n"
            "import torch\n"
            "torch.set_num_threads(int(sys.argv[2]))\n"
            "a = torch.ones(64, 64)\n"
            "print(float((a @ a)[0, 0]), flush=True)\n")
PROBE_TIMEOUT_S = 600  # seconds: a torch import, or several minutes under an emulator


class MklProbeError(RuntimeError):
    """MKL reported no matrix product: the probe process failed, or this torch does not use MKL (not x86-64, or a
    build without MKL). The message holds the process's output."""


@dataclass(frozen=True)
class MklBranch:
    """What MKL reported for one float32 matrix product: ``branch`` (the CNR branch, e.g. ``COMPATIBLE``),
    ``dynamic`` (dynamic threading on), ``threads`` and ``code_path`` (the processors its header names)."""

    branch: str
    dynamic: bool
    threads: int
    code_path: str


def parse_verbose(text: str) -> MklBranch | None:
    """The first SGEMM line of MKL's verbose output ``text`` and its header, as an :class:`MklBranch`; ``None``
    where ``text`` holds no SGEMM line."""
    call = CALL_PATTERN.search(text)
    if call is None:
        return None
    header = HEADER_PATTERN.search(text)
    return MklBranch(branch=call.group(1), dynamic=call.group(2) != "0", threads=int(call.group(3)),
                     code_path=header.group(1) if header else "")


def probe(isa: str, threads: int = 1, prefix: list[str] | None = None) -> MklBranch:
    """What MKL reports in a fresh process under the pin ``isa`` at ``threads`` threads (``prefix``: a command the
    process runs under, e.g. an emulator, ``["qemu-x86_64", "-cpu", "Haswell"]``). Raises :class:`MklProbeError`
    when the process fails, runs past :data:`PROBE_TIMEOUT_S` seconds, or MKL reports no matrix product."""
    env = {k: v for k, v in os.environ.items() if k != "GRAFTBENCH_ISA"}
    env["MKL_VERBOSE"] = "1"
    try:
        done = subprocess.run([*(prefix or []), sys.executable, "-c", _PROGRAM, isa, str(threads)],
                              capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise MklProbeError(f"the MKL probe under --isa {isa} ran past {PROBE_TIMEOUT_S} s") from exc
    found = parse_verbose(done.stdout + done.stderr)
    if done.returncode != 0 or found is None:
        raise MklProbeError(f"MKL reported no matrix product under --isa {isa} (exit {done.returncode}): "
                            f"{(done.stdout + done.stderr)[-1500:]}")
    return found


def intended_branch(isa: str, vendor: str) -> str:
    """The CNR branch oneMKL documents for the pin ``isa`` on a CPU whose CPUID vendor id is ``vendor``
    (``GenuineIntel``, ``AuthenticAMD``): ``OFF`` for ``native``, ``AVX2,STRICT`` for ``avx2`` on Intel and
    ``AUTO,STRICT`` elsewhere, ``COMPATIBLE`` for ``portable``. Raises ``KeyError`` for another pin."""
    if isa == "avx2":
        return "AVX2,STRICT" if vendor == "GenuineIntel" else "AUTO,STRICT"
    return {"native": "OFF", "portable": "COMPATIBLE"}[isa]
