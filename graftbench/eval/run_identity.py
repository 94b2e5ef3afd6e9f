"""A run's identity, before and after its model loads: the manifest's problem entries, what `run.json` records and
a resumed run must match, and how many samples are already recorded."""

from __future__ import annotations

from pathlib import Path

from ..problems.types import Problem, problem_set_sha256, problem_text_sha256
from ..results.runs import PIN_RECORD, RunDir
from ..settings import EvalSettings
from ..problems.shards import parse_shard, select
from ..problems.sources import recorded_source


def problem_entry(problem: Problem) -> dict:
    """A problem as a manifest lists it: id, text SHA-256 and key (never its text), and its family when the set
    gives one."""
    entry = {"id": problem.id, "problem_sha256": problem_text_sha256(problem.problem), "key": problem.answer}
    return {**entry, "family": problem.family} if problem.family else entry


def problem_set_entry(source: str, problems: list[Problem], selected: list[tuple[int, Problem]],
                      shard: str | None) -> dict:
    """The manifest's ``problem_set``: its source, SHA-256 and size. A shard's lists the problems it ran, and under
    ``shard`` the whole set's SHA-256 and size and each of its problems' position in the whole set, which
    :func:`graftbench.scale.merge.merge_runs` checks and orders by. The source is recorded by
    :func:`graftbench.problems.sources.recorded_source` (never an absolute path of this machine)."""
    source = recorded_source(source)
    if shard is None:
        return {"source": source, "sha256": problem_set_sha256(problems), "n": len(problems)}
    shard_problems = [p for _, p in selected]
    return {"source": source, "sha256": problem_set_sha256(shard_problems), "n": len(shard_problems),
            "shard": {"spec": shard, "of_sha256": problem_set_sha256(problems), "of_n": len(problems),
                      "positions": [i for i, _ in selected]}}


def shard_size(problems: list[Problem], settings: EvalSettings) -> int:
    """How many problems a run of ``settings`` evaluates (its shard's, or all)."""
    return len(select(problems, parse_shard(settings.shard)))


def samples_recorded(runs_root: str | Path, run_name: str, problems: list[Problem], settings: EvalSettings) -> int:
    """How many of the samples a run of ``settings`` over ``problems`` (its shard's) makes are already recorded in
    ``runs/<run_name>/samples.jsonl``: where a resumed run's progress starts. 0 for a run that does not exist, or
    whose samples file is damaged (opening the run then names the line)."""
    from ..results.runs import RunError

    ids = {p.id for _, p in select(problems, parse_shard(settings.shard))}
    try:
        recorded = RunDir(runs_root, run_name).read_samples()
    except (RunError, OSError):
        return 0
    return len({(s.get("problem_id"), s.get("sample_index")) for s in recorded
                if s.get("problem_id") in ids and s.get("sample_index") in range(settings.samples)})


def run_record(command: str, config: dict, config_fingerprint: str, problems: list[Problem],
               settings: EvalSettings) -> dict:
    """What a run folder's ``run.json`` records, and what a resumed run must match (:meth:`RunDir.open`): the
    command, the model's name, the pin's fingerprint, the whole problem set's SHA-256 and the settings; and the pin
    itself (``config``, never compared: it names the fields of a fingerprint that differs, e.g. the thread count).
    How the run is executed (one process, or Ray workers) is not part of it: either can resume the other's run."""
    return {**_run_identity(command, config["model"], problems, settings), "config_fingerprint": config_fingerprint,
            PIN_RECORD: config}


def _run_identity(command: str, model: str, problems: list[Problem], settings: EvalSettings) -> dict:
    """:func:`run_record` less the pin's fingerprint: what is known before the model loads."""
    return {"command": command, "model": model, "problem_set_sha256": problem_set_sha256(problems),
            **settings.to_dict()}


def check_resume_before_load(runs_root: str | Path, run_name: str, command: str, model: str,
                             problems: list[Problem], settings: EvalSettings) -> None:
    """Refuse, before a model loads, to resume ``runs/<run_name>`` when its ``run.json`` records another command,
    model spec, problem set or settings than these (:func:`run_record` without the pin's fingerprint, which needs
    the loaded model and is compared when the run opens). Raises :class:`graftbench.results.runs.RunError`."""
    RunDir(runs_root, run_name).check_resumable(_run_identity(command, model, problems, settings), partial=True)
