"""--device: names, resolution against a stand-in torch.cuda, and the option on the commands that run a model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.engine.device import DeviceError, check_name, default_dtype, kind, resolve
from tests.conftest import AIME2024

runner = CliRunner()


def _text(result) -> str:
    """The output as one line of words (the error box's borders and wrapping removed)."""
    return " ".join(result.output.replace("│", " ").split())


def fake_cuda(count: int):
    return SimpleNamespace(is_available=lambda: count > 0, device_count=lambda: count)


def test_auto_is_cuda_when_torch_sees_a_gpu_else_the_cpu():
    assert resolve("auto", cuda=fake_cuda(2)) == "cuda:0"
    assert resolve("auto", cuda=fake_cuda(0)) == "cpu"
    assert resolve("cpu", cuda=fake_cuda(2)) == "cpu"
    assert resolve("cuda", cuda=fake_cuda(1)) == "cuda:0"
    assert resolve("cuda:1", cuda=fake_cuda(2)) == "cuda:1"


def test_a_missing_cuda_device_is_named():
    with pytest.raises(DeviceError, match=r"'cuda:2' is not available: this machine has 2 CUDA"):
        resolve("cuda:2", cuda=fake_cuda(2))
    with pytest.raises(DeviceError, match="torch sees no CUDA"):
        resolve("cuda", cuda=fake_cuda(0))


def test_bad_names_are_refused_and_kinds_and_dtypes_follow_the_device():
    for name in ("gpu", "cuda:", "cuda:x", "CPU", "mps"):
        with pytest.raises(DeviceError, match="is not one of auto, cpu, cuda, cuda:N"):
            check_name(name)
    assert kind("cuda:3") == "cuda" and kind("cpu") == "cpu"
    assert default_dtype("cuda:0") == "bfloat16" and default_dtype("cpu") == "float32"


@pytest.mark.parametrize("command", ["solve", "eval", "deposit", "run", "flywheel", "check-exact", "bench",
                                     "bench-long-context"])
def test_every_command_that_runs_a_model_takes_device(command):
    result = runner.invoke(app, [command, "--device", "gpu"])
    assert result.exit_code == 2 and "'--device'" in _text(result) and "'gpu' is not one of" in _text(result)


def test_a_cuda_device_on_a_machine_without_one_fails_in_one_line(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = runner.invoke(app, ["check-exact", "--model", "random:gemma3-reduced", "--device", "cuda", "--samples",
                                 "1", "--problems", str(AIME2024), "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2 and "device 'cuda' is not available: this machine has 0 CUDA" in _text(result)
