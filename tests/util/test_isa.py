"""The instruction-set pin: read from the CPU, applied before torch, refused when it cannot hold, and pinned."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from graftbench.util import isa
from graftbench.cli.app import app

AVX512_FLAGS = {"fma", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}


def test_native_capability_is_read_from_cpu_flags_in_torchs_names():
    assert isa.native_capability(AVX512_FLAGS) == "AVX512"
    assert isa.native_capability({"fma", "avx2", "avx512f"}) == "AVX2"  # AVX-512 F alone is not ATen's AVX512
    assert isa.native_capability({"avx2"}) == "DEFAULT"  # AVX2 kernels need FMA as well
    assert isa.native_capability(set()) == "DEFAULT"
    assert isa.cpu_flags("processor: 0\nflags\t\t: fpu avx2 fma\n") == {"fpu", "avx2", "fma"}
    assert isa.cpu_model("model name\t: AMD EPYC 9B14\nflags: x\n") == "AMD EPYC 9B14"


def test_a_cpu_without_avx2_cannot_run_the_portable_pin():
    assert isa.supported("avx2", AVX512_FLAGS) and isa.supported("native", set())
    assert not isa.supported("avx2", {"sse4_2", "avx"})
    with pytest.raises(isa.IsaError, match="unknown instruction-set pin 'avx3'"):
        isa.check_name("avx3")


def test_the_pin_cannot_change_once_torch_is_imported(monkeypatch):
    import torch  # noqa: F401  (this test process runs under the native pin)

    for name in isa.CAP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert isa.current() == "native"
    with pytest.raises(isa.IsaError, match="must be set before torch is imported"):
        isa.apply("avx2")
    isa.apply("native")  # the pin it already has is fine


def test_a_mixed_environment_is_neither_pin(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    for name in ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(isa.IsaError, match="neither pin"):
        isa.current()


@pytest.mark.skipif(not isa.supported("avx2"), reason=f"this CPU ({isa.native_capability()}) has no AVX2")
def test_the_portable_pin_caps_every_library_in_a_fresh_process():
    code = (
        "import json, graftbench, torch\n"
        "from graftbench.engine.torch.pin_config import configure_torch\n"
        "name = configure_torch()\n"
        "print(json.dumps([name, torch.backends.cpu.get_cpu_capability(), torch.backends.mkldnn.enabled]))\n"
    )
    env = {**os.environ, "GRAFTBENCH_ISA": "avx2"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["avx2", "AVX2", False]


def test_an_unknown_isa_on_the_command_line_is_named():
    result = CliRunner().invoke(app, ["solve", "--isa", "avx9", "--limit", "1"])
    assert result.exit_code == 2 and "unknown instruction-set pin 'avx9'" in result.output


def test_the_cross_vendor_candidate_sets_mkls_compatible_branch_and_fixed_threads(monkeypatch):
    caps = isa.CAPS["portable"]
    assert caps["MKL_CBWR"] == "COMPATIBLE" and caps["MKL_DYNAMIC"] == "FALSE"
    assert caps["ATEN_CPU_CAPABILITY"] == "avx2" and caps["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert isa.REQUIRED_FLAGS["portable"] == ("avx2", "fma") and not isa.supported("portable", {"avx"})
    for name in isa.CAP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in caps.items():
        monkeypatch.setenv(name, value)
    assert isa.current() == "portable"
    monkeypatch.setenv("MKL_CBWR", "AVX2,STRICT")  # avx2's branch with portable's other caps is neither pin
    with pytest.raises(isa.IsaError, match="neither pin"):
        isa.current()


def test_the_cross_vendor_candidate_is_applied_before_torch_in_a_fresh_process():
    if not isa.supported("portable"):
        pytest.fail(f"every CI CPU has AVX2 and FMA; this one ({isa.native_capability()}) does not")
    code = (
        "import json, os, graftbench, torch\n"
        "from graftbench.engine.torch.pin_config import configure_torch\n"
        "name = configure_torch()\n"
        "print(json.dumps([name, torch.backends.cpu.get_cpu_capability(), torch.backends.mkldnn.enabled,"
        " os.environ['MKL_CBWR'], os.environ['MKL_DYNAMIC']]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in isa.CAP_VARIABLES}
    done = subprocess.run([sys.executable, "-c", code], env={**env, "GRAFTBENCH_ISA": "portable"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["portable", "AVX2", False, "COMPATIBLE", "FALSE"]


def test_committed_pins_keep_their_fingerprints_with_the_new_pin_offered():
    from pathlib import Path

    from graftbench.results.fingerprint import pin_fingerprint

    root = Path(__file__).resolve().parents[2] / "manifests"
    checked = 0
    for name in ("amd-epyc-avx512/exact-smollm2-135m.json", "intel-xeon-amx/exact-smollm2-135m.json",
                 "amd-epyc-avx512/exact-qwen2.5-coder-0.5b-llama-f16.json"):
        manifest = json.loads((root / name).read_text())
        assert pin_fingerprint(manifest["config"]) == manifest["config_fingerprint"], name
        checked += 1
    assert checked == 3
