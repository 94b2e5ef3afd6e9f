"""The prepared GPU script, step by step on the CPU with the reduced Gemma 3 config: check-exact, the replay in a
second process, TTFT graft against chunked prefill (the controls' cost is the committed CPU certificate's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import AIME2024

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_every_step_of_make_gpu_certify_runs_on_the_cpu(tmp_path):
    out, bench = tmp_path / "manifests", tmp_path / "bench"
    variables = {
        "GPU_PY": sys.executable, "GPU_PYTHONPATH": str(ROOT), "GPU_CACHE": "", "GPU_DEVICE": "cpu",
        "GPU_DTYPE": "float32",
        "GPU_MODELS": "random:gemma3-reduced", "GPU_TIMEOUTS": "1200", "GPU_PAIRS": "1", "GPU_CONTROL_PAIRS": "0",
        "GPU_REPLAY": "1", "GPU_REPLAY_TIMEOUT": "1200", "GPU_TTFT_MODEL": "random:gemma3-reduced",
        "GPU_TTFT_SIZES": "64", "GPU_TTFT_TIMEOUT": "1200", "GPU_PROBLEMS": str(AIME2024), "GPU_OUT": str(out),
        "GPU_BENCH": str(bench), "GPU_RUNS": str(tmp_path / "runs"),
        "GPU_REPLAY_LOG": str(out / "replays.jsonl"),
    }
    result = subprocess.run(["make", "-s", "gpu-certify", *(f"{k}={v}" for k, v in variables.items())], cwd=ROOT,
                            capture_output=True, text=True, env={**os.environ, "GRAFTBENCH_DEVICE": "cpu"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "random:gemma3-reduced check-exact: exit 0" in result.stdout
    assert "random:gemma3-reduced replay in a second process: exit 0" in result.stdout
    assert "ttft: exit 0" in result.stdout
    expectation = json.loads((out / "exact-random-gemma3-reduced.json").read_text())
    assert expectation["totals"]["exact_pairs"] == expectation["totals"]["pairs"] == 1
    assert expectation["config"]["random_weights"]["config"] == "gemma3-reduced"
    assert expectation["settings"]["controls"] is True  # the flag the GPU run passes (0 control pairs here: time)
    replay = json.loads((out / "replays.jsonl").read_text().splitlines()[-1])
    assert (replay["compared"], replay["equal"]) == (1, 1)
    ttft = json.loads((bench / "ttft-random_gemma3-reduced.json").read_text())
    assert [row["tokens"] for row in ttft["ttft"]] == [64] and all(ttft["ttft"][0]["logits_equal"].values())
    assert "random weights: architecture only" in ttft["environment"]["model"]


def _plan(tmp_path, **variables) -> str:
    """The commands experiments/gpu_certify.sh would run (GPU_DRY_RUN), through ``make gpu-certify``."""
    variables = {"GPU_PY": sys.executable, "GPU_PYTHONPATH": str(ROOT), "GPU_PROBLEMS": str(AIME2024),
                 "GPU_OUT": str(tmp_path / "manifests"), "GPU_BENCH": str(tmp_path / "bench"), "GPU_DRY_RUN": "1",
                 **variables}
    return subprocess.run(["make", "-s", "gpu-certify", *(f"{k}={v}" for k, v in variables.items())], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout


def test_the_prepared_script_runs_cuda_in_bfloat16_by_default(tmp_path):
    plan = _plan(tmp_path).splitlines()
    assert plan[0].startswith("device cuda, dtype bfloat16")
    # GPU_CACHE not given: the carry's tokenizer cache (make must not export it as empty)
    assert all(f"GRAFTBENCH_CACHE={ROOT}/.gpu-carry/cache " in line for line in plan if "app()" in line)
    checks = [line for line in plan if " check-exact --model " in line]
    assert [line.split("--model ")[1].split()[0] for line in checks] == [
        "random:gemma3-12b", "random:qwen2.5-7b", "random:gemma3-27b"]
    assert [line.split()[1] for line in checks] == ["240", "150", "200"]
    assert all("--device cuda --dtype auto --samples 50 --controls --control-pairs 5" in line for line in checks)
    assert f"--write-expect {tmp_path}/manifests/exact-random-gemma3-12b-bf16.json" in checks[0]
    replays = [line for line in plan if "--expect " in line]
    assert len(replays) == 3 and all(line.split()[1] == "45" and "--limit 3" in line for line in replays)
    assert all(line.endswith("--log results/replays.jsonl > " + line.rsplit("> ", 1)[1]) for line in replays)
    ttft = [line for line in plan if "bench --only ttft" in line]
    assert len(ttft) == 1 and "--model random:gemma3-12b --device cuda --dtype auto --sizes 8192,32768" in ttft[0]
    assert ttft[0].split()[1] == "80"


def test_the_prepared_script_names_float32_files_without_a_marker_and_reuses_the_last_timeout(tmp_path):
    plan = _plan(tmp_path, GPU_DEVICE="cpu", GPU_MODELS="random:gemma3-reduced random:gemma3-1b random:qwen2.5-7b",
                 GPU_TIMEOUTS="30 20").splitlines()
    checks = [line for line in plan if " check-exact --model " in line]
    assert [line.split()[1] for line in checks] == ["30", "20", "20"]
    assert f"--write-expect {tmp_path}/manifests/exact-random-gemma3-reduced.json" in checks[0]


def test_the_prepared_script_needs_no_make():
    script = (ROOT / "experiments" / "gpu_certify.sh").read_text()
    assert "make " not in script.replace("make gpu-carry", "").replace("make gpu-certify", "")


def test_a_model_whose_expectation_is_committed_is_replayed_only(tmp_path):
    calls = tmp_path / "calls.txt"
    fake_python = tmp_path / "python"  # answers the dtype query (dtype, marker), logs each command line
    fake_python.write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho bfloat16 -bf16\n')
    fake_python.chmod(0o755)
    out = tmp_path / "manifests"
    out.mkdir()
    (out / "exact-random-gemma3-12b-bf16.json").write_text("{}")
    result = subprocess.run(
        ["bash", str(ROOT / "experiments" / "gpu_certify.sh")], capture_output=True, text=True,
        env={**os.environ, "GPU_PY": str(fake_python), "GPU_PROBLEMS": str(AIME2024), "GPU_OUT": str(out),
             "GPU_BENCH": str(tmp_path / "bench"), "GPU_MODELS": "random:gemma3-12b random:qwen2.5-7b",
             "GPU_REPLAY_LOG": str(tmp_path / "replays.jsonl")})
    assert result.returncode == 0, result.stderr
    assert f"random:gemma3-12b check-exact: {out}/exact-random-gemma3-12b-bf16.json is there, replayed only" in \
        result.stdout
    commands = [line.split("app()", 1)[1].split()[:2] for line in calls.read_text().splitlines() if "app()" in line]
    assert commands == [["check-exact", "--expect"], ["check-exact", "--model"], ["bench", "--only"]]


def test_a_failed_step_makes_the_script_fail_after_the_others_ran(tmp_path):
    fake_python = tmp_path / "python"  # the dtype query answers (dtype and marker); check-exact fails; bench passes
    fake_python.write_text('#!/bin/sh\ncase "$*" in *check-exact*) exit 3 ;; esac\necho bfloat16 -bf16\n')
    fake_python.chmod(0o755)
    result = subprocess.run(
        ["bash", str(ROOT / "experiments" / "gpu_certify.sh")], capture_output=True, text=True,
        env={**os.environ, "GPU_PY": str(fake_python), "GPU_PROBLEMS": str(AIME2024), "GPU_OUT": str(tmp_path / "m"),
             "GPU_BENCH": str(tmp_path / "b"), "GPU_MODELS": "random:gemma3-12b random:qwen2.5-7b"})
    assert result.returncode == 1 and "2 step(s) failed or were cut by their timeout" in result.stderr
    assert "random:qwen2.5-7b check-exact: exit 3" in result.stdout and "ttft: exit 0" in result.stdout
