"""MKL's own report of the code branch each instruction-set pin runs (graftbench/engine/torch/mkl_branch.py): read in
a fresh process, compared with what oneMKL documents for this CPU's vendor, on this CPU and on an emulated Intel
CPU."""

from __future__ import annotations

import platform
import shutil

import pytest

from graftbench.engine.torch import mkl_branch
from graftbench.util import cpuid, isa
from tests.prereqs import need

HEADER_AMD = ("MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture Intel(R) "
              "Architecture processors, Lnx 2.60GHz lp64 gnu_thread")
CALL = ("MKL_VERBOSE SGEMM(N,N,64,64,64,0x7ffe9045,0x563b1826,64,0x563b1825,64,0x7ffe9045,0x563b1826,64) 15.99ms "
        "CNR:{branch} Dyn:{dynamic} FastMM:1 TID:0  NThr:{threads}")


def test_mkls_verbose_lines_are_read():
    text = f"{HEADER_AMD}\n{CALL.format(branch='AUTO,STRICT', dynamic=0, threads=1)}\n4096.0\n"
    assert mkl_branch.parse_verbose(text) == mkl_branch.MklBranch("AUTO,STRICT", False, 1,
                                                                  "Intel(R) Architecture processors")
    assert mkl_branch.parse_verbose(CALL.format(branch="COMPATIBLE", dynamic=1, threads=2)) == \
        mkl_branch.MklBranch("COMPATIBLE", True, 2, "")
    assert mkl_branch.parse_verbose("4096.0\n") is None


def test_the_documented_branch_of_each_pin_depends_on_the_vendor_only_for_avx2():
    assert [mkl_branch.intended_branch(pin, "GenuineIntel") for pin in isa.ISAS] == ["OFF", "AVX2,STRICT", "COMPATIBLE"]
    assert [mkl_branch.intended_branch(pin, "AuthenticAMD") for pin in isa.ISAS] == ["OFF", "AUTO,STRICT", "COMPATIBLE"]


def _vendor() -> str:
    seen = cpuid.cpuid_identity()
    return seen["vendor"] if seen else cpuid.kernel_identity()["vendor"]


@pytest.mark.parametrize("pin", isa.ISAS)
def test_mkl_runs_the_branch_each_pin_intends_on_this_cpu(pin):
    """Declared per vendor: under ``--isa avx2`` an Intel CPU runs ``AVX2,STRICT`` and any other ``AUTO,STRICT``
    (the reason the avx2 pin does not carry bytes across vendors); the portable pin runs ``COMPATIBLE`` on every
    CPU, one thread, dynamic threading off."""
    if platform.machine() not in cpuid.X86_64:
        pytest.skip(f"MKL's branches are x86-64's; this machine is {platform.machine()}")
    if not isa.supported(pin):
        pytest.skip(f"--isa {pin} needs {', '.join(isa.REQUIRED_FLAGS[pin])}; this CPU offers {isa.native_capability()}")
    found = mkl_branch.probe(pin)
    assert found.branch == mkl_branch.intended_branch(pin, _vendor()), found
    assert found.threads == 1 and (pin == "native" or not found.dynamic), found  # native leaves MKL_DYNAMIC alone


@pytest.mark.slow
def test_on_an_emulated_intel_cpu_the_avx2_pin_runs_mkls_avx2_branch_and_the_portable_pin_compatible():
    qemu = shutil.which("qemu-x86_64")
    need("emulator", None if qemu else "qemu-x86_64 is not installed (apt-get install qemu-user)")
    haswell = [qemu, "-cpu", "Haswell"]
    avx2 = mkl_branch.probe("avx2", prefix=haswell)
    assert avx2.branch == "AVX2,STRICT" and "AVX2" in avx2.code_path, avx2
    assert mkl_branch.probe("portable", prefix=haswell).branch == "COMPATIBLE"
