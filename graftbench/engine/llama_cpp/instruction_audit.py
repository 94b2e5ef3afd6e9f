"""What the portable llama.cpp build's machine code holds, read from its disassembly rather than from its CMake options.

The portable build (:mod:`graftbench.engine.llama_cpp.portable_build`) is meant to run one sequence of instructions on
every x86-64 CPU with AVX2: none of a larger instruction set that only some CPUs have, none whose result the CPU's
maker defines, and no code that asks the CPU who it is and branches. Its CMake options say so; this module checks
the libraries themselves, by disassembling them with binutils' ``objdump`` (AT&T syntax) and counting the
instructions of each class of :data:`FORBIDDEN`:

- AVX-512 (any ``zmm`` register, an ``xmm``/``ymm`` register numbered 16 to 31, an opmask register ``k0``-``k7``,
  an embedded broadcast ``{1toN}``, embedded rounding or suppressed exceptions ``{sae}``, objdump's ``{evex}``
  prefix: each needs the EVEX encoding), AMX tile instructions, VNNI dot products (VEX or EVEX, the INT8 and INT16
  forms included), BF16 conversions and dot products: instructions that only some of the fleet's CPUs have. An
  EVEX-only instruction on ``xmm``/``ymm`` 0 to 15 with none of these operands (``vpternlogd``, ``vmovdqu64``,
  ``vpermt2ps``, AVX512-FP16 arithmetic) is not seen: the text names no encoding;
- the approximate reciprocals (``rcpps``, ``rsqrtps``, their scalar, VEX and AVX-512 forms, single, double and
  half precision): Intel's and AMD's
  implementations return other bits for the same input (Intel SDM vol. 2, RCPPS: "relative error ... less than or
  equal to 1.5 * 2^-12"; the bits within that bound are the implementation's), the one arithmetic difference between
  vendors that the IEEE 754 operations (add, multiply, fused multiply-add, divide, square root) do not have;
- ``cpuid`` and ``xgetbv``: the code that reads which CPU it runs on, so that nothing in the libraries dispatches on it.

System libraries the build calls into are not audited here (glibc's libm picks its ``expf``/``logf``/``sinf``
variants once, by the CPU's FMA and AVX2: every CPU that runs the portable pin has both and takes the same
variant; docs/portable-pin.md).

Imports neither llama_cpp nor torch.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

# Each class of instruction the portable build must not hold: (name, pattern over one line of objdump's output)
FORBIDDEN: tuple[tuple[str, re.Pattern], ...] = (
    ("AVX-512 registers or EVEX operands",
     re.compile(r"%zmm\d|%[xy]mm(1[6-9]|2\d|3[01])\b|%k[0-7]\b|\{1to\d+\}|\{(r[nduz]-)?sae\}|\{evex\}")),
    ("AMX tiles", re.compile(r"\s(ldtilecfg|sttilecfg|tileloadd\w*|tilestored|tilezero|tilerelease|tdp\w+)\s")),
    ("VNNI dot products", re.compile(r"\s(\{vex\} )?vpdp[bw](ss|su|us|uu)ds?\s")),
    ("BF16 instructions", re.compile(r"\s(vcvtne2?ps2bf16\w*|vdpbf16ps|vcvtneebf162ps|vcvtneobf162ps|vbcstnebf162ps)\s")),
    ("approximate reciprocals", re.compile(r"\sv?(rcp|rsqrt)(14|28)?[ps][sdh]\s")),
    ("CPU identification", re.compile(r"\s(cpuid|xgetbv)\b")),
)
OBJDUMP_TIMEOUT_S = 600  # seconds: the CPU backend's library disassembles in a few seconds


class AuditError(RuntimeError):
    """The disassembly could not be made: no ``objdump`` on the PATH, or it failed on the library (named)."""


def count_forbidden(disassembly: str) -> dict[str, int]:
    """How many lines of ``disassembly`` (objdump ``-d`` output, AT&T syntax) hold an instruction of each class of
    :data:`FORBIDDEN`, by class name (every class present, 0 where none)."""
    counts = {name: 0 for name, _ in FORBIDDEN}
    for line in disassembly.splitlines():
        if ":\t" not in line:  # an instruction line is "  address:\tinstruction"; labels and headers are not
            continue
        text = " " + line.split(":\t", 1)[1].split("#", 1)[0] + " "  # the instruction, without objdump's comment
        for name, pattern in FORBIDDEN:
            if pattern.search(text):
                counts[name] += 1
    return counts


def disassemble(library: Path, objdump: str | None = None) -> str:
    """The text of ``objdump -d --no-show-raw-insn`` on ``library`` (symlinks resolved): every executable section,
    AT&T syntax. Raises :class:`AuditError` when ``objdump`` (binutils, which built the library) is not found or
    fails."""
    tool = objdump or shutil.which("objdump")
    if tool is None:
        raise AuditError("objdump (binutils) is not on the PATH: install binutils to audit the portable llama.cpp build")
    done = subprocess.run([tool, "-d", "--no-show-raw-insn", str(Path(library).resolve())], capture_output=True,
                          text=True, timeout=OBJDUMP_TIMEOUT_S)
    if done.returncode != 0:
        raise AuditError(f"objdump failed on {library}: {done.stderr.strip()[-500:]}")
    return done.stdout


def audit(libraries: list[Path], objdump: str | None = None) -> dict[str, dict[str, int]]:
    """:func:`count_forbidden` for each of ``libraries``, by file name. Raises :class:`AuditError` as
    :func:`disassemble` does."""
    return {Path(library).name: count_forbidden(disassemble(library, objdump)) for library in libraries}


def findings(counts: dict[str, dict[str, int]]) -> list[str]:
    """``"<library>: <n> <class>"`` for every nonzero count of :func:`audit`'s result; empty for a clean build."""
    return [f"{library}: {n} {name}" for library, by_class in counts.items() for name, n in by_class.items() if n]
