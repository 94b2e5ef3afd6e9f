"""Re-run the recorded programs of program-mode manifests in today's sandbox and compare their verdicts and stop
reasons with the recorded ones: a check that a change of sandbox (its program environment included) changed no
program's outcome. No model; imports no torch.

This module reads manifests as the dicts a caller loaded (``graftbench replay-programs`` loads and checks them with
:mod:`graftbench.results.manifest`, the layer above): :func:`replay_programs` replays one; :func:`replay_manifests`
(``make replay-programs``) replays many, running each distinct program text once per set of limits (a program
recorded in several manifests, e.g. the flywheel's rounds, is judged against each record from the one run), and
appends one line per manifest to a log (:data:`LOG_SCHEMA`).

The CPU-time, memory and output limits are the manifest's own. So is the wall-time limit, except for a program
whose run here the wall clock stopped with CPU time left (:func:`starved`: a busy machine gave it less than a CPU):
it runs once more with a longer wall time, and both runs are logged. A manifest whose limits are looser than a
graftbench run's (:data:`graftbench.programs.sandbox.DEFAULT_LIMITS`, what every run records) is refused: its seal
is its own hash, so a manifest written by hand verifies with any limits, and would otherwise set the sandbox's.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

from .mode import program_verdict, sample_verdict
from .sandbox import DEFAULT_LIMITS, ProgramResult, Sandbox, open_sandbox
from ..settings import SandboxLimits
from ..util import isa
from ..util.provenance import code_version

LOG_SCHEMA = "graftbench.program-replay/1"
STARVED_CPU_SHARE = 0.9  # a timeout with under this share of cpu_s used came from the wall clock on a busy machine
STARVED_WALL_FACTOR = 12  # a starved run's second try has a wall-time limit of this many times cpu_s


@dataclass(frozen=True)
class Replayed:
    """One recorded program run again: its sample (``problem_id#sample_index``), the recorded and the new
    ``stopped`` reason, the recorded and the new verdict (``extracted``, ``correct``), the recorded and the new
    wall seconds (``recorded_program_s``, ``program_s``: near a time limit, a run may end on either side) and the
    new run's CPU seconds (``cpu_s``); ``starved_s``: the wall seconds of a first run :func:`starved` by a busy
    machine (``None`` when there was none), after which the outcome compared is a run with more wall time."""

    sample: str
    recorded_stopped: str | None
    stopped: str | None
    recorded: tuple[str | None, bool]
    verdict: tuple[str | None, bool]
    recorded_program_s: float | None = None
    program_s: float | None = None
    cpu_s: float | None = None
    starved_s: float | None = None

    @property
    def same_verdict(self) -> bool:
        return self.recorded == self.verdict

    @property
    def same(self) -> bool:
        """The same verdict and the same stop reason."""
        return self.same_verdict and self.stopped == self.recorded_stopped


def starved(result: ProgramResult, limits: SandboxLimits) -> bool:
    """Whether a run was stopped by the wall clock with CPU time left (under :data:`STARVED_CPU_SHARE` of
    ``cpu_s`` used): on a busy machine a program gets less than a CPU, and the wall-time limit then measures the
    machine, not the program."""
    return result.stopped == "timeout" and result.cpu_s < STARVED_CPU_SHARE * limits.cpu_s


def replay_limits(manifest: dict, label: str = "the manifest") -> SandboxLimits:
    """The sandbox limits ``manifest`` (a loaded manifest's dict, named ``label`` in errors) recorded, which its
    programs are replayed under. Raises ``ValueError`` for a manifest of no program (its settings record no
    ``sandbox`` limits), for limits a run does not record, and for limits looser than a graftbench run's
    (:data:`graftbench.programs.sandbox.DEFAULT_LIMITS`): a manifest's seal is its own hash, so one written by hand
    verifies with any limits, and they would be the sandbox's."""
    recorded_limits = (manifest.get("settings") or {}).get("sandbox")
    if not isinstance(recorded_limits, dict):
        raise ValueError(f"{label}: not a program-mode manifest (its settings record no sandbox limits)")
    try:
        limits = SandboxLimits(**recorded_limits)
    except TypeError as exc:
        raise ValueError(f"{label}: its sandbox limits are not the ones a run records: {exc}") from exc
    looser = [f"{name} {value!r} over {getattr(DEFAULT_LIMITS, name)!r}" for name, value in asdict(limits).items()
              if value > getattr(DEFAULT_LIMITS, name)]
    if looser:
        raise ValueError(f"{label}: its sandbox limits are looser than a graftbench run's ({', '.join(looser)}): "
                         "programs are replayed only under limits no looser than those")
    return limits


def replay_programs(manifest: dict, verifier_version: int | str, sandbox: Sandbox, runs: dict | None = None,
                    label: str = "the manifest") -> list[Replayed]:
    """Run every recorded program of ``manifest`` (a loaded manifest's dict, named ``label`` in errors) in
    ``sandbox`` under the manifest's own sandbox limits, and judge it under ``verifier_version`` (the one it recorded:
    :func:`graftbench.results.manifest.recorded_verifier_version`). A program whose run here was :func:`starved` is run
    once more with the wall-time limit raised to :data:`STARVED_WALL_FACTOR` times ``cpu_s`` (the CPU-time and
    every other limit unchanged), and judged on that run (a starved ``timeout`` says nothing of whether the program
    would have finished within its CPU time, whatever was recorded); its :class:`Replayed`
    keeps the starved run's wall seconds (``starved_s``). ``runs``, when given, maps (program text, limits) to a
    :class:`ProgramResult` already run, and receives the new ones. Raises ``ValueError`` as :func:`replay_limits`
    does (nothing runs then) and :class:`graftbench.programs.sandbox.SandboxError` when the sandbox cannot be set up
    for a program."""
    limits = replay_limits(manifest, label)
    samples = manifest.get("samples")
    if not isinstance(samples, list) or not all(isinstance(sample, dict) for sample in samples):
        raise ValueError(f"{label}: its samples are not a list of objects")
    patient = replace(limits, wall_s=max(limits.wall_s, STARVED_WALL_FACTOR * limits.cpu_s))
    version = verifier_version
    runs = {} if runs is None else runs
    replayed = []
    for sample in samples:
        if not isinstance(sample.get("program"), str):
            continue
        result = _run_once(runs, sample["program"], limits, sandbox)
        starved_s = None
        if starved(result, limits):
            starved_s = result.run_s
            result = _run_once(runs, sample["program"], patient, sandbox)
        old = sample_verdict(sample, version)
        new = program_verdict(result.stdout, result.stopped, sample.get("key") or "", version)
        recorded_s = sample.get("program_s")
        replayed.append(Replayed(f"{sample.get('problem_id')}#{sample.get('sample_index', 0)}",
                                 sample.get("stopped"), result.stopped, (old.extracted, old.correct),
                                 (new.extracted, new.correct),
                                 recorded_s if isinstance(recorded_s, (int, float)) else None, result.run_s,
                                 result.cpu_s, starved_s))
    return replayed


def _run_once(runs: dict, program: str, limits: SandboxLimits, sandbox: Sandbox) -> ProgramResult:
    """The run of ``program`` under ``limits``: from ``runs`` when already there, else run now in ``sandbox`` and
    kept."""
    if (program, limits) not in runs:
        runs[program, limits] = sandbox.run(program, limits)
    return runs[program, limits]


def log_record(path: str | Path, manifest: dict, replayed: list[Replayed], ran: int, isolation: str,
               code: dict | None = None) -> dict:
    """The log line of one manifest's replay: its path and seal (``manifest`` is its loaded dict), how many programs
    it holds, how many of them were run for it (``ran``; the others reused a run of the same text and limits), how
    many gave the same verdict and the same stop reason, every difference, every program whose first run was starved
    (judged on a run with more wall time, :func:`replay_programs`), the ``isolation`` they ran in
    (:attr:`graftbench.programs.sandbox.Isolation.description`), this machine's CPU
    and its load average (1, 5 and 15 minutes, from ``os.getloadavg``) when the line is written (a program stopped
    at the wall-time limit on a busy machine may have finished on a quiet one), and the code version that replayed
    them (``code``: :func:`graftbench.util.provenance.code_version`, read when the replay started; ``None`` reads
    it now)."""
    return {"schema": LOG_SCHEMA, "manifest": str(path), "manifest_sha256": manifest.get("manifest_sha256"),
            "programs": len(replayed), "ran": ran, "same_verdict": sum(r.same_verdict for r in replayed),
            "same_stopped": sum(r.stopped == r.recorded_stopped for r in replayed),
            "differences": [asdict(r) for r in replayed if not r.same],
            "starved": [asdict(r) for r in replayed if r.starved_s is not None],
            "isolation": isolation, "replayed_on": isa.describe_cpu(isa.environment()),
            "code": code if code is not None else code_version(),
            "load_average": [round(value, 2) for value in os.getloadavg()], "cpus": os.cpu_count(),
            "replayed_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def replay_manifests(manifests: Iterable[tuple[str | Path, dict, int | str]], log: Path | None = None,
                     on_record: Callable[[dict], None] | None = None) -> list[dict]:
    """Replay every manifest of ``manifests`` (its path, its loaded dict and its recorded verifier version:
    :func:`graftbench.api.replay_programs` loads and checks them all before any program runs) in turn (:func:`replay_programs`, one run
    per distinct program and limits), append each one's :func:`log_record` to ``log`` (JSON lines) as soon as it is
    done, hand it to ``on_record`` (when given) at once, and return the records. Raises as :func:`replay_programs`
    does (:func:`replay_limits` for every manifest before any program runs),
    :class:`graftbench.programs.sandbox.SandboxError` when the sandbox cannot be built (opened once, after
    ``log`` is tried), and ``OSError`` when ``log`` cannot be appended to (tried before any program runs). Every
    record names
    the code version read before the first program runs (:func:`log_record`'s ``code``)."""
    manifests = list(manifests)
    for path, manifest, _ in manifests:  # every manifest's limits checked before any program runs
        replay_limits(manifest, str(path))
    code = code_version()  # at the start: the checkout may move while the programs run
    if log is not None:
        with open(log, "a", encoding="utf-8"):
            pass
    sandbox = open_sandbox()
    runs: dict = {}
    records = []
    for path, manifest, version in manifests:
        before = len(runs)
        replayed = replay_programs(manifest, version, sandbox, runs, str(path))
        record = log_record(path, manifest, replayed, len(runs) - before, sandbox.isolation.description, code)
        records.append(record)
        if log is not None:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, sort_keys=True) + "\n")
        if on_record is not None:
            on_record(record)
    return records
