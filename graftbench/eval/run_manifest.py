"""An eval run's manifest: built from its samples, settings and pin, with the options it was given."""

from __future__ import annotations

from pathlib import Path

from ..results.manifest import build_manifest, graft_use
from ..problems.types import Problem
from ..settings import EvalSettings
from ..problems.shards import parse_shard, select
from .run_identity import problem_entry, problem_set_entry


def eval_manifest(*, run_name: str, command: str, config: dict, config_fingerprint: str, settings: EvalSettings,
                  source: str, problems: list[Problem], samples: list[dict], energy: dict,
                  store_root: str | Path | None, extra: dict | None = None, code: dict | None = None,
                  code_resumed_from: list[dict] | None = None) -> dict:
    """The sealed manifest of a solve or eval run over ``problems`` (the whole set; the run's shard of it when
    ``settings.shard`` is given), its ``samples`` in problem order then sample index; ``store_root`` is recorded
    when the run grafted (``None`` otherwise); ``extra`` adds sections. A run with ``settings.graft`` also records
    what it grafted (:func:`graftbench.results.manifest.graft_use`: ``none_grafted`` when nothing). ``code``: the
    code version read when the run started (``environment.code``; ``None`` reads it now); ``code_resumed_from``:
    those of the earlier processes of a resumed run (``environment.code_resumed_from``). Raises ``ValueError`` as
    :func:`graftbench.results.manifest.build_manifest` does."""
    selected = select(problems, parse_shard(settings.shard))
    if settings.graft:
        extra = {**(extra or {}), "graft_use": graft_use(samples)}
    return build_manifest(
        run=run_name, command=command, config=config, config_fingerprint=config_fingerprint,
        settings=settings.to_dict(), problem_set=problem_set_entry(source, problems, selected, settings.shard),
        problems=[problem_entry(p) for _, p in selected], samples=samples, energy=energy,
        store=str(store_root) if store_root is not None else None, extra=extra, code=code,
        code_resumed_from=code_resumed_from,
    )


def options_section(command_options: dict | None) -> dict | None:
    """The manifest section recording the options a command was given (``{"command_options": {flag: value}}``), or
    ``None`` when it was given none or the run was not started from the command line: a manifest without it is one
    written before options were recorded, or by the Python API."""
    return {"command_options": dict(command_options)} if command_options else None
