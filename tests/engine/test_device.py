"""--device: names, resolution against a stand-in torch.cuda, and the option on the commands that run a model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.engine.device import DeviceError, check_name, default_dtype, dtype_for, kind, resolve
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


def test_auto_dtype_is_float32_on_the_cpu_and_bfloat16_on_cuda():
    assert dtype_for("auto", "cpu") == "float32"
    assert dtype_for("auto", "cuda") == "bfloat16" and dtype_for("auto", "cuda:3") == "bfloat16"
    assert dtype_for("auto", "auto", cuda=fake_cuda(1)) == "bfloat16"
    assert dtype_for("auto", "auto", cuda=fake_cuda(0)) == "float32"
    assert dtype_for("float32", "cuda") == "float32" and dtype_for("bfloat16", "cpu") == "bfloat16"
    with pytest.raises(DeviceError, match="'gpu' is not one of"):
        dtype_for("auto", "gpu")


class _Loaded(Exception):
    """Raised by the stand-in loader: the load was asked for (with these arguments) and the test ends there."""


def _stand_in_loader(monkeypatch, calls: list[dict], gpus: int):
    """torch.cuda as a machine with ``gpus`` GPUs, and a loader that records its arguments instead of loading."""
    import torch

    import graftbench.engine.torch.session as session_module
    from graftbench.engine.models import ModelError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)

    def load(model, dtype, chunk_size, threads=None, device="cpu", **_):
        calls.append({"dtype": dtype, "device": device})
        raise ModelError("stand-in loader: not loaded")

    monkeypatch.setattr(session_module, "open_session", load)


def _command_args(command: str, tmp_path) -> list[str]:
    """Arguments that bring ``command`` to its model load."""
    problems = ["--problems", str(AIME2024)]
    runs = ["--runs-dir", str(tmp_path / "runs")]
    return {
        "solve": problems + runs + ["--limit", "1"],
        "eval": problems + runs + ["--limit", "1"],
        "deposit": problems + ["--limit", "1", "--store", str(tmp_path / "store")],
        "run": runs + ["--store", str(tmp_path / "store")],
        "flywheel": runs + ["--store", str(tmp_path / "store")],
        "check-exact": ["--model", "random:gemma3-reduced", "--samples", "1"] + problems + runs,
        "bench": ["--model", "random:gemma3-reduced", "--only", "ttft"] + problems + ["--out", str(tmp_path)],
        "bench-long-context": ["--model", "random:gemma3-reduced", "--problems", str(AIME2024),
                               "--store", str(tmp_path / "lc"), "--out", str(tmp_path)],
    }[command]


COMMANDS = ["solve", "eval", "deposit", "run", "flywheel", "check-exact", "bench", "bench-long-context"]


@pytest.mark.parametrize("command", COMMANDS)
def test_the_default_dtype_follows_the_device_on_every_command(command, tmp_path, monkeypatch):
    calls: list[dict] = []
    _stand_in_loader(monkeypatch, calls, gpus=1)
    args = [command] + _command_args(command, tmp_path)
    for extra, expected in ((["--device", "auto"], {"dtype": "bfloat16", "device": "cuda:0"}),
                            (["--device", "cpu"], {"dtype": "float32", "device": "cpu"}),
                            (["--device", "cuda", "--dtype", "float32"], {"dtype": "float32", "device": "cuda:0"}),
                            (["--device", "cpu", "--dtype", "bfloat16"], {"dtype": "bfloat16", "device": "cpu"})):
        result = runner.invoke(app, args + extra)
        assert result.exit_code == 2 and "stand-in loader: not loaded" in _text(result), _text(result)
        assert calls.pop() == expected


def test_without_a_gpu_auto_is_the_cpu_in_float32(tmp_path, monkeypatch):
    calls: list[dict] = []
    _stand_in_loader(monkeypatch, calls, gpus=0)
    result = runner.invoke(app, ["check-exact"] + _command_args("check-exact", tmp_path))
    assert result.exit_code == 2 and calls == [{"dtype": "float32", "device": "cpu"}]
