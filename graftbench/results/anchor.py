"""What a manifest's self-hash cannot vouch for, checked against something outside it: the problem set it names,
the shape its declared schema promises, and the SHA-256 a results index records for a committed manifest (the
verifier version a schema requires is :func:`graftbench.results.manifest.verifier_floor`). Imports no torch.

A forger who re-seals a manifest with graftbench's own functions passes every self-consistency check; these
checks re-derive from the problem file or the generator (keys, problem hashes, which problems and how many samples
of each; a subset of a generated set problem by problem, by id) and from the committed index, which the forger
does not control. An exactness manifest, which lists pairs and no problems, is anchored by its problem set's
SHA-256. What could not be anchored is said (:class:`Anchoring`), never passed over.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..util.hashing import sha256_text
from ..problems.types import Problem, ProblemSetError, problem_set_sha256
from .pin_engine import ENGINE_WITHOUT_SECTION

MAX_PROBLEM_FILE_BYTES = 64 * 1024 * 1024  # a recorded problem file larger than this is not read by default
_DATA_FOLDER = PurePosixPath("..", "shared", "data")  # recorded sources graftbench reads without being asked

# Top-level fields each schema's document holds: a document with other fields (a run manifest relabelled as an
# exactness manifest still carries its samples) is not what its schema says it is.
EXACTNESS_FIELDS = frozenset({"schema", "created_utc", "config", "config_fingerprint", "environment",
                              "problem_set", "settings", "pairs", "totals", "manifest_sha256"})
EXACTNESS_OBJECTS = frozenset({"config", "environment", "problem_set", "settings", "totals"})  # each a JSON object
PAIR_FIELDS = frozenset({"id", "kind", "equal", "graft_logits_sha256", "fresh_logits_sha256", "artifact_tokens",
                         "tokens_sha256"})
# What a pair commits its deposit by, per artifact kind (graftbench.store.codec): a KV-tensor artifact
# (graftbench.artifact/1) by its id, an engine's sequence state (graftbench.<name>-state/N) by the SHA-256 of its
# bytes. A pin without an engine section deposits KV tensors (the pin as recorded before engines had sections); a
# pin with one (a dict naming its engine) deposits its engine's state. No engine is named here.
TENSOR_ARTIFACT, ENGINE_STATE = "tensor-artifact", "engine-state"
DEPOSIT_FIELD = {TENSOR_ARTIFACT: "artifact_id", ENGINE_STATE: "state_sha256"}
RUN_REQUIRED_FIELDS = frozenset({"schema", "run", "command", "config", "config_fingerprint", "settings",
                                 "problem_set", "problems", "samples", "totals", "manifest_sha256"})
RUN_FOREIGN_FIELDS = frozenset({"pairs"})
INDEX_NAME = "SHA256SUMS"
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout: committed runs record sources relative to it


@dataclass(frozen=True)
class ProblemSet:
    """A problem set to anchor a manifest to: its problems in file order and where they came from (a path, or a
    generated set's name such as ``builtin:2-12``), and whether the user named it (a different SHA-256 is then a
    mismatch, not "not anchored")."""

    problems: tuple[Problem, ...]
    label: str
    named: bool


@dataclass(frozen=True)
class Anchoring:
    """What anchoring a manifest to a problem set found: ``mismatches`` (one line each), ``note`` (what it was
    anchored to, or why not) and ``unanchored``: why no problem set could be checked against the manifest, or
    ``None`` when one was (its mismatches then say whether the manifest matches it)."""

    mismatches: tuple[str, ...]
    note: str
    unanchored: str | None = None


def exactness_shape(manifest: dict) -> list[str]:
    """What keeps ``manifest`` (declared ``graftbench.exactness/1``) from being one: top-level fields another kind
    of document carries or that are missing, ``pairs`` not a non-empty list of pair records. Empty when it is."""
    problems = _field_problems(manifest, EXACTNESS_FIELDS, EXACTNESS_FIELDS, "graftbench.exactness/1")
    problems += [f"{name}: not an object" for name in sorted(EXACTNESS_OBJECTS)
                 if name in manifest and not isinstance(manifest[name], dict)]
    pairs = manifest.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        return problems + ["pairs: not a non-empty list of pair records"]
    kind, engine = _deposit_kind(manifest)
    if kind is None:
        return problems + [f"config.engine: {engine!r} is not an engine section (a dict naming its engine)"]
    fields = PAIR_FIELDS | {DEPOSIT_FIELD[kind]}
    bad = [i for i, p in enumerate(pairs) if not isinstance(p, dict) or not fields <= set(p)]
    if bad:
        problems.append(f"pairs: {len(bad)} entries (first at index {bad[0]}) are not {engine} pair records with "
                        f"{', '.join(sorted(fields))}")
    return problems


def _deposit_kind(manifest: dict) -> tuple[str | None, object]:
    """What a manifest's pin deposits (a key of :data:`DEPOSIT_FIELD`, ``None`` when its engine section is not a
    dict naming an engine) and the engine it names for messages (``torch`` for a pin without a section, the one
    engine whose pins have none)."""
    config = manifest.get("config")
    section = config.get("engine") if isinstance(config, dict) else None
    if section is None:
        return TENSOR_ARTIFACT, ENGINE_WITHOUT_SECTION
    if not isinstance(section, dict):
        return None, section
    name = section.get("engine")
    if not isinstance(name, str) or not name:
        return None, name
    return ENGINE_STATE, name


def run_shape(manifest: dict) -> list[str]:
    """What keeps ``manifest`` (declared a run manifest) from being one: a required field missing, a field of an
    exactness manifest present. Empty when it is."""
    schema = str(manifest.get("schema"))
    problems = [f"{name}: required by {schema} but missing" for name in sorted(RUN_REQUIRED_FIELDS - set(manifest))]
    problems += [f"{name}: a field of another kind of document, not of {schema}"
                 for name in sorted(RUN_FOREIGN_FIELDS & set(manifest))]
    return problems


def _field_problems(manifest: dict, required: frozenset, allowed: frozenset, schema: str) -> list[str]:
    fields = set(manifest)
    return ([f"{name}: required by {schema} but missing" for name in sorted(required - fields)]
            + [f"{name}: not a field of {schema}" for name in sorted(fields - allowed, key=str)])


def resolve_recorded(manifest: dict, cwd: Path | None = None) -> tuple[ProblemSet | None, str]:
    """The problem set a manifest records, when graftbench can rebuild it without being told: a generated set
    (``builtin``, ``builtin:N``, ``builtin:A-B``, ``methods`` and its slices), or the file of the recorded path's
    name directly under ``../shared/data/`` (relative to ``cwd``; by default the working folder, then the checkout
    graftbench runs from), a regular file of at most :data:`MAX_PROBLEM_FILE_BYTES`. The recorded path itself is
    data and is never opened (nor is a hub id or a URL): a manifest recorded with ``/elsewhere/aime2024.jsonl``
    is looked up as ``../shared/data/aime2024.jsonl``, and anchors only if that file's SHA-256 is the recorded one.
    Returns ``(set, "")`` or ``(None, why)``."""
    problem_set = manifest.get("problem_set")
    source = problem_set.get("source") if isinstance(problem_set, dict) else None
    if not isinstance(source, str) or not source:
        return None, "the manifest records no problem-set source"
    from ..problems.loading import generated_slice, is_generated, load_problems

    try:
        if is_generated(source):
            return ProblemSet(tuple(generated_slice(source)), source, False), ""
        name = _file_name(source)
        path = next((found for base in ([cwd] if cwd else [Path.cwd(), PROJECT_ROOT])
                     if name and (found := _data_file(name, base)) is not None), None)
        if path is None:
            return None, (f"its source {source[:120]!r} is not a generated set, and no regular file of its name is "
                          f"in {_DATA_FOLDER}/ here")
        return ProblemSet(tuple(load_problems(str(path))), str(_DATA_FOLDER / name), False), ""
    except (ProblemSetError, OSError) as exc:
        return None, f"its source {source[:120]!r} cannot be read ({str(exc)[:200]})"


def _file_name(source: str) -> str | None:
    """The file name a recorded local path ends in (``aime2024.jsonl`` of ``/work/shared/data/aime2024.jsonl``);
    ``None`` for a URL or a name that is no file's (``..``)."""
    if "://" in source:
        return None
    name = PurePosixPath(source.replace("\\", "/")).name
    return name if name not in ("", ".", "..") else None


def _data_file(name: str, cwd: Path) -> Path | None:
    """``cwd/../shared/data/name`` when it is a regular file (not a link, FIFO or device) of bounded size; else
    ``None``. ``name`` holds no path separator (:func:`_file_name`), so nothing outside that folder is reached."""
    path = cwd / _DATA_FOLDER / name
    try:
        info = os.lstat(path)
    except (OSError, ValueError):  # ValueError: a name holding a NUL byte, which no file has
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_PROBLEM_FILE_BYTES:
        return None
    return path


def anchor_manifest(manifest: dict, problems: ProblemSet | None, exactness: bool = False) -> Anchoring:
    """Anchor a loaded manifest to ``problems`` (a set the user named), or else to the set it records when
    graftbench can rebuild it (:func:`resolve_recorded`): a run manifest by :func:`anchor`, an exactness manifest
    (``exactness``), which lists pairs and no problems, by :func:`anchor_digest`."""
    why = ""
    if problems is None:
        problems, why = resolve_recorded(manifest)
    if problems is None:
        return Anchoring((), f"problem set not anchored: {why}", why)
    return anchor_digest(manifest, problems) if exactness else anchor(manifest, problems)


def anchor(manifest: dict, problem_set: ProblemSet) -> Anchoring:
    """Check a run manifest against ``problem_set``: the recorded ``problem_set.sha256`` (of the whole set, of its
    first ``n`` problems when run with a limit, or of a shard's problems), every listed problem's id, text hash and
    key, every sample's key, and that each problem of the set has ``settings.samples`` samples (1 when not
    recorded). A run of another subset of a generated set (a flywheel round's problems, recorded as ``builtin``) is
    anchored problem by problem: every problem it lists must be one the generator makes under that id
    (:func:`graftbench.problems.loading.generated_by_id`), with its text hash and key, and ``problem_set.sha256``
    that of those problems in the listed order. A set the user did not name that anchors none of these ways leaves
    the manifest unanchored (``Anchoring.unanchored``); one the user named is then a mismatch."""
    recorded = manifest.get("problem_set") if isinstance(manifest.get("problem_set"), dict) else {}
    expected, why = _expected_problems(recorded, list(problem_set.problems))
    label, mismatches = f"{problem_set.label} ({len(expected or [])} problems)", []
    from ..problems.loading import is_generated

    if expected is None and is_generated(problem_set.label):
        expected, mismatches, described = _generated_subset(manifest, recorded, problem_set.label, why)
        label, why = (described, why) if expected is not None else (label, described)
    if expected is None:
        if problem_set.named:
            return Anchoring((f"problem_set.sha256: {why}",), f"problem set {problem_set.label} does not match")
        return Anchoring((), f"problem set not anchored: {why}", why)
    mismatches += _problem_mismatches(manifest, expected) + _sample_mismatches(manifest, expected)
    return Anchoring(tuple(mismatches), f"problem set anchored to {label}")


def _generated_subset(manifest: dict, recorded: dict, source: str,
                      why: str) -> tuple[list[Problem] | None, list[str], str]:
    """The problems a run of a subset of the generated set ``source`` lists, each as the generator makes it under
    its id: ``(problems, [a problem_set.sha256 mismatch], label)``, the label naming the slice (``builtin:2-4``)
    when the problems are one; or ``(None, [], why)`` (``why`` extended) when a listed id is not one the generator
    makes."""
    from ..problems.loading import generated_by_id, generated_slice

    name = source.split(":")[0]
    ids = [p.get("id") for p in _listed(manifest)]
    made = generated_by_id(source, ids)
    missing = next((i for i in ids if not isinstance(i, str) or i not in made), None)
    if not ids or missing is not None:
        named = f"problem {str(missing)[:40]!r} is not one" if ids else "it lists no problem"
        return None, [], f"{why}; and as a subset of {source}: {named} {name} generates"
    expected = [made[i] for i in ids]
    mismatches = [] if problem_set_sha256(expected) == recorded.get("sha256") else [
        f"problem_set.sha256: recorded {str(recorded.get('sha256'))[:16]!r}, the {len(expected)} problems it lists "
        f"as {name} makes them are {problem_set_sha256(expected)[:16]!r}"]
    indexes = [int(i.rsplit("-", 1)[1]) for i in ids]
    span = f"{name}:{min(indexes)}-{max(indexes) + 1}"
    if [p.id for p in generated_slice(span)] == ids:
        return expected, mismatches, f"{span} ({len(expected)} problems, by id)"
    return expected, mismatches, f"{len(expected)} problems of {name}, by id"


def anchor_digest(manifest: dict, problem_set: ProblemSet) -> Anchoring:
    """Only ``problem_set.sha256`` against ``problem_set`` (as :func:`anchor` reads it: the whole set, its first
    ``n``, or a shard's): for an exactness manifest, which lists no samples. A differing SHA-256 is a mismatch for a
    set the user named and leaves the manifest unanchored for the set it records."""
    recorded = manifest.get("problem_set") if isinstance(manifest.get("problem_set"), dict) else {}
    expected, why = _expected_problems(recorded, list(problem_set.problems))
    if expected is not None:
        return Anchoring((), f"problem set anchored to {problem_set.label} ({len(expected)} problems, by SHA-256)")
    if problem_set.named:
        return Anchoring((f"problem_set.sha256: {why}",), f"problem set {problem_set.label} does not match")
    return Anchoring((), f"problem set not anchored: {why}", why)


def _listed(manifest: dict) -> list[dict]:
    problems = manifest.get("problems")
    return [p for p in problems if isinstance(p, dict)] if isinstance(problems, list) else []


def _expected_problems(recorded: dict, problems: list[Problem]) -> tuple[list[Problem] | None, str]:
    """The problems the manifest's ``problem_set`` must have run, or ``(None, why)``."""
    digest = recorded.get("sha256")
    shard = recorded.get("shard")
    if isinstance(shard, dict):
        positions = shard.get("positions")
        if shard.get("of_sha256") != problem_set_sha256(problems):
            return None, "the shard's whole-set SHA-256 is not that of the problem set"
        if not isinstance(positions, list) or not all(isinstance(i, int) and 0 <= i < len(problems)
                                                      for i in positions):
            return None, "the shard's positions are not positions in the problem set"
        selected = [problems[i] for i in positions]
        return (selected, "") if problem_set_sha256(selected) == digest else (
            None, "the shard's SHA-256 is not that of its positions in the problem set")
    if problem_set_sha256(problems) == digest:
        return problems, ""
    n = recorded.get("n")
    if isinstance(n, int) and 0 < n < len(problems) and problem_set_sha256(problems[:n]) == digest:
        return problems[:n], ""
    return None, (f"recorded {str(digest)[:16]!r}, the problem set ({len(problems)} problems) is "
                  f"{problem_set_sha256(problems)[:16]!r}")


def _problem_mismatches(manifest: dict, expected: list[Problem]) -> list[str]:
    listed = _listed(manifest)
    if [p.get("id") for p in listed] != [p.id for p in expected]:
        return [f"problems: the manifest lists {len(listed)} problems, not the {len(expected)} of the problem set "
                "in its order"]
    mismatches = []
    for entry, problem in zip(listed, expected):
        if entry.get("problem_sha256") != sha256_text(problem.problem):
            mismatches.append(f"problem {problem.id}: problem_sha256 is not the hash of the problem set's text")
        if entry.get("key") != problem.answer:
            mismatches.append(f"problem {problem.id}: key {str(entry.get('key'))[:40]!r} is not the problem set's "
                              f"{problem.answer[:40]!r}")
    return mismatches


def _sample_mismatches(manifest: dict, expected: list[Problem]) -> list[str]:
    samples = [s for s in manifest.get("samples", []) if isinstance(s, dict)] if isinstance(
        manifest.get("samples"), list) else []
    settings = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else {}
    per_problem = settings.get("samples", 1)
    keys = {p.id: p.answer for p in expected}
    ids = [s.get("problem_id") if isinstance(s.get("problem_id"), str) else None for s in samples]
    mismatches = [f"sample {pid}: key {str(s.get('key'))[:40]!r} is not the problem set's {keys[pid][:40]!r}"
                  for pid, s in zip(ids, samples) if pid in keys and s.get("key") != keys[pid]]
    counts = Counter(ids)
    wrong = [(p.id, counts.get(p.id, 0)) for p in expected if counts.get(p.id, 0) != per_problem]
    if wrong:
        shown = ", ".join(f"{pid} has {n}" for pid, n in wrong[:5]) + (", ..." if len(wrong) > 5 else "")
        mismatches.append(f"samples: {len(wrong)} problems of the set do not have {per_problem!r} samples each "
                          f"(settings.samples): {shown}")
    return mismatches


def index_path_for(manifest_path: Path) -> tuple[Path, str] | None:
    """The results index (:data:`INDEX_NAME`) in the manifest's folder or one of its two parent folders that lists
    it, with the name it is listed under; ``None`` when no index lists it."""
    path = Path(manifest_path).resolve()
    for folder in list(path.parents)[:3]:
        index = folder / INDEX_NAME
        if index.is_file():
            name = path.relative_to(folder).as_posix()
            if name in read_index(index):
                return index, name
    return None


def read_index(index: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of a results index in ``sha256sum`` format (``<64 hex>  <path>`` a line).
    Raises ``ValueError`` naming the line that is not of that form; ``OSError`` when it cannot be read."""
    entries = {}
    text = Path(index).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name:
            raise ValueError(f"{index} line {number}: not '<sha256>  <path>'")
        entries[name] = digest
    return entries


def index_text(folder: Path) -> str:
    """The results index of ``folder``, a manifests root (:mod:`graftbench.results.layout`): one ``<sha256>  <path>``
    line (``sha256sum`` format, paths relative to ``folder``, sorted) for every ``*.json`` manifest in a kind's
    folder (``<kind>/...``); the files at the root (the index, the replay logs) are not listed."""
    from ..util.hashing import sha256_file
    from .layout import is_manifest

    folder = Path(folder)
    names = sorted(name for p in folder.rglob("*.json")
                   if p.is_file() and is_manifest(PurePosixPath(name := p.relative_to(folder).as_posix())))
    return "".join(f"{sha256_file(folder / name)}  {name}\n" for name in names)


def write_index(folder: Path) -> Path:
    """Write :func:`index_text` of ``folder`` to ``folder/SHA256SUMS`` and return its path."""
    from ..util.durable import write_file_atomic

    index = Path(folder) / INDEX_NAME
    write_file_atomic(index, index_text(folder).encode("utf-8"))
    return index


def index_mismatch(manifest_path: Path) -> tuple[list[str], str | None]:
    """The manifest file's SHA-256 against the one a results index records for it (:func:`index_path_for`):
    ``([mismatch], note)`` when they differ, ``([], note)`` when they agree, ``([], None)`` when no index lists it."""
    from ..util.hashing import sha256_file

    try:
        found = index_path_for(manifest_path)
        if found is None:
            return [], None
        index, name = found
        recorded, actual = read_index(index)[name], sha256_file(manifest_path)
    except (OSError, ValueError) as exc:
        return [f"the results index cannot be read ({exc})"], None
    if actual != recorded:
        return [f"the file's SHA-256 is not the {recorded[:16]} that {index} records for {name}"], None
    return [], f"the file's SHA-256 is the one {index} records for it"
