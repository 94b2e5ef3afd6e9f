"""``graftbench merge``: the shards of one run (``--shard i/N``, :mod:`graftbench.problems.shards`) into one run folder
and one manifest, equal to the run done in one process.

Before anything is written every shard's manifest must verify (its seal, every re-extracted verdict, totals and
metrics: :func:`graftbench.results.manifest.verify_manifest`), all shards must share the pin (config and fingerprint),
the command, the store and every setting but the shard, the shards must be exactly ``0/N`` … ``N-1/N`` of one problem
set, every problem must sit in the shard its id hashes to, every position of the whole set must be covered once,
and every (problem, sample index, seed) must appear exactly once. The merged manifest lists problems and samples in
the whole set's order, as a single process writes them, and records each shard's manifest hash and environment
under ``merged_from``. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..results.manifest import (ManifestError, build_manifest, graft_use, load_manifest, run_folder_manifest,
                                verify_manifest, write_manifest)
from ..results.runs import RunDir, RunError
from ..util.provenance import code_version
from ..util.seeds import sample_seed
from ..problems.shards import Shard, parse_shard, shard_of

SAME_SECTIONS = ("schema", "command", "config", "config_fingerprint", "store")


class MergeError(ValueError):
    """Shards that cannot be merged; the message names the shard (its run or file) and what is wrong."""


@dataclass
class ShardRun:
    """One shard as merge reads it: where its manifest is, the manifest, and its :class:`Shard`."""

    name: str
    path: Path
    manifest: dict
    shard: Shard


@dataclass
class MergeResult:
    """The merged run: its folder, sealed manifest, and the shards it came from (in shard order)."""

    run: RunDir
    manifest: dict
    shards: list[ShardRun]


def manifest_path(source: str | Path, runs_root: str | Path) -> Path:
    """A shard given as a manifest file, a run folder, or a run name under ``runs_root``: its ``manifest.json``.
    Raises :class:`MergeError` when there is none, or when a folder's manifest is a symlink out of it
    (:func:`graftbench.results.manifest.run_folder_manifest`)."""
    path = Path(source)
    if path.is_file():
        return path
    for folder in (path, Path(runs_root) / str(source)):
        try:
            candidate = run_folder_manifest(folder)
        except ManifestError as exc:
            raise MergeError(f"shard '{source}': {exc}") from None
        if candidate.is_file():
            return candidate
    raise MergeError(f"shard '{source}': no manifest.json (is it a finished run under {runs_root}/?)")


def read_shard(source: str | Path, runs_root: str | Path) -> ShardRun:
    """Read and verify one shard. Raises :class:`MergeError` when its manifest does not verify or is not a
    shard's (no ``settings.shard``)."""
    path = manifest_path(source, runs_root)
    try:
        manifest = load_manifest(path)
    except ValueError as exc:
        raise MergeError(f"shard '{source}': {exc}") from exc
    mismatches, _ = verify_manifest(path)
    if mismatches:
        raise MergeError(f"shard '{source}': its manifest does not verify ({len(mismatches)} problems, first: "
                         f"{mismatches[0]}); re-run the shard")
    spec = manifest.get("settings", {}).get("shard")
    if spec is None or not isinstance(manifest.get("problem_set", {}).get("shard"), dict):
        raise MergeError(f"shard '{source}': not a shard's run (it was run without --shard)")
    return ShardRun(str(source), path, manifest, parse_shard(spec))


def check_compatible(shards: list[ShardRun]) -> None:
    """Shards of one run: the same pin, command, store, settings but the shard, and problem set; shards ``0/N`` …
    ``N-1/N`` once each. Raises :class:`MergeError` naming the first shard that differs and how."""
    if not shards:
        raise MergeError("no shards to merge")
    first = shards[0]
    for other in shards[1:]:
        for section in SAME_SECTIONS:
            if other.manifest.get(section) != first.manifest.get(section):
                raise MergeError(f"shard '{other.name}': its {section} differs from shard '{first.name}''s "
                                 "(shards of one run share the model, pin, command and store)")
        changed = _changed_settings(first.manifest["settings"], other.manifest["settings"])
        if changed:
            raise MergeError(f"shard '{other.name}': settings differ from shard '{first.name}' ({', '.join(changed)})")
        if _whole_set(other) != _whole_set(first):
            raise MergeError(f"shard '{other.name}': a shard of another problem set than shard '{first.name}' "
                             f"({_whole_set(other)} against {_whole_set(first)})")
    count = first.shard.count
    seen = sorted(s.shard.index for s in shards)
    if any(s.shard.count != count for s in shards) or seen != list(range(count)):
        specs = ", ".join(str(s.shard) for s in sorted(shards, key=lambda s: (s.shard.count, s.shard.index)))
        raise MergeError(f"the shards given are {specs}: a merge needs each of 0/{count} … {count - 1}/{count} "
                         "exactly once")


def _changed_settings(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if k != "shard" and a.get(k) != b.get(k))


def _whole_set(shard: ShardRun) -> tuple:
    info = shard.manifest["problem_set"]["shard"]
    return shard.manifest["problem_set"].get("source"), info.get("of_sha256"), info.get("of_n")


def ordered_problems(shards: list[ShardRun]) -> list[tuple[int, dict]]:
    """Every problem of the whole set as ``(position, entry)`` in the set's order. Raises :class:`MergeError` for
    a problem in the wrong shard, a position outside the set or given twice, or a missing position."""
    n = shards[0].manifest["problem_set"]["shard"]["of_n"]
    placed: dict[int, tuple[dict, str]] = {}
    for shard in shards:
        problems = shard.manifest["problems"]
        positions = shard.manifest["problem_set"]["shard"].get("positions")
        if not isinstance(positions, list) or len(positions) != len(problems):
            raise MergeError(f"shard '{shard.name}': problem_set.shard.positions does not list one position per "
                             "problem")
        for position, entry in zip(positions, problems):
            if not shard.shard.holds(entry["id"]):
                raise MergeError(f"shard '{shard.name}': problem {entry['id']} belongs to shard "
                                 f"{_home(entry['id'], shard.shard.count)}, not {shard.shard}")
            if not isinstance(position, int) or not 0 <= position < n:
                raise MergeError(f"shard '{shard.name}': problem {entry['id']} has position {position!r}, outside "
                                 f"the set of {n}")
            if position in placed:
                raise MergeError(f"problem position {position} appears twice: {placed[position][0]['id']} in shard "
                                 f"'{placed[position][1]}' and {entry['id']} in shard '{shard.name}'")
            placed[position] = (entry, shard.name)
    missing = [i for i in range(n) if i not in placed]
    if missing:
        raise MergeError(f"{len(missing)} of {n} problems are in no shard (first position missing: {missing[0]})")
    return [(i, placed[i][0]) for i in range(n)]


def _home(problem_id: str, count: int) -> str:
    return f"{shard_of(problem_id, count)}/{count}"


def ordered_samples(shards: list[ShardRun], problems: list[tuple[int, dict]], settings: dict) -> list[dict]:
    """Every sample, in the order one process writes them (problem order, then sample index). Raises
    :class:`MergeError` when a (problem, sample index) is missing or appears twice, or a sample's seed is not the
    one its (run seed, problem, index) derives."""
    by_key: dict[tuple[str, int], dict] = {}
    for shard in shards:
        for sample in shard.manifest["samples"]:
            key = (sample["problem_id"], sample.get("sample_index", 0))
            if key in by_key:
                raise MergeError(f"sample {key[0]}#{key[1]} appears twice (shard '{shard.name}' and another)")
            by_key[key] = sample
    n_samples = settings.get("samples", 1)
    sampled = settings.get("temperature", 0) > 0
    ordered = []
    for _, entry in problems:
        for index in range(n_samples):
            sample = by_key.pop((entry["id"], index), None)
            if sample is None:
                raise MergeError(f"sample {entry['id']}#{index} is in no shard (a shard stopped by its token budget, "
                                 "or not finished: resume it)")
            expected = sample_seed(settings.get("seed", 0), entry["id"], index) if sampled else None
            if sample.get("seed") != expected:
                raise MergeError(f"sample {entry['id']}#{index}: seed {sample.get('seed')!r}, expected {expected!r} "
                                 "from the run seed")
            ordered.append(sample)
    if by_key:
        extra = min(by_key)
        raise MergeError(f"{len(by_key)} samples belong to no problem of the set (first: {extra[0]}#{extra[1]})")
    return ordered


def merged_manifest(shards: list[ShardRun], out_name: str, code: dict | None = None) -> dict:
    """The single-process manifest of the shards (sealed), with ``merged_from``: each shard's spec, run,
    manifest SHA-256, environment and, when it records them, the options its command was given
    (``command_options``), and for a graft run what its samples grafted (``graft_use``, as the one-process run
    records it); ``code`` is the merging code's version (``environment.code``; ``None`` reads it now).
    Raises :class:`MergeError` as the checks above do."""
    check_compatible(shards)
    shards = sorted(shards, key=lambda s: s.shard.index)
    first = shards[0].manifest
    settings = {**first["settings"], "shard": None}
    problems = ordered_problems(shards)
    samples = ordered_samples(shards, problems, settings)
    source, of_sha256, of_n = _whole_set(shards[0])
    merged_from = [{"shard": str(s.shard), "run": s.manifest.get("run"), "manifest_sha256": s.manifest.get(
        "manifest_sha256"), "environment": s.manifest.get("environment"),
        **({"command_options": s.manifest["command_options"]} if "command_options" in s.manifest else {})}
        for s in shards]
    return build_manifest(
        run=out_name, command=first["command"], config=first["config"], config_fingerprint=first["config_fingerprint"],
        settings=settings, problem_set={"source": source, "sha256": of_sha256, "n": of_n},
        problems=[entry for _, entry in problems], samples=samples, energy=first["energy"], store=first["store"],
        extra={"merged_from": merged_from, **({"graft_use": graft_use(samples)} if settings.get("graft") else {})},
        code=code)


def merge_runs(sources: list[str | Path], out_name: str, runs_root: str | Path = "runs") -> MergeResult:
    """Merge the shard runs ``sources`` (run names under ``runs_root``, run folders or manifest files) into the run
    ``out_name``: ``run.json``, ``samples.jsonl`` and a manifest that is checked with
    :func:`graftbench.results.manifest.verify_manifest` before this returns.

    Raises :class:`MergeError` when the shards cannot be merged (nothing is written) and
    :class:`graftbench.results.runs.RunError` when the ``out_name`` folder holds another run's settings or samples (an
    interrupted merge of the same shards resumes).
    """
    code = code_version()  # before the shards are read: the code that merges them
    shards = [read_shard(source, runs_root) for source in sources]
    manifest = merged_manifest(shards, out_name, code)
    run = RunDir(runs_root, out_name)
    settings = {"command": manifest["command"], "model": manifest["config"].get("model"),
                "config_fingerprint": manifest["config_fingerprint"],
                "problem_set_sha256": manifest["problem_set"]["sha256"], **manifest["settings"]}
    with run:
        written = run.open(settings)
        if written != manifest["samples"][:len(written)]:
            raise RunError(f"run '{out_name}' already holds other samples; pass another --out or delete {run.path}")
        for sample in manifest["samples"][len(written):]:  # an interrupted merge goes on where it stopped
            run.append(sample)
        write_manifest(manifest, run.manifest_path)
    mismatches, _ = verify_manifest(run.manifest_path)
    if mismatches:
        raise MergeError(f"the merged manifest {run.manifest_path} does not verify: {mismatches[0]}")
    return MergeResult(run, manifest, sorted(shards, key=lambda s: s.shard.index))
