"""The CUDA pin with a stand-in for torch.cuda (no GPU needed), its compatibility with every committed CPU pin, the
refusal of an artifact made on another device kind, and the fast kernels (``--kernels fast``): another pin, refused
by check-exact and ``--certify``, its artifacts refused by certified runs."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from graftbench.engine.torch import cuda_determinism
from graftbench.engine.pin import OMITTED_AT_DEFAULT, PinnedConfig
from graftbench.problems.prompts import PromptLayout
from graftbench.results.fingerprint import pin_fingerprint
from graftbench.results.layout import manifest_folders
from tests.conftest import AIME2024, REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]


class _Flags:
    def __init__(self):
        self.allow_tf32 = True
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


def fake_torch(name="NVIDIA H200", sms=132, major=9, minor=0):
    """A stand-in for the parts of torch the CUDA pin reads and sets, starting from torch's own defaults."""
    enabled = {"math": True, "flash": True, "efficient": True, "cudnn": True}
    state = {"deterministic": False, "warn_only": False}
    cuda_backend = SimpleNamespace(matmul=_Flags())
    for backend in enabled:
        setattr(cuda_backend, f"enable_{backend}_sdp", lambda on, b=backend: enabled.__setitem__(b, on))
        setattr(cuda_backend, f"{backend}_sdp_enabled", lambda b=backend: enabled[b])
    cudnn = SimpleNamespace(allow_tf32=True, benchmark=False, deterministic=False, is_available=lambda: True,
                            version=lambda: 91002)
    props = SimpleNamespace(name=name, major=major, minor=minor, multi_processor_count=sms)
    return SimpleNamespace(
        backends=SimpleNamespace(cuda=cuda_backend, cudnn=cudnn),
        cuda=SimpleNamespace(get_device_properties=lambda index: props),
        version=SimpleNamespace(cuda="12.8"),
        use_deterministic_algorithms=lambda on, warn_only=False: state.update(deterministic=on, warn_only=warn_only),
        are_deterministic_algorithms_enabled=lambda: state["deterministic"],
        is_deterministic_algorithms_warn_only_enabled=lambda: state["warn_only"],
    )


class FakeNvml:
    def __init__(self, mig=0):
        self.mig = mig

    def nvmlSystemGetDriverVersion(self):
        return b"570.133.20"

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetMigMode(self, handle):
        return self.mig, self.mig


def test_configure_then_record_gives_every_field_as_set(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch = fake_torch()
    before = cuda_determinism.record("cuda:0", torch=torch, nvml=FakeNvml())
    assert before["tf32_matmul"] is True and before["deterministic_algorithms"] is False
    assert before["sdpa_backends"] == ["math", "flash", "efficient", "cudnn"]
    cuda_determinism.configure(torch=torch)
    pin = cuda_determinism.record("cuda:0", torch=torch, nvml=FakeNvml())
    assert pin == {
        "gpu": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "mig": "none",
        "driver": "570.133.20", "cuda": "12.8", "cublas": cuda_determinism.library_version("cublas"), "cudnn": "91002",
        "deterministic_algorithms": True, "deterministic_warn_only": True, "tf32_matmul": False, "tf32_cudnn": False,
        "fp16_reduced_precision_reduction": False, "bf16_reduced_precision_reduction": False,
        "cublas_workspace_config": ":4096:8", "sdpa_backends": ["math"], "execution": "eager",
    }


def test_a_workspace_config_set_by_the_user_is_kept_and_recorded(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    torch = fake_torch()
    cuda_determinism.configure(torch=torch)
    assert cuda_determinism.record("cuda:0", torch=torch, nvml=FakeNvml())["cublas_workspace_config"] == ":16:8"


def test_mig_profile_comes_from_the_device_name_or_nvml():
    assert cuda_determinism.mig_profile("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 0, FakeNvml()) == "3g.40gb"
    assert cuda_determinism.mig_profile("NVIDIA H200", 0, FakeNvml(mig=0)) == "none"
    assert cuda_determinism.mig_profile("NVIDIA H200", 0, FakeNvml(mig=1)) == "enabled (profile unknown)"


def test_two_gpus_with_other_sm_counts_have_other_pins():
    first = cuda_determinism.record("cuda:0", torch=fake_torch(sms=132), nvml=FakeNvml())
    second = cuda_determinism.record("cuda:0", torch=fake_torch(sms=114), nvml=FakeNvml())
    assert first != second and first["sm_count"] == 132 and second["sm_count"] == 114


_CURRENT_FIELDS = {f.name for f in fields(PinnedConfig)} - set(OMITTED_AT_DEFAULT)


def _pin_from(recorded: dict) -> PinnedConfig:
    fields = dict(recorded)
    fields["layout"] = PromptLayout(**fields["layout"]) if isinstance(fields["layout"], dict) else fields["layout"]
    return PinnedConfig(**fields)


def _committed_manifests() -> list[Path]:
    return sorted(p for folder in manifest_folders(ROOT) for p in folder.rglob("*.json"))


def test_every_committed_pin_keeps_its_fingerprint_through_the_pinned_config():
    checked = 0
    for path in _committed_manifests():
        manifest = json.loads(path.read_text())
        if not isinstance(manifest.get("config"), dict) or "config_fingerprint" not in manifest:
            continue
        assert pin_fingerprint(manifest["config"]) == manifest["config_fingerprint"], path
        if manifest["config"].get("random_weights") or manifest["config"].get("engine"):
            continue  # a random-weights or llama.cpp pin carries its new field itself (checked where it is made)
        assert not set(OMITTED_AT_DEFAULT) & set(manifest["config"]), path
        if set(manifest["config"]) == _CURRENT_FIELDS:  # older pins lack fields added since (isa, cache_class)
            pin = _pin_from(manifest["config"])
            assert pin.fingerprint == manifest["config_fingerprint"] and pin.to_dict() == manifest["config"], path
            checked += 1
    assert checked >= 10  # the expectations and runs recorded under the current pin fields


def test_a_cuda_pin_is_part_of_the_fingerprint_and_a_cpu_pin_has_none():
    recorded = json.loads((REFERENCE_MANIFESTS / "exact-gemma3-270m.json").read_text())["config"]
    cpu = _pin_from(recorded)
    accelerator = cuda_determinism.record("cuda:0", torch=fake_torch(), nvml=FakeNvml())
    cuda = _pin_from({**recorded, "device": "cuda", "accelerator": accelerator})
    assert "accelerator" not in cpu.to_dict() and cuda.to_dict()["accelerator"] == accelerator
    assert cuda.fingerprint == pin_fingerprint(cuda.to_dict()) != cpu.fingerprint


def test_an_artifact_made_on_another_device_kind_is_refused():
    import torch

    from graftbench.store.codec import ArtifactError, decode_artifact, encode_artifact
    from graftbench.store.ids import artifact_id_of
    from graftbench.engine.torch.graft import check_compatible

    recorded = json.loads((REFERENCE_MANIFESTS / "exact-gemma3-270m.json").read_text())["config"]
    cpu = _pin_from(recorded)
    cuda = _pin_from({**recorded, "device": "cuda",
                      "accelerator": cuda_determinism.record("cuda:0", torch=fake_torch(), nvml=FakeNvml())})
    layer = torch.zeros((1, 1, 2, 4))
    header = {"config_fingerprint": cpu.fingerprint, "weights_sha256": cpu.weights_sha256,
              "tokenizer_sha256": cpu.tokenizer_sha256, "model": cpu.model, "dtype": cpu.dtype,
              "chunk_size": cpu.chunk_size, "positions": [0, 2], "parent": None,
              "layers": [{"kind": "full", "seen": 2, "kept": 2}], "kv_heads": 1, "head_dim": 4, "libraries": {}}
    data = encode_artifact(header, torch.arange(2), [(layer, layer.clone())])
    artifact = decode_artifact(artifact_id_of(data), data)
    with pytest.raises(ArtifactError) as refused:
        check_compatible(artifact, cuda, cache=None)
    assert refused.value.check == "config" and "config_fingerprint" in str(refused.value)


def _artifact_under(pin: PinnedConfig):
    """A one-layer artifact deposited under ``pin`` (its header's fields as a deposit writes them)."""
    import torch

    from graftbench.store.codec import decode_artifact, encode_artifact
    from graftbench.store.ids import artifact_id_of

    layer = torch.zeros((1, 1, 2, 4))
    header = {"config_fingerprint": pin.fingerprint, "weights_sha256": pin.weights_sha256,
              "tokenizer_sha256": pin.tokenizer_sha256, "model": pin.model, "dtype": pin.dtype,
              "chunk_size": pin.chunk_size, "positions": [0, 2], "parent": None,
              "layers": [{"kind": "full", "seen": 2, "kept": 2}], "kv_heads": 1, "head_dim": 4, "libraries": {}}
    data = encode_artifact(header, torch.arange(2), [(layer, layer.clone())])
    return decode_artifact(artifact_id_of(data), data)


def test_the_fast_kernels_set_torchs_own_choice_and_record_it(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    certified_torch, fast_torch = fake_torch(), fake_torch()
    cuda_determinism.configure(torch=certified_torch)
    cuda_determinism.configure(torch=fast_torch, kernels="fast")
    certified = cuda_determinism.record("cuda:0", torch=certified_torch, nvml=FakeNvml())
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    fast = cuda_determinism.record("cuda:0", torch=fast_torch, nvml=FakeNvml())
    assert fast["sdpa_backends"] == ["math", "flash", "efficient", "cudnn"] and certified["sdpa_backends"] == ["math"]
    assert fast["deterministic_algorithms"] is False and certified["deterministic_algorithms"] is True
    assert fast["tf32_matmul"] is False and fast["bf16_reduced_precision_reduction"] is True
    assert fast["cublas_workspace_config"] == ""  # not set by the fast kernels
    with pytest.raises(ValueError, match="kernels 'quick' is not one of certified, fast"):
        cuda_determinism.configure(torch=fake_torch(), kernels="quick")


def test_a_fast_pin_records_its_kernels_and_a_certified_one_leaves_the_field_out():
    recorded = json.loads((REFERENCE_MANIFESTS / "exact-gemma3-270m.json").read_text())["config"]
    certified = _pin_from(recorded)
    fast = _pin_from({**recorded, "kernels": "fast"})
    assert "kernels" not in certified.to_dict() and certified.certified
    assert certified.fingerprint == json.loads((REFERENCE_MANIFESTS / "exact-gemma3-270m.json").read_text())[
        "config_fingerprint"]
    assert fast.to_dict()["kernels"] == "fast" and not fast.certified
    assert fast.fingerprint == pin_fingerprint(fast.to_dict()) != certified.fingerprint
    with pytest.raises(ValueError, match="kernels 'quick' is not one of certified, fast"):
        from graftbench.engine.pin import check_kernels

        check_kernels("quick")


def test_an_artifact_deposited_under_the_fast_kernels_is_refused_by_a_certified_run_and_back():
    from graftbench.engine.torch.graft import check_compatible
    from graftbench.store.codec import ArtifactError

    recorded = json.loads((REFERENCE_MANIFESTS / "exact-gemma3-270m.json").read_text())["config"]
    certified, fast = _pin_from(recorded), _pin_from({**recorded, "kernels": "fast"})
    for made_under, run_under in ((fast, certified), (certified, fast)):
        with pytest.raises(ArtifactError) as refused:
            check_compatible(_artifact_under(made_under), run_under, cache=None)
        assert refused.value.check == "config" and "config_fingerprint" in str(refused.value)


def test_a_session_opened_with_the_fast_kernels_on_the_cpu_is_pinned_fast(monkeypatch):
    """On the CPU ``--kernels fast`` changes no setting; the session's pin says fast (another fingerprint)."""
    from graftbench.engine.torch import session as session_module

    loaded = SimpleNamespace(model=SimpleNamespace(parameters=lambda: iter([__import__("torch").zeros(1)]),
                                                   config=SimpleNamespace(_attn_implementation="graftbench_sdpa")),
                             spec="stand-in", weights_sha256="w", tokenizer_sha256="t", dtype="float32",
                             random_weights={})
    from graftbench.engine.torch.pin_config import build_config

    fast, certified = build_config(loaded, kernels="fast"), build_config(loaded)
    assert fast.kernels == "fast" and certified.kernels == "certified"
    assert {k: v for k, v in fast.to_dict().items() if k != "kernels"} == certified.to_dict()
    assert fast.fingerprint != certified.fingerprint
    with pytest.raises(ValueError, match="kernels 'quick' is not one of"):
        session_module.open_session("no-such-model", kernels="quick")  # refused before anything loads


@pytest.mark.parametrize("arguments, env", [
    (["check-exact", "--model", "no-such-model", "--kernels", "fast"], {}),
    (["check-exact", "--model", "no-such-model"], {"GRAFTBENCH_KERNELS": "fast"}),
    (["eval", "--model", "no-such-model", "--graft", "--certify", "--kernels", "fast"], {}),
])
def test_check_exact_and_certify_refuse_the_fast_kernels_before_any_model_loads(arguments, env):
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    result = CliRunner().invoke(app, arguments, env=env)
    assert result.exit_code == 2, result.output
    assert "runs only under --kernels certified: --kernels fast lets torch choose its kernels" in \
        " ".join(result.output.split())


@pytest.mark.parametrize("arguments, kernels", [
    (["bench", "--only", "ttft", "--kernels", "fast", "--problems", str(AIME2024)], "fast"),
    (["solve", "--kernels", "fast"], "fast"),
    (["deposit", "--problems", str(AIME2024), "--store", "store-test"], "certified"),
    # takes no --kernels: certified, whatever ran before in this process
    (["bench-long-context", "--problems", str(AIME2024)], "certified"),
])
def test_the_kernels_option_reaches_the_session_and_a_command_without_it_runs_certified(monkeypatch, arguments,
                                                                                        kernels):
    from typer.testing import CliRunner

    from graftbench.cli.app import app
    from graftbench.engine.torch import session as session_module
    from graftbench.engine.models import ModelError

    opened = []

    def stand_in(*args, **kwargs):
        opened.append(kwargs.get("kernels"))
        raise ModelError("stand-in: no model loaded")

    monkeypatch.setattr(session_module, "open_session", stand_in)
    runner = CliRunner()
    first = runner.invoke(app, ["bench", "--only", "ttft", "--kernels", "fast", "--problems", str(AIME2024)])
    assert opened == ["fast"] and "stand-in: no model loaded" in first.output, first.output  # fast first, really
    opened.clear()
    result = runner.invoke(app, [*arguments, "--model", "smollm2-135m", "--device", "cpu"])
    assert "stand-in: no model loaded" in result.output, result.output
    assert opened == [kernels]
