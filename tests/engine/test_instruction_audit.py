"""The portable llama.cpp build's machine code, audited from its disassembly
(graftbench/engine/llama_cpp/instruction_audit.py): no instruction that only some x86-64 CPUs have, none whose result
the CPU's maker defines, no CPUID; a build that holds one is refused when it is recorded."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from graftbench.engine.llama_cpp import instruction_audit as audit
from graftbench.engine.llama_cpp import portable_build as pb

from tests.prereqs import need

# objdump -d lines (AT&T syntax; with the instruction's bytes as disassemble() makes them, or without) of
# instructions the portable build may hold
ALLOWED = """
    0ff0:\tc4 e2 6d b8 cb       \tvfmadd231ps %ymm3,%ymm2,%ymm1
    0ff5:\t66 0f 6f c1          \tmovdqa %xmm1,%xmm0
    0ff9:\tf3 0f 10 c1          \tmovss  %xmm1,%xmm0
    1000:\tvfmadd231ps %ymm1,%ymm2,%ymm15
    1005:\tvcvtph2ps (%rax),%ymm0
    100a:\tvcvtps2ph $0x0,%ymm3,(%rdi)
    100f:\tvpmaddubsw %ymm1,%ymm2,%ymm3
    1014:\tvdivps %ymm1,%ymm2,%ymm3
    1019:\tvsqrtps %ymm1,%ymm2
    101e:\tcall   2000 <ggml_cpu_has_cpuid_like@plt>
    1023:\tmov    %rax,%rbx  # 3000 <cpuid_table>
0000000000001030 <rcpps_named_function>:
"""
FORBIDDEN = {
    audit.AVX512: [
        # EVEX-encoded (first byte 0x62) on ymm 0-15 with operands nothing else marks, found by their bytes
        "    1ff0:\t62 f3 6d 28 25 d9 96 \tvpternlogd $0x96,%ymm1,%ymm2,%ymm3",
        "    1ff7:\t62 f1 fe 28 7f 08    \tvmovdqu64 %ymm1,(%rax)",
        "    2000:\tvaddps %zmm0,%zmm1,%zmm2", "    2006:\tvmovups %ymm16,(%rax)",
        "    200c:\tvaddps %ymm1,%ymm2,%ymm3{%k1}", "    2012:\tkmovw  %k2,%eax",
        # EVEX on xmm/ymm 0-15 without a mask: an embedded broadcast, rounding, objdump's {evex} prefix
        "    2018:\tvaddps (%rax){1to8},%ymm1,%ymm2", "    201e:\tvaddss {rn-sae},%xmm1,%xmm2,%xmm3",
        "    2024:\tvmaxss {sae},%xmm1,%xmm2,%xmm3", "    202a:\t{evex} vaddps %ymm1,%ymm2,%ymm3"],
    "AMX tiles": ["    3000:\ttileloadd (%rsi,%rdx,1),%tmm0", "    3006:\ttdpbssd %tmm2,%tmm1,%tmm0",
                  "    300c:\tldtilecfg (%rdi)"],
    "VNNI dot products": ["    4000:\t{vex} vpdpbusd %ymm1,%ymm2,%ymm3", "    4006:\tvpdpwssds %xmm1,%xmm2,%xmm3",
                          "    400c:\tvpdpbssd %ymm1,%ymm2,%ymm3", "    4012:\tvpdpbuuds %xmm1,%xmm2,%xmm3",
                          "    4018:\tvpdpwsud %xmm1,%xmm2,%xmm3"],
    "BF16 instructions": ["    5000:\tvcvtneps2bf16 %ymm1,%xmm2", "    5006:\tvdpbf16ps %ymm1,%ymm2,%ymm3"],
    "approximate reciprocals": ["    6000:\trcpps  %xmm1,%xmm2", "    6004:\tvrsqrtps %ymm1,%ymm2",
                                "    6008:\tvrcp14ps %ymm1,%ymm2", "    600e:\trsqrtss %xmm1,%xmm2",
                                "    6012:\tvrcp14pd %ymm1,%ymm2", "    6018:\tvrsqrt14sd %xmm1,%xmm2,%xmm3",
                                "    601e:\tvrcpph %xmm1,%xmm2", "    6024:\tvrsqrtsh %xmm1,%xmm2,%xmm3"],
    "x87 transcendentals": ["    6a00:\tfsin", "    6a02:\tfyl2x", "    6a04:\tf2xm1"],
    "CPU identification": ["    7000:\tcpuid", "    7002:\txgetbv"],
}


def test_the_instructions_of_the_fixed_set_are_allowed_and_each_forbidden_class_is_counted():
    assert audit.findings({"lib.so": audit.count_forbidden(ALLOWED)}) == []
    assert [name for name, _ in audit.FORBIDDEN] == list(FORBIDDEN)
    for name, lines in FORBIDDEN.items():
        counts = audit.count_forbidden(ALLOWED + "\n".join(lines))
        assert counts[name] == len(lines) and sum(counts.values()) == len(lines), (name, counts)
    assert audit.findings({"libggml-cpu.so": audit.count_forbidden("    7000:\tcpuid")}) == \
        ["libggml-cpu.so: 1 CPU identification"]


def _assembled_library(folder, instruction: str):
    """A shared library ``libggml-cpu.so`` whose one function holds ``instruction``, assembled by gcc (assembling
    AVX-512 needs no AVX-512 CPU), beside a ``libllama.so`` of plain code."""
    gcc = shutil.which("gcc")
    need("llama.cpp", None if gcc else "gcc is not installed (llama.cpp's builds need it)")
    for name, body in (("libggml-cpu.so", instruction), ("libllama.so", "nop")):
        source = folder / f"{name}.s"
        source.write_text(f".text\n.globl f\nf:\n\t{body}\n\tret\n")
        subprocess.run([gcc, "-shared", "-nostdlib", "-o", str(folder / name), str(source)], check=True,
                       capture_output=True)
    return folder


@pytest.mark.parametrize("instruction, found", [
    ("vaddps %zmm0, %zmm1, %zmm2", f"libggml-cpu.so: 1 {audit.AVX512}"),
    ("vaddps (%rax){1to8}, %ymm1, %ymm2", f"libggml-cpu.so: 1 {audit.AVX512}"),
    ("vpternlogd $0x96, %ymm1, %ymm2, %ymm3", f"libggml-cpu.so: 1 {audit.AVX512}"),  # by its encoding alone
    ("vrcp14pd %ymm1, %ymm2", "libggml-cpu.so: 1 approximate reciprocals"),
    ("vrsqrtps %ymm1, %ymm2", "libggml-cpu.so: 1 approximate reciprocals"),
    ("cpuid", "libggml-cpu.so: 1 CPU identification"),
])
def test_a_build_holding_a_forbidden_instruction_is_refused_when_recorded(tmp_path, instruction, found):
    lib_dir = tmp_path / pb.LIB_SUBDIR
    lib_dir.mkdir(parents=True)
    _assembled_library(lib_dir, instruction)
    with pytest.raises(pb.LlamaBuildError, match="is not portable, its libraries hold .*" + re.escape(found)):
        pb.record(tmp_path, "-DGGML_NATIVE=OFF -DGGML_AVX2=ON")
    assert not (tmp_path / pb.RECORD).exists()


def test_an_audit_without_objdump_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(audit.shutil, "which", lambda name: None)
    with pytest.raises(audit.AuditError, match="objdump .binutils. is not on the PATH"):
        audit.disassemble(tmp_path / "libllama.so")


@pytest.mark.model
def test_the_portable_build_holds_only_its_fixed_instruction_set():
    """The build `make llama-portable` made here (the same flags and compiler on every machine): every library of it
    disassembled, each forbidden class absent, and AVX2 code present (the audit reads real code)."""
    try:
        pb.identity()
    except (pb.LlamaBuildError, ImportError) as exc:
        need("llama.cpp", f"no portable llama.cpp build: {exc}")
    libraries = pb.build_libraries(pb.default_folder() / pb.LIB_SUBDIR)
    assert {p.name for p in libraries} >= {"libllama.so", "libggml-cpu.so"}
    counts = audit.audit(libraries)
    assert audit.findings(counts) == []
    cpu_code = audit.disassemble(pb.default_folder() / pb.LIB_SUBDIR / "libggml-cpu.so")
    assert "vfmadd" in cpu_code and "%ymm" in cpu_code
