"""Energy: NVML on a CUDA device (tested with a fake ``pynvml`` where no GPU is present), RAPL or the declared
estimate on a CPU, and the method always named."""

from __future__ import annotations

import sys
import types

import pytest

from graftbench.util.energy import ESTIMATE_FORMULA, EnergyMeter, nvml_name


@pytest.fixture(autouse=True)
def every_gpu_visible(monkeypatch):
    """No CUDA_VISIBLE_DEVICES: CUDA's device N is NVML's device N (unless a test sets it)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


class FakeNVMLError(Exception):
    pass


def fake_pynvml(energy_mj: list[int], fail_on: str | None = None) -> types.ModuleType:
    """A stand-in for ``pynvml`` whose total-energy counter returns the next value of ``energy_mj`` each call."""
    module = types.ModuleType("pynvml")
    calls = {"handles": []}

    def maybe_fail(name):
        if name == fail_on:
            raise FakeNVMLError(name)

    module.NVMLError = FakeNVMLError
    module.nvmlInit = lambda: maybe_fail("init")

    def handle(index):
        maybe_fail("handle")
        calls["handles"].append(index)
        return f"gpu{index}"

    def energy(handle):
        maybe_fail("energy")
        return energy_mj.pop(0)

    module.nvmlDeviceGetHandleByIndex = handle
    module.nvmlDeviceGetTotalEnergyConsumption = energy
    module.calls = calls
    return module


def test_a_cuda_device_reads_nvml_in_joules(monkeypatch):
    fake = fake_pynvml([1_000, 5_000, 17_500])  # the first value is the availability probe
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    meter = EnergyMeter(device="cuda:1")
    assert fake.calls["handles"] == [1]
    assert meter.describe() == {"method": "nvml", "detail": "NVML total energy of cuda:1", "measured": True}
    before = meter.read()
    assert meter.read() - before == pytest.approx(12.5)  # (17,500 - 5,000) mJ


@pytest.mark.parametrize("fail_on", ["init", "handle", "energy"])
def test_nvml_that_cannot_count_falls_back_to_a_named_method(monkeypatch, fail_on):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([1, 2], fail_on=fail_on))
    meter = EnergyMeter(device="cuda", prefer=None)
    assert meter.method.name in {"rapl", "estimate"}


def test_without_pynvml_a_cuda_device_falls_back(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert EnergyMeter(device="cuda:0").method.name in {"rapl", "estimate"}


def test_a_cpu_device_never_asks_nvml(monkeypatch):
    fake = fake_pynvml([1, 2])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    EnergyMeter(device="cpu")
    assert fake.calls["handles"] == []


def test_the_estimate_declares_its_formula_and_counts_cpu_seconds():
    meter = EnergyMeter(prefer="estimate")
    assert meter.describe() == {"method": "estimate", "detail": ESTIMATE_FORMULA, "measured": False}
    before = meter.read()
    sum(i * i for i in range(2_000_000))  # some CPU time
    assert meter.read() > before


def test_the_ttft_rows_meter_the_gpu_the_model_is_on_and_none_on_the_cpu(monkeypatch):
    from types import SimpleNamespace

    from graftbench.bench.ttft import ttft_meter

    fake = fake_pynvml([0, 2_000, 2_750])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    meter = ttft_meter(SimpleNamespace(device="cuda:2"))
    assert fake.calls["handles"] == [2] and meter.describe()["detail"] == "NVML total energy of cuda:2"
    before = meter.read()
    assert meter.read() - before == pytest.approx(0.75)  # (2,750 - 2,000) mJ
    assert ttft_meter(SimpleNamespace(device="cpu")) is None and fake.calls["handles"] == [2]


def test_a_session_names_the_device_its_weights_are_on():
    from types import SimpleNamespace

    import torch

    from graftbench.engine.torch.session import TorchSession

    def on(device):
        return TorchSession(SimpleNamespace(model=SimpleNamespace(device=device)), config=None, eos_ids=set())

    assert on(torch.device("cuda", 1)).device == "cuda:1" and on(torch.device("cpu")).device == "cpu"


def test_cuda_numbers_the_visible_devices_and_nvml_all_of_them():
    assert nvml_name("cuda:1", "") == 1 and nvml_name("cuda", "") == 0
    assert nvml_name("cuda:1", "3,5") == 5 and nvml_name("cuda", "GPU-8c1f") == "GPU-8c1f"
    with pytest.raises(IndexError):
        nvml_name("cuda:2", "0,1")


def test_a_worker_given_one_gpu_meters_that_gpu(monkeypatch):
    fake = fake_pynvml([0, 1_000, 1_500])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")  # as Ray sets it for a worker holding GPU 4
    meter = EnergyMeter(device="cuda:0")
    assert fake.calls["handles"] == [4] and meter.method.name == "nvml"
    by_uuid = fake_pynvml([0])
    by_uuid.nvmlDeviceGetHandleByUUID = lambda uuid: by_uuid.calls["handles"].append(uuid) or uuid
    monkeypatch.setitem(sys.modules, "pynvml", by_uuid)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8c1f,GPU-77aa")
    assert EnergyMeter(device="cuda:1").method.name == "nvml" and by_uuid.calls["handles"] == ["GPU-77aa"]
