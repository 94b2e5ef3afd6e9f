"""graftbench tells a CPU it runs on from one it is emulated on (graftbench/util/cpuid.py): CPUID asked in this
process against the kernel's /proc/cpuinfo, checked on this machine and under qemu's user-mode emulator."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from graftbench.util import cpuid, isa
from tests.prereqs import need

ROOT = Path(__file__).resolve().parents[2]
AMD = {"vendor": "AuthenticAMD", "brand": "AMD EPYC"}
INTEL = {"vendor": "GenuineIntel", "brand": "Intel Core Processor (Haswell)"}
HOST = {"cpu_model": "AMD EPYC", "cpu_capability_native": "AVX512", "cpu_kernel_flags": ["avx512_bf16"]}


def test_a_cpu_seen_as_the_kernel_describes_it_is_not_emulated():
    assert cpuid.emulation(seen=AMD, host=AMD) is None
    assert cpuid.emulation(seen={"vendor": "GenuineIntel", "brand": "  Intel(R)  Xeon(R) "},
                           host={"vendor": "GenuineIntel", "brand": "Intel(R) Xeon(R)"}) is None


def test_another_vendor_or_brand_than_the_kernels_is_an_emulation():
    assert cpuid.emulation(seen=INTEL, host=AMD) == {"seen": "GenuineIntel Intel Core Processor (Haswell)",
                                                     "host": "AuthenticAMD AMD EPYC"}
    assert cpuid.emulation(seen={**AMD, "brand": "AMD EPYC 9004"}, host=AMD) is not None


def test_no_claim_where_cpuid_or_the_kernels_vendor_is_missing(monkeypatch):
    monkeypatch.setattr(cpuid, "cpuid_identity", lambda: None)
    assert cpuid.emulation(host=AMD) is None
    assert cpuid.emulation(seen=INTEL, host={"vendor": "", "brand": ""}) is None


def test_the_kernels_identity_is_read_from_cpuinfo_text():
    text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu\n"
    assert cpuid.kernel_identity(text) == {"vendor": "GenuineIntel", "brand": "Intel(R) Xeon(R) Processor"}
    assert cpuid.kernel_identity("") == {"vendor": "", "brand": ""}


def test_this_machine_answers_cpuid_as_its_kernel_describes_it():
    assert platform.machine() in cpuid.X86_64, "graftbench's CI machines are x86-64"
    seen = cpuid.cpuid_identity()
    assert seen is not None and seen["vendor"] == cpuid.kernel_identity()["vendor"], seen
    assert cpuid.emulation() is None and "emulated" not in isa.environment()


def test_an_emulated_cpu_is_its_own_kind_and_says_so():
    emulated = {**HOST, "emulated": {"seen": "GenuineIntel Intel Core Processor (Haswell)",
                                     "host": "AuthenticAMD AMD EPYC"}}
    assert not isa.same_cpu_kind(emulated, HOST) and not isa.same_cpu_kind(HOST, emulated)
    assert isa.same_cpu_kind(emulated, dict(emulated))
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
                                 "host": f"{host['vendor']} {host['brand']}"}, found
    assert found["cpu_model"] == isa.cpu_model()  # /proc/cpuinfo still names the host
