"""The recorded programs of committed program-mode runs, re-run in today's sandbox (its program environment), give
their recorded verdicts and stop reasons (no model).

The transfer baseline (60 programs) is replayed here; every committed program-mode manifest is replayed by
``make replay-programs`` into ``manifests/program-replays.jsonl`` (about 1,200 distinct programs: longer than the suite
should take), and that log is checked here: a line for each committed manifest at its current seal, in the program
environment, with no difference but the ones declared below with their reason."""

from __future__ import annotations

import glob
import json
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from graftbench.programs import replay as program_replay
from graftbench.programs.replay import LOG_SCHEMA, starved
from graftbench.programs.sandbox import ProgramResult
from graftbench.results.layout import PROGRAM_MANIFESTS, current_path
from graftbench.results.manifest import load_manifest, recorded_verifier_version
from graftbench.settings import SandboxLimits
from tests.conftest import REFERENCE_MANIFESTS
from tests.programs import sandbox_here

ROOT = Path(__file__).resolve().parents[2]
BASELINE = REFERENCE_MANIFESTS / "transfer-qwen2.5-coder-0.5b-program-baseline.json"
LOG = ROOT / "manifests" / "program-replays.jsonl"
LIMITS_OF_BASELINE = SandboxLimits(**load_manifest(BASELINE)["settings"]["sandbox"])
# Replayed programs whose outcome may differ from the record, by (manifest file name, sample), with why.
_NEAR_THE_LIMIT = ("print(47**7658112 % 569) takes about the CPU limit of 10 s: recorded once as finishing (262, "
                   "correct) and twice as timeout, so one run of it differs from one record or from two")
DECLARED: dict[tuple[str, str], str] = {
    (f"methods-qwen2.5-coder-1.5b-llama-f16-program-{arm}.json", "fermat-11#3"): _NEAR_THE_LIMIT
    for arm in ("graft", "other-family", "prompt")}


def replay_programs(path: Path, box) -> list:
    """The replay of the manifest at ``path`` in ``box`` (a :class:`graftbench.programs.sandbox.Sandbox`, or a
    stand-in with its ``run``) as ``graftbench replay-programs`` runs it: loaded and checked, judged under its
    recorded verifier version."""
    manifest = load_manifest(path)
    return program_replay.replay_programs(manifest, recorded_verifier_version(manifest), box, label=str(path))


def _no_program(program, limits):
    raise AssertionError("a program ran")


@pytest.mark.slow
def test_the_committed_program_baseline_replays_with_the_same_verdicts():
    replayed = replay_programs(BASELINE, sandbox_here())
    assert len(replayed) == 60
    assert [r.sample for r in replayed if not r.same_verdict] == []
    assert [r.sample for r in replayed if r.stopped != r.recorded_stopped] == []
    assert sum(r.verdict[1] for r in replayed) == 48


def _result(stdout: str, stopped: str | None, run_s: float, cpu_s: float) -> ProgramResult:
    return ProgramResult(exit_status=0 if stopped is None else -9, stdout=stdout, stdout_sha256="", stderr_tail="",
                         run_s=run_s, stopped=stopped, answer=None, isolation="fake", cpu_s=cpu_s)


def test_a_run_stopped_by_the_wall_clock_with_cpu_time_left_is_starved():
    limits = SandboxLimits(cpu_s=10, wall_s=20)
    assert starved(_result("", "timeout", 20.0, 4.9), limits)
    assert not starved(_result("", "timeout", 10.3, 9.95), limits)  # it used its CPU time
    assert not starved(_result("7\n", None, 20.0, 4.9), limits) and not starved(_result("", "crashed", 1, 0.1), limits)


def test_a_starved_program_recorded_as_finishing_is_judged_on_a_run_with_more_wall_time():
    """On a busy machine every first run is cut by the wall clock after 4 s of CPU; each program runs again with 12
    times cpu_s of wall time (its other limits unchanged) and is judged on that run."""
    recorded = {s["program"]: s for s in load_manifest(BASELINE)["samples"]}
    calls = []

    def busy_machine(program, limits):
        calls.append(limits)
        if limits.wall_s == 20:
            return _result("", "timeout", 20.0, 4.0)
        return _result(recorded[program]["stdout"], recorded[program]["stopped"], 30.0, 0.5)

    replayed = replay_programs(BASELINE, SimpleNamespace(run=busy_machine))
    assert len(replayed) == 60 and all(r.same and r.starved_s == 20.0 for r in replayed)
    assert [r.recorded_stopped for r in replayed].count(None) == 56  # and 4 crashed, as recorded
    assert {(c.wall_s, replace(c, wall_s=20)) for c in calls} == {(20, LIMITS_OF_BASELINE), (120, LIMITS_OF_BASELINE)}


def test_a_text_mode_manifest_is_not_replayed():
    with pytest.raises(ValueError, match="not a program-mode manifest"):
        replay_programs(REFERENCE_MANIFESTS / "transfer-smollm2-135m-baseline.json", SimpleNamespace(run=_no_program))


@pytest.mark.parametrize("name, value", [("memory_bytes", 1 << 40), ("processes", 100_000), ("wall_s", 1e9),
                                         ("output_bytes", 1 << 40), ("disk_bytes", 1 << 40), ("cpu_s", 86_400)])
def test_a_manifest_with_limits_looser_than_a_runs_is_refused_before_any_program_runs(tmp_path, monkeypatch, name,
                                                                                     value):
    """A manifest's seal is its own hash: one written by hand, with a program and ``settings.sandbox`` of its
    choosing, verifies, and replay-programs ran its programs under those limits (a terabyte of memory, 100,000
    processes, a day of CPU, output read into graftbench's memory without end). Limits looser than a graftbench
    run's are refused, naming the limit, before the sandbox opens; tighter ones are replayed as recorded."""
    from graftbench.api import replay_programs as replay
    from graftbench.programs.sandbox import DEFAULT_LIMITS
    from graftbench.results.manifest import check_manifest, seal_sha256, sealed_fields

    monkeypatch.setattr(program_replay, "open_sandbox", lambda: pytest.fail("the sandbox was opened"))
    body = {k: v for k, v in load_manifest(BASELINE).items() if k not in ("manifest_sha256", "sealed_fields")}
    body["settings"]["sandbox"][name] = value
    body["sealed_fields"] = sealed_fields(body)
    forged = {**body, "manifest_sha256": seal_sha256(body, body["schema"])}
    assert check_manifest(forged)[0] == []  # it verifies
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forged), encoding="utf-8")
    with pytest.raises(ValueError, match=f"looser than a graftbench run's [(]{name} {value!r} over"):
        replay([BASELINE, path])  # the committed baseline first: nothing of it runs either
    tighter = replace(DEFAULT_LIMITS, **{name: type(value)(1)})
    assert program_replay.replay_limits({"settings": {"sandbox": asdict(tighter)}}) == tighter


def test_every_committed_program_manifest_was_replayed_in_the_program_environment():
    records = [json.loads(line) for line in LOG.read_text(encoding="utf-8").splitlines()]
    assert {r["schema"] for r in records} == {LOG_SCHEMA}
    committed = sorted(glob.glob(PROGRAM_MANIFESTS, root_dir=ROOT))
    assert len(committed) == 26
    # The log is appended to: the last line of a manifest counts. Its older lines name a manifest by its earlier path.
    latest = {current_path(r["manifest"]): r for r in records}
    for name in committed:
        manifest = load_manifest(ROOT / name)
        record = latest.get(name)
        assert record is not None, f"{name} was never replayed (make replay-programs)"
        assert record["manifest_sha256"] == manifest["manifest_sha256"], f"{name} changed since its replay"
        assert record["programs"] == sum(isinstance(s.get("program"), str) for s in manifest["samples"])
        assert "read-only root holding only the program environment" in record["isolation"]
        differences = len(record["differences"])
        assert record["programs"] - record["same_verdict"] <= differences
        assert record["programs"] - record["same_stopped"] <= differences
        assert all(entry["starved_s"] >= manifest["settings"]["sandbox"]["wall_s"] for entry in record["starved"])
        undeclared = [d["sample"] for d in record["differences"] if (Path(name).name, d["sample"]) not in DECLARED]
        assert undeclared == [], f"{name}: programs whose verdict or stop reason changed: {undeclared}"


def test_a_damaged_manifest_or_an_unwritable_log_is_refused_before_any_program_runs(tmp_path, monkeypatch):
    """graftbench replay-programs checks every manifest (its seal and fields) and opens its log before it runs a
    program: an edited copy of the baseline, or a log that is a folder, exits 2 naming it, with nothing run."""
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    monkeypatch.setattr(program_replay, "open_sandbox", lambda: pytest.fail("the sandbox was opened"))
    edited = load_manifest(BASELINE)
    edited["samples"] = edited["samples"][:1]
    (tmp_path / "edited.json").write_text(json.dumps(edited), encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["replay-programs", str(BASELINE), str(tmp_path / "edited.json")])
    assert result.exit_code == 2 and "edited.json: does not verify" in result.output, result.output
    result = runner.invoke(app, ["replay-programs", "--log", str(tmp_path), str(BASELINE)])
    assert result.exit_code == 2 and "cannot append to the log" in result.output, result.output
