"""The prepared GPU window (experiments/gpu_certify.sh, ``make gpu-certify``): its plan, its one archive rewritten
after every step, a step killed by its timeout, the window's budget, and the whole window rehearsed on the CPU with
tiny random configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import AIME2024

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "gpu_certify.sh"

# A stand-in for the host's Python: answers the dtype query, and for each graftbench command writes the file that
# command would write (named from its own arguments), after sleeping GPU_FAKE_SLEEP_<STEP> seconds; during the
# step named by GPU_FAKE_SNAPSHOT it first copies the archive as it is then, to show what a cut leaves.
FAKE_PYTHON = '''#!{python}
import os, shutil, sys, time
args = sys.argv[1:]
code = args[1] if args[:1] == ["-c"] else ""
if "dtype_for" in code:
    print("bfloat16 -bf16"); sys.exit(0)
with open(os.environ["GPU_FAKE_CALLS"], "a") as calls:
    calls.write(" ".join(args[2:]) + "\\n")
def value(flag):
    return args[args.index(flag) + 1] if flag in args else None
step = ("check-exact" if "--write-expect" in args else "replay" if "--expect" in args
        else value("--only") + ("-" + value("--kernels") if value("--kernels") else ""))
if os.environ.get("GPU_FAKE_SNAPSHOT") == step:
    shutil.copy(os.environ["GPU_ARCHIVE"], os.environ["GPU_FAKE_SNAPSHOT_TO"])
time.sleep(float(os.environ.get("GPU_FAKE_SLEEP_" + step.split("-")[0].upper(), "0")))
if os.environ.get("GPU_FAKE_FAIL") == step:
    sys.exit(3)
if step == "check-exact":
    target = value("--write-expect")
elif step == "replay":
    target = value("--log")
else:
    target = os.path.join(value("--out"), step + ".json")
with open(target, "a") as out:
    out.write('{{"step": "%s"}}\\n' % step)
'''


def _fake_python(tmp_path: Path) -> Path:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    return fake


def _window(tmp_path: Path, **variables) -> subprocess.CompletedProcess:
    """The script run directly (as the GPU host runs it) with the stand-in Python and every output under
    ``tmp_path``."""
    env = {**os.environ, "GPU_PY": str(_fake_python(tmp_path)), "GPU_PROBLEMS": str(AIME2024),
           "GPU_OUT": str(tmp_path / "manifests"), "GPU_BENCH": str(tmp_path / "bench"),
           "GPU_RUNS": str(tmp_path / "runs"), "GPU_LOGS": str(tmp_path / "logs"),
           "GPU_REPLAY_LOG": str(tmp_path / "replays.jsonl"), "GPU_ARCHIVE": str(tmp_path / "window.tar.gz"),
           "GPU_REPLAY_EXPECT": str(SCRIPT), "GPU_FAKE_CALLS": str(tmp_path / "calls.txt"), **variables}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300)


def _members(archive: Path) -> dict[str, bytes]:
    """Every file in ``archive`` by its path's last two parts (folder/name), with its bytes."""
    with tarfile.open(archive) as tar:
        return {"/".join(Path(m.name).parts[-2:]): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _steps(members: dict[str, bytes]) -> list[list[str]]:
    return [line.split("\t") for line in members["logs/steps.tsv"].decode().splitlines()[1:]]


def test_every_finished_step_is_in_the_one_archive(tmp_path):
    result = _window(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in tmp_path.glob("*.tar.gz*")) == ["window.tar.gz"]  # no temporary left
    members = _members(tmp_path / "window.tar.gz")
    assert {"manifests/exact-random-qwen2.5-7b-bf16.json", "manifests/exact-random-gemma3-27b-bf16.json",
            "bench/ttft.json", "bench/energy.json", "bench/sample-counts-certified.json",
            "bench/sample-counts-fast.json"} <= set(members)
    assert json.loads(members[f"{tmp_path.name}/replays.jsonl"]) == {"step": "replay"}
    assert [(row[0], row[1]) for row in _steps(members)] == [
        ("certificate random:qwen2.5-7b", "done"), ("certificate random:gemma3-27b", "done"), ("ttft", "done"),
        ("energy", "done"), ("replay 3:20", "done"), ("sample-counts certified", "done"),
        ("sample-counts fast", "done")]


def test_a_step_killed_by_its_timeout_leaves_the_earlier_steps_intact(tmp_path):
    """The TTFT step outlives its timeout: while it runs the archive already holds both certificates, and after it
    the archive holds them, the later steps' results, and the step table saying which step was cut."""
    snapshot = tmp_path / "during-ttft.tar.gz"
    result = _window(tmp_path, GPU_TTFT_TIMEOUT="2", GPU_FAKE_SLEEP_TTFT="60", GPU_FAKE_SNAPSHOT="ttft",
                     GPU_FAKE_SNAPSHOT_TO=str(snapshot))
    assert result.returncode == 1 and "1 step(s) failed or were cut by their timeout" in result.stderr
    during = _members(snapshot)
    assert {"manifests/exact-random-qwen2.5-7b-bf16.json", "manifests/exact-random-gemma3-27b-bf16.json"} <= set(during)
    assert "bench/ttft.json" not in during and [r[0] for r in _steps(during)] == [
        "certificate random:qwen2.5-7b", "certificate random:gemma3-27b"]
    after = _members(tmp_path / "window.tar.gz")
    assert after["manifests/exact-random-qwen2.5-7b-bf16.json"] == during["manifests/exact-random-qwen2.5-7b-bf16.json"]
    assert "bench/ttft.json" not in after and "bench/energy.json" in after
    ttft = next(row for row in _steps(after) if row[0] == "ttft")
    assert ttft[1:3] == ["cut by its timeout", "124"] and 2 <= int(ttft[3]) < 30


def test_the_window_budget_cuts_the_steps_past_it_and_says_so(tmp_path):
    """An 8 s window, 6 s at least per step, a 3 s first step. bash's SECONDS counts whole-second ticks, so the first
    step starts with 6 to 8 s left (the set-up takes under 2 s) and is cut to that (from 150 s), which leaves it
    3 s or more beyond its sleep for the fake Python to start on a loaded machine; after it at most 5 s are left,
    under the 6 s a step needs, so no later step starts."""
    result = _window(tmp_path, GPU_BUDGET="8", GPU_MIN_STEP="6", GPU_FAKE_SLEEP_CHECK="3")
    assert result.returncode == 0, result.stderr
    rows = _steps(_members(tmp_path / "window.tar.gz"))
    assert rows[0][:2] == ["certificate random:qwen2.5-7b", "done"] and rows[0][4] in ("6", "7", "8")  # 150 s cut
    assert all(row[1].startswith("not run: ") and row[1].endswith(" s of the window left") for row in rows[1:])
    assert len(rows) == 7


def test_a_failed_step_fails_the_window_after_the_others_ran(tmp_path):
    result = _window(tmp_path, GPU_FAKE_FAIL="energy")
    assert result.returncode == 1 and "1 step(s) failed or were cut by their timeout" in result.stderr
    rows = {row[0]: row[1:3] for row in _steps(_members(tmp_path / "window.tar.gz"))}
    assert rows["energy"] == ["failed", "3"] and rows["sample-counts fast"] == ["done", "0"]


def test_a_committed_certificate_is_not_measured_again(tmp_path):
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "exact-random-qwen2.5-7b-bf16.json").write_text("{}")
    result = _window(tmp_path)
    assert result.returncode == 0, result.stderr
    rows = _steps(_members(tmp_path / "window.tar.gz"))
    assert rows[0][1] == f"present: {tmp_path}/manifests/exact-random-qwen2.5-7b-bf16.json"
    calls = (tmp_path / "calls.txt").read_text()
    assert calls.count("--write-expect") == 1 and "random:gemma3-27b" in calls


def _plan(tmp_path, **variables) -> list[str]:
    """The commands experiments/gpu_certify.sh would run (GPU_DRY_RUN), through ``make gpu-certify``."""
    variables = {"GPU_PY": str(_fake_python(tmp_path)), "GPU_PYTHONPATH": str(ROOT), "GPU_PROBLEMS": str(AIME2024),
                 "GPU_OUT": str(tmp_path / "manifests"), "GPU_BENCH": str(tmp_path / "bench"),
                 "GPU_LOGS": str(tmp_path / "logs"), "GPU_RUNS": str(tmp_path / "runs"), "GPU_DRY_RUN": "1",
                 **variables}
    return subprocess.run(["make", "-s", "gpu-certify", *(f"{k}={v}" for k, v in variables.items())], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.splitlines()


def test_the_window_runs_the_steps_in_order_within_nine_minutes(tmp_path):
    plan = _plan(tmp_path)
    assert plan[0].startswith("device cuda, dtype bfloat16")
    commands = [line for line in plan if "app()" in line]
    # GPU_CACHE not given: the carry's tokenizer cache (make must not export it as empty)
    assert all(f"GRAFTBENCH_CACHE={ROOT}/.gpu-carry/cache " in line for line in commands)
    what = [line.split("app()", 1)[1].split(" > ")[0].split() for line in commands]
    assert [w[0] + " " + (w[2] if w[1] in ("--model", "--expect", "--only") else w[1]) for w in what] == [
        "check-exact random:qwen2.5-7b", "check-exact random:gemma3-27b", "bench ttft", "bench energy",
        "check-exact manifests/nvidia-h200/exact-random-gemma3-12b-bf16.json",
        "bench sample-counts", "bench sample-counts"]
    limits = [int(line.split()[1]) for line in commands]
    assert limits == [150, 200, 120, 60, 90, 60, 60]
    assert sum(limits[:3]) <= 540  # the three steps that must come back fit the window
    assert "--samples 20 --controls --control-pairs 5" in commands[0] and "--samples 10 --controls --control-pairs 3" \
        in commands[1]
    assert "--model random:gemma3-12b --device cuda --dtype auto --sizes 8192,32768" in commands[2]
    assert "--no-memory-probes" in commands[2] and "--sizes 8192 --decode-tokens 64" in commands[3]
    assert "--pairs 3:20 --problems " in commands[4] and "--device cuda --log manifests/replays.jsonl" in commands[4]
    assert "--kernels certified" in commands[5] and "--kernels fast" in commands[6]


def test_the_window_names_float32_files_without_a_marker(tmp_path):
    fake = tmp_path / "float32-python"
    fake.write_text("#!/bin/sh\necho float32\n")
    fake.chmod(0o755)
    plan = _plan(tmp_path, GPU_PY=str(fake), GPU_DEVICE="cpu", GPU_CERTIFICATES="random:gemma3-reduced/2/1/30")
    checks = [line for line in plan if " check-exact --model " in line]
    assert len(checks) == 1 and checks[0].split()[1] == "30"
    assert f"--write-expect {tmp_path}/manifests/exact-random-gemma3-reduced.json" in checks[0]


def test_the_window_needs_no_make():
    script = SCRIPT.read_text()
    assert "make " not in script.replace("make gpu-carry", "").replace("make gpu-certify", "")


SOLUTION_CHARS = 300  # characters of each worked solution kept in the whole-window rehearsal's problems


@pytest.mark.slow
def test_the_whole_window_runs_on_the_cpu_with_tiny_random_configs(tmp_path):
    """Every step for real on the CPU (float32, ``random:gemma3-reduced``): the certificate, TTFT, energy (the
    declared estimate or RAPL here), the replay of pair 1 of the certificate just written, and the sample counts
    under both kernel configurations; the archive holds each step's result. The problems are AIME 2024's with each
    worked solution cut to ``SOLUTION_CHARS`` characters: what is asked of each step is that it runs and writes its
    result, the same at any pair length (the ``random:gemma3-reduced`` artifacts still cross its 64-token window),
    and the certificate's pairs and its controls are then a few times shorter to compute."""
    out = tmp_path / "manifests"
    problems = tmp_path / "aime2024-short.jsonl"
    rows = [json.loads(line) for line in AIME2024.read_text().splitlines()]
    problems.write_text("".join(json.dumps({**row, "solution": row["solution"][:SOLUTION_CHARS]}) + "\n"
                                for row in rows))
    reduced = "random:gemma3-reduced"
    variables = {
        "GPU_PY": sys.executable, "GPU_PYTHONPATH": str(ROOT), "GPU_CACHE": "", "GPU_DEVICE": "cpu",
        "GPU_DTYPE": "float32", "GPU_BUDGET": "100000", "GPU_CERTIFICATES": f"{reduced}/2/1/1200",
        "GPU_TTFT_MODEL": reduced, "GPU_TTFT_SIZES": "64", "GPU_TTFT_TIMEOUT": "1200", "GPU_ENERGY_TOKENS": "64",
        "GPU_ENERGY_DECODE": "4", "GPU_ENERGY_REPEATS": "1", "GPU_ENERGY_TIMEOUT": "1200",
        "GPU_REPLAY_EXPECT": str(out / "exact-random-gemma3-reduced.json"), "GPU_REPLAY_PAIRS": "1:2",
        "GPU_REPLAY_TIMEOUT": "1200", "GPU_COUNTS_TOKENS": "64", "GPU_COUNTS_DECODE": "3",
        "GPU_COUNTS_TIMEOUT": "1200", "GPU_PROBLEMS": str(problems), "GPU_OUT": str(out),
        "GPU_BENCH": str(tmp_path / "bench"), "GPU_RUNS": str(tmp_path / "runs"), "GPU_LOGS": str(tmp_path / "logs"),
        "GPU_REPLAY_LOG": str(tmp_path / "replays.jsonl"), "GPU_ARCHIVE": str(tmp_path / "window.tar.gz"),
    }
    result = subprocess.run(["make", "-s", "gpu-certify", *(f"{k}={v}" for k, v in variables.items())], cwd=ROOT,
                            capture_output=True, text=True, env={**os.environ, "GRAFTBENCH_DEVICE": "cpu"})
    logs = "".join(p.read_text() for p in sorted((tmp_path / "logs").glob("*.log")))
    assert result.returncode == 0, result.stdout + result.stderr + logs
    members = _members(tmp_path / "window.tar.gz")
    assert all(row[1] == "done" for row in _steps(members)) and len(_steps(members)) == 6
    expectation = json.loads(members["manifests/exact-random-gemma3-reduced.json"])
    assert expectation["totals"]["exact_pairs"] == expectation["totals"]["pairs"] == 2
    assert expectation["settings"]["controls"] is True and expectation["config"]["random_weights"]["config"] == \
        "gemma3-reduced"
    replay = json.loads(members[f"{tmp_path.name}/replays.jsonl"].decode().splitlines()[-1])
    assert (replay["compared"], replay["equal"], replay["first_pair"]) == (1, 1, 1)
    ttft = json.loads(members["bench/ttft-random_gemma3-reduced.json"])
    assert [row["tokens"] for row in ttft["ttft"]] == [64] and all(ttft["ttft"][0]["logits_equal"].values())
    assert "graft_memory" not in ttft["ttft"][0]  # --no-memory-probes
    energy = json.loads(members["bench/energy-random_gemma3-reduced.json"])["energy_per_token"]
    assert energy["windows"]["prefill"]["count"] == 64 and energy["windows"]["decode"]["count"] == 4
    certified = json.loads(members["bench/sample-counts-random_gemma3-reduced.json"])
    fast = json.loads(members["bench/sample-counts-random_gemma3-reduced-fast.json"])
    assert [r["samples"] for r in certified["sample_counts"]["rows"]] == [1, 4, 16]
    assert (certified["sample_counts"]["kernels"], fast["sample_counts"]["kernels"]) == ("certified", "fast")
    assert fast["environment"]["kernels"] == "fast" and "kernels" not in certified["environment"]
    assert fast["environment"]["config_fingerprint"] != certified["environment"]["config_fingerprint"]
