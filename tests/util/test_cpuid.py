"""graftbench tells a CPU it runs on from one it is emulated on (graftbench/util/cpuid.py): CPUID asked in this
process against the kernel's /proc/cpuinfo, checked on this machine and under qemu's user-mode emulator."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graftbench.util import cpuid, isa
from tests.prereqs import need

ROOT = Path(__file__).resolve().parents[2]
FEATURES = ["fma", "avx", "avx2", "avx512f"]
AMD = {"vendor": "AuthenticAMD", "brand": "AMD EPYC", "features": FEATURES}
AMD_HOST = {"vendor": "AuthenticAMD", "brands": ["AMD EPYC"], "features": FEATURES}
INTEL = {"vendor": "GenuineIntel", "brand": "Intel Core Processor (Haswell)", "features": ["fma", "avx", "avx2"]}
HOST = {"cpu_model": "AMD EPYC", "cpu_capability_native": "AVX512", "cpu_kernel_flags": ["avx512_bf16"]}


def test_a_cpu_seen_as_the_kernel_describes_it_is_not_emulated():
    assert cpuid.emulation(seen=AMD, host=AMD_HOST) is None
    assert cpuid.emulation(seen={"vendor": "GenuineIntel", "brand": "Intel(R)  Xeon(R)", "features": []},
                           host={"vendor": " GenuineIntel ", "brands": ["Intel(R) Xeon(R)"], "features": []}) is None
    # two sockets of other brands, and a kernel or sandbox (gVisor) that names no brand
    assert cpuid.emulation(seen=AMD, host={**AMD_HOST, "brands": ["AMD EPYC", "AMD EPYC 9004"]}) is None
    assert cpuid.emulation(seen=AMD, host={**AMD_HOST, "brands": ["unknown"]}) is None
    # the kernel may hide a feature the CPU reports (AVX-512 switched off), never list one it lacks
    assert cpuid.emulation(seen=AMD, host={**AMD_HOST, "features": ["fma", "avx", "avx2"]}) is None


def test_another_vendor_brand_or_fewer_features_than_the_kernels_is_an_emulation():
    assert cpuid.emulation(seen=INTEL, host=AMD_HOST) == {
        "seen": "GenuineIntel Intel Core Processor (Haswell)", "seen_features": ["fma", "avx", "avx2"],
        "host": "AuthenticAMD AMD EPYC"}
    assert cpuid.emulation(seen={**AMD, "brand": "AMD EPYC Processor"}, host=AMD_HOST) is not None
    # an emulator that copies the host's vendor and brand still lacks the host's AVX-512
    assert cpuid.emulation(seen={**AMD, "features": ["fma", "avx", "avx2"]}, host=AMD_HOST) is not None


def test_no_claim_where_cpuid_or_the_kernels_vendor_is_missing(monkeypatch):
    monkeypatch.setattr(cpuid, "cpuid_identity", lambda: None)
    assert cpuid.emulation(host=AMD_HOST) is None
    assert cpuid.emulation(seen=INTEL, host={"vendor": "", "brands": [], "features": []}) is None


def test_a_check_that_could_not_be_made_is_recorded_as_unchecked_not_as_a_real_cpu(monkeypatch):
    """Where CPUID cannot run (a page cannot be made executable) or the kernel describes no x86 CPU (an x86
    emulator on another architecture's host), the environment says the check was not made."""
    monkeypatch.setattr(cpuid.platform, "machine", lambda: "x86_64")
    amd_text = "vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fma avx avx2 avx512f\n"
    assert cpuid.emulation_fields(amd_text, seen=AMD) == {}
    assert cpuid.emulation_fields(amd_text, seen=INTEL)["emulated"]["seen"].startswith("GenuineIntel")
    monkeypatch.setattr(cpuid, "cpuid_identity", lambda: None)
    assert cpuid.emulation_fields(amd_text) == {"emulation_unchecked": cpuid.NO_CPUID}
    arm_text = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\n"
    assert cpuid.emulation_fields(arm_text, seen=INTEL) == {"emulation_unchecked": cpuid.NO_X86_KERNEL}
    assert cpuid.emulation_fields("", seen=INTEL) == {"emulation_unchecked": cpuid.NO_X86_KERNEL}
    monkeypatch.setattr(cpuid.platform, "machine", lambda: "aarch64")
    assert cpuid.emulation_fields(arm_text) == {}  # no x86 pin runs on it: nothing to claim


def test_an_unchecked_cpu_is_its_own_kind_and_says_so(monkeypatch):
    unchecked = {**HOST, "emulation_unchecked": cpuid.NO_CPUID}
    assert not isa.same_cpu_kind(unchecked, HOST) and not isa.same_cpu_kind(HOST, unchecked)
    assert isa.same_cpu_kind(unchecked, dict(unchecked))
    assert isa.describe_cpu(unchecked) == f"AMD EPYC (AVX512; avx512_bf16), emulation not checked: {cpuid.NO_CPUID}"
    monkeypatch.setattr(cpuid, "cpuid_identity", lambda: None)
    if platform.machine() in cpuid.X86_64:
        assert isa.environment()["emulation_unchecked"] == cpuid.NO_CPUID


def test_the_kernels_identity_is_read_from_cpuinfo_text():
    text = ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
            "flags\t\t: fpu avx fma avx2 avx512f avx512bw\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
            "model name\t: Intel(R) Xeon(R) Other\nflags\t\t: fpu\n")
    assert cpuid.kernel_identity(text) == {"vendor": "GenuineIntel", "brands": ["Intel(R) Xeon(R) Other",
                                           "Intel(R) Xeon(R) Processor"], "features": ["fma", "avx", "avx2", "avx512f"]}
    assert cpuid.kernel_identity("") == {"vendor": "", "brands": [], "features": []}
    assert cpuid.cpuinfo_field("model name", text) == "Intel(R) Xeon(R) Processor"  # the first processor's
    assert cpuid.cpuinfo_field("flags", "vmx flags\t: ept\nflags\t\t: fpu avx\n") == "fpu avx"
    assert cpuid.cpuinfo_field("bugs", text) == ""


def test_the_cpuid_function_keeps_the_registers_the_calling_convention_keeps():
    assert cpuid.CPUID_FUNCTION[0] == 0x53 and cpuid.CPUID_FUNCTION[-2:] == bytes([0x5B, 0xC3])  # push/pop rbx, ret
    if platform.machine() not in cpuid.X86_64:
        pytest.skip(f"no CPUID on {platform.machine()}")
    first = cpuid.cpuid_identity()
    assert first is not None and all(cpuid.cpuid_identity() == first for _ in range(200))  # a clobbered rbx crashes


def test_this_machine_answers_cpuid_as_its_kernel_describes_it():
    if platform.machine() not in cpuid.X86_64:
        pytest.skip(f"no CPUID on {platform.machine()}")
    seen = cpuid.cpuid_identity()
    assert seen is not None and seen["vendor"] == cpuid.kernel_identity()["vendor"], seen
    assert cpuid.emulation() is None and cpuid.emulation_fields() == {}
    assert "emulated" not in isa.environment() and "emulation_unchecked" not in isa.environment()


def test_an_emulated_cpu_is_its_own_kind_and_says_so():
    emulated = {**HOST, "emulated": {"seen": "GenuineIntel Intel Core Processor (Haswell)",
                                     "seen_features": ["fma", "avx", "avx2"], "host": "AuthenticAMD AMD EPYC"}}
    assert not isa.same_cpu_kind(emulated, HOST) and not isa.same_cpu_kind(HOST, emulated)
    assert isa.same_cpu_kind(emulated, dict(emulated))
    fewer = {**emulated, "emulated": {**emulated["emulated"], "seen_features": ["fma", "avx"]}}
    assert not isa.same_cpu_kind(emulated, fewer)  # another emulated CPU model is another kind
    assert isa.describe_cpu(emulated) == ("GenuineIntel Intel Core Processor (Haswell), emulated on a host with "
                                          "AMD EPYC (AVX512; avx512_bf16)")


def test_a_process_under_qemus_emulator_is_found_emulated():
    qemu = shutil.which("qemu-x86_64")
    need("emulator", None if qemu else "qemu-x86_64 is not installed (apt-get install qemu-user)")
    probe = "import json; from graftbench.util import isa; print(json.dumps(isa.environment()))"
    done = subprocess.run([qemu, "-cpu", "Haswell", sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    host = cpuid.kernel_identity()
    assert found["emulated"] == {"seen": "GenuineIntel Intel Core Processor (Haswell)",
                                 "seen_features": ["fma", "avx", "avx2"],
                                 "host": f"{host['vendor']} {host['brands'][0]}"}, found
    assert found["cpu_model"] == isa.cpu_model()  # /proc/cpuinfo still names the host
