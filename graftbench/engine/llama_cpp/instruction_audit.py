"""What the portable llama.cpp build's machine code holds, read from its disassembly rather than from its CMake options.

The portable build (:mod:`graftbench.engine.llama_cpp.portable_build`) is meant to run one sequence of instructions on
every x86-64 CPU with AVX2: none of a larger instruction set that only some CPUs have, none whose result the CPU's
maker defines, and no code that asks the CPU who it is and branches. Its CMake options say so; this module checks
the libraries themselves, by disassembling them with binutils' ``objdump`` (AT&T syntax) and counting the
instructions of each class of :data:`FORBIDDEN`:

- AVX-512, found by its encoding: an instruction whose first byte after any legacy prefix is 0x62 (EVEX), whatever
  its operands (``vpternlogd`` on ``ymm1``), and by the operands only EVEX can name (``zmm``, ``xmm``/``ymm`` 16 to
  31, opmask ``k`` registers, ``{1toN}``, ``{sae}``); AMX tile instructions, VNNI dot products (VEX or EVEX, the INT8
  and INT16 forms included), BF16 conversions and dot products: instructions that only some of the fleet's CPUs
  have;
- the approximate reciprocals (``rcpps``, ``rsqrtps``, their scalar, VEX and AVX-512 forms, single, double and
  half precision): Intel's and AMD's implementations return other bits for the same input (Intel SDM vol. 2,
  RCPPS: "relative error ... less than or equal to 1.5 * 2^-12"; the bits within that bound are the
  implementation's), unlike the IEEE 754 operations (add, multiply, fused multiply-add, divide, square root),
  which every vendor rounds alike;
- x87's transcendental instructions (``fsin``, ``fcos``, ``fptan``, ``fpatan``, ``f2xm1``, ``fyl2x`` and kin), whose
  accuracy each vendor's microcode sets (Intel SDM vol. 1, 8.3.10, "Transcendental Instruction Accuracy");
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

# Each class of instruction the portable build must not hold: (name, pattern over one instruction as objdump prints
# it). The first class is also found by its encoding (:func:`is_evex`), which every AVX-512 instruction has.
AVX512 = "AVX-512 (EVEX encoding, zmm or opmask registers)"
FORBIDDEN: tuple[tuple[str, re.Pattern], ...] = (
    (AVX512, re.compile(r"%zmm\d|%[xy]mm(1[6-9]|2\d|3[01])\b|%k[0-7]\b|\{1to\d+\}|\{(r[nduz]-)?sae\}|\{evex\}")),
    ("AMX tiles", re.compile(r"\s(ldtilecfg|sttilecfg|tileloadd\w*|tilestored|tilezero|tilerelease|tdp\w+)\s")),
    ("VNNI dot products", re.compile(r"\s(\{vex\} )?vpdp[bw](ss|su|us|uu)ds?\s")),
    ("BF16 instructions", re.compile(r"\s(vcvtne2?ps2bf16\w*|vdpbf16ps|vcvtneebf162ps|vcvtneobf162ps|vbcstnebf162ps)\s")),
    ("approximate reciprocals", re.compile(r"\sv?(rcp|rsqrt)(14|28)?[ps][sdh]\s")),
    ("x87 transcendentals", re.compile(r"\s(fsin|fcos|fsincos|fptan|fpatan|f2xm1|fyl2x|fyl2xp1)\s")),
    ("CPU identification", re.compile(r"\s(cpuid|xgetbv)\b")),
)
# Legacy prefixes (Intel SDM vol. 2A, 2.1.1): lock, rep, operand and address size, segment overrides
LEGACY_PREFIXES = frozenset({"f0", "f2", "f3", "66", "67", "2e", "36", "3e", "26", "64", "65"})
OBJDUMP_TIMEOUT_S = 600  # seconds: the CPU backend's library disassembles in a few seconds


class AuditError(RuntimeError):
    """The disassembly could not be made: no ``objdump`` on the PATH, or it failed on the library (named)."""


def is_evex(raw: str) -> bool:
    """Whether the instruction bytes ``raw`` (hex pairs as objdump prints them, ``"62 f1 7c 48 58 c1"``) are
    EVEX-encoded, the encoding of every AVX-512 instruction: its first byte after any legacy prefix is 0x62, which
    in 64-bit mode starts nothing else (Intel SDM vol. 2A, 2.7.1, "EVEX Encoding")."""
    for byte in raw.split():
        if byte.lower() not in LEGACY_PREFIXES:
            return byte.lower() == "62"
    return False


def count_forbidden(disassembly: str) -> dict[str, int]:
    """How many instructions of ``disassembly`` (objdump ``-d`` output, AT&T syntax; with the raw bytes, as
    :func:`disassemble` makes it, or without) are of each class of :data:`FORBIDDEN`, by class name (every class
    present, 0 where none); EVEX-encoded ones (:func:`is_evex`) count as :data:`AVX512` whatever their operands."""
    counts = {name: 0 for name, _ in FORBIDDEN}
    for line in disassembly.splitlines():
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0].rstrip().endswith(":"):  # "  address:\t[bytes\t]instruction"
            continue
        raw, instruction = (fields[1], "\t".join(fields[2:])) if len(fields) > 2 else ("", fields[1])
        text = " " + instruction.split("#", 1)[0] + " "  # without objdump's comment
        for name, pattern in FORBIDDEN:
            if pattern.search(text) or (name == AVX512 and is_evex(raw)):
                counts[name] += 1
    return counts


def disassemble(library: Path, objdump: str | None = None) -> str:
    """The text of ``objdump -d --insn-width=16`` on ``library`` (symlinks resolved): every executable section, AT&T
    syntax, each instruction on one line with its bytes (x86 instructions are at most 15 bytes). Raises :class:`AuditError` when ``objdump`` (binutils, which built the library) is not found or
    fails."""
    tool = objdump or shutil.which("objdump")
    if tool is None:
        raise AuditError("objdump (binutils) is not on the PATH: install binutils to audit the portable llama.cpp build")
    done = subprocess.run([tool, "-d", "--insn-width=16", str(Path(library).resolve())], capture_output=True,
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
