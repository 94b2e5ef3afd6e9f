"""A finished run, recognised before any model loads, so that re-running its command changes nothing on disk.

A run is finished when its folder holds a ``manifest.json`` that records exactly the samples ``samples.jsonl``
holds, every sample the settings ask for (each problem of its shard, ``samples`` each), the same settings, pin
fingerprint, dtype, chunk size and instruction-set pin as the command, and that verifies
(:func:`graftbench.results.manifest.check_manifest`; artifacts the store does not hold are not required). Re-running its
command then only reports it: the manifest keeps its bytes, so a hash quoted from it keeps matching the folder.
Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .manifest import ManifestError, check_manifest, load_manifest
from ..problems.types import Problem
from .runs import RunDir, RunError
from ..settings import EvalSettings
from ..problems.shards import parse_shard, select
from ..util.strict_json import load_strict


@dataclass(frozen=True)
class FinishedRun:
    """A finished run's manifest (as read), its path, and the verification's ``mismatches`` and ``notes``."""

    path: Path
    manifest: dict
    mismatches: list[str]
    notes: list[str]


@dataclass(frozen=True)
class Request:
    """What a solve or eval command asks for, as far as it is known before its model loads (``isa`` resolved:
    ``native`` or ``avx2``; ``dtype`` ``auto`` only where workers on other machines resolve it, and then a run in
    either dtype matches)."""

    command: str
    model: str
    dtype: str
    chunk_size: int
    isa: str
    settings: EvalSettings


def finished_run(runs_root: str | Path, run_name: str, request: Request, problems: list[Problem],
                 store: str | None = None) -> FinishedRun | None:
    """The run ``runs_root/run_name`` when it is finished under ``request`` (see the module docstring), verified
    against ``store`` (else the store it records); ``None`` when it is not (no manifest, samples missing or more
    recorded than the manifest holds, or other settings: the command then runs, resumes or refuses as before).
    A finished run whose manifest does not verify comes back with its ``mismatches``. Raises nothing for a folder
    it cannot read, nor for one whose files are not its own (a ``manifest.json`` symlinked out of it is never
    read): that is left to the run's own checks (:meth:`graftbench.results.runs.RunDir.open` refuses it)."""
    run = RunDir(runs_root, run_name)
    try:
        run.check_own_files()  # a manifest.json symlinked out of the folder is never read (the run then refuses it)
        manifest = load_manifest(run.manifest_path)
        recorded = load_strict(run.settings_path)
        samples = run.read_samples()
    except (ManifestError, RunError, OSError, ValueError):
        return None
    if not _matches(manifest, recorded, request) or not _complete(manifest, samples, problems, request.settings):
        return None
    mismatches, notes = check_manifest(manifest, store)
    return FinishedRun(run.manifest_path, manifest, mismatches, notes)


def _matches(manifest: dict, recorded: object, request: Request) -> bool:
    config = manifest.get("config")
    return (isinstance(config, dict) and isinstance(recorded, dict)
            and manifest.get("command") == recorded.get("command") == request.command
            and config.get("model") == recorded.get("model") == request.model
            and manifest.get("settings") == request.settings.to_dict()
            and manifest.get("config_fingerprint") == recorded.get("config_fingerprint")
            and request.dtype in (config.get("dtype"), "auto")
            and (config.get("chunk_size"), config.get("isa")) == (request.chunk_size, request.isa))


def _complete(manifest: dict, samples: list[dict], problems: list[Problem], settings: EvalSettings) -> bool:
    """Whether the manifest's samples are exactly those recorded, and are every sample the settings ask for."""
    wanted = {(p.id, i) for _, p in select(problems, parse_shard(settings.shard)) for i in range(settings.samples)}
    in_manifest = manifest.get("samples")
    if not isinstance(in_manifest, list):
        return False
    keys = {(s.get("problem_id"), s.get("sample_index")) for s in in_manifest if isinstance(s, dict)}
    on_disk = {(s.get("problem_id"), s.get("sample_index")) for s in samples}
    return keys == on_disk == wanted and len(in_manifest) == len(samples)
