"""Write and verify run manifests. Imports no torch and needs no model.

A manifest (schema ``graftbench.manifest/2``) is written as RFC 8785 canonical JSON; one of schema ``/1`` was sealed
over :func:`graftbench.util.hashing.canonical_json` and is still checked that way. It holds the config pin and its
fingerprint, the environment (with the code version that wrote it: :func:`environment`), the settings (with the
verifier version its samples were scored under), the problem set's hash, each problem's id, text hash and key
(never its text), each sample with its output text and the output's SHA-256, verdicts, tokens, energy, the
artifacts used with their SHA-256, the totals, ``sealed_fields`` and ``manifest_sha256``: the SHA-256 of the
canonical bytes of everything else.

``sealed_fields`` holds a short digest (16 hex digits of SHA-256) of every top-level section (of each key of an
object section such as ``config``) and of every field of every problem and sample (keyed by id). It does not add
integrity (``manifest_sha256`` is the commitment); it lets ``verify-manifest`` name *which* field changed
(``sample mod-0: decode_tokens changed since the manifest was sealed``) instead of only saying that the manifest's
hash no longer matches. It costs about 30 bytes per field; a single hash per sample could only name the sample.
Its name sorts after ``samples``, so the run's own content comes first in the canonical JSON.

Like any self-hash, this catches edits that are not re-sealed. A forger who recomputes every digest is caught
only by the checks that re-derive a value: output hashes, verdicts, totals, the config fingerprint, the artifact
list, problem hashes and keys, and artifact payloads when the store is present; and by what anchors the manifest
from outside (:mod:`graftbench.results.anchor`: the problem set, the results index).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..store.ids import artifact_path, artifacts_dir, is_artifact_id
from .fingerprint import pin_fingerprint
from ..util.float_sums import recompute, total
from ..util.hashing import canonical_json, jcs_json, sha256_bytes, sha256_text
from ..util.provenance import code_version, machine
from ..programs.mode import PROGRAM_FIELDS, extract_program, sample_verdict
from ..util.safe_files import MAX_ARTIFACT_BYTES, UnsafeFileError, check_within, regular_file_size, sha256_regular
from ..programs.sandbox import STOPPED
from ..util.strict_json import StrictJSONError, load_strict
from ..verify.answers import check_version

SCHEMA_V1 = "graftbench.manifest/1"  # canonical JSON of graftbench.util.hashing.canonical_json; verifier 1
SCHEMA = "graftbench.manifest/2"  # RFC 8785 (JCS) bytes; the verifier version in settings.verifier_version
SCHEMAS = (SCHEMA_V1, SCHEMA)
MIN_VERIFIER = 2  # the lowest verifier version a graftbench.manifest/2 manifest may record
DIGEST_CHARS = 16
RUN_MANIFEST_NAME = "manifest.json"  # a run folder's sealed manifest (graftbench.results.runs.RunDir)
NO_STORE = "no store given with --store"  # why payloads were not checked when no store was given
_ENTRY_SECTIONS = {"problems": ("problem", "id"), "samples": ("sample", "problem_id")}
_UNSEALED = ("manifest_sha256", "sealed_fields")


class ManifestError(ValueError):
    """A manifest file that cannot be read at all (missing, not JSON, wrong schema)."""


class ManifestRefused(ManifestError):
    """A manifest file that exists but is not valid JSON, or is JSON that parsers may read differently (a repeated
    key, a lone surrogate, NaN): ``verify-manifest`` reports it like any other failed check (exit 1)."""


def _round(value: float) -> float:
    return round(float(value), 6)


def compute_totals(samples: list[dict]) -> dict:
    """Totals over samples: counts, accuracy, tokens (prefill, saved, decode), seconds, joules, grafts, fallbacks
    and certificates. ``decode_tokens_per_correct`` is ``None`` when nothing is correct. Seconds and joules are
    summed correctly rounded (:func:`graftbench.util.float_sums.total`), then rounded to 6 decimals.
    ``thinking_tokens`` (of the decode tokens, those of a thinking model's reasoning) is there only when a sample
    records it, so the totals of every run of a model that does not think are what they were."""
    n = len(samples)
    correct = sum(1 for s in samples if s["correct"])
    decode = sum(s["decode_tokens"] for s in samples)
    certified = [s["certified"] for s in samples if s.get("certified") is not None]
    thinking = [s["thinking_tokens"] for s in samples if isinstance(s.get("thinking_tokens"), int)]
    return {**({"thinking_tokens": sum(thinking)} if thinking else {}),
        "samples": n,
        "correct": correct,
        "accuracy": _round(correct / n) if n else 0.0,
        "decode_tokens": decode,
        "mean_decode_tokens": _round(decode / n) if n else 0.0,
        "decode_tokens_per_correct": _round(decode / correct) if correct else None,
        "prefill_tokens": sum(s["prefill_tokens"] for s in samples),
        "prefill_tokens_saved": sum(s["prefill_tokens_saved"] for s in samples),
        "grafts": sum(1 for s in samples if s["mode"] == "graft"),
        "fallbacks": sum(1 for s in samples if s.get("fallback")),
        "certified": sum(1 for c in certified if c),
        "certificate_mismatches": sum(1 for c in certified if not c),
        "finish_reasons": dict(sorted(Counter(s["finish_reason"] for s in samples).items())),
        "wall_s": _round(total(s["wall_s"] for s in samples)),
        "mean_ttft_s": _round(total(s["ttft_s"] for s in samples) / n) if n else 0.0,
        "energy_j": _round(total(s["energy_j"] for s in samples)),
    }


def graft_use(samples: list[dict]) -> dict:
    """What a graft run's samples grafted (the ``graft_use`` section of a run with ``--graft``; manifests written
    before it have none): ``grafted`` samples, ``baseline`` samples (no artifact routed, or one refused),
    ``fallbacks`` by the refusal's check (``cpu``, ``config``, ``hash``: the word before the first ``:`` of each
    sample's ``fallback``), and ``none_grafted``: true when the run grafted no artifact at all, which a run labelled
    a graft run must say."""
    grafted = sum(1 for s in samples if s.get("mode") == "graft")
    reasons = Counter(str(s["fallback"]).split(":", 1)[0] for s in samples if s.get("fallback"))
    return {"grafted": grafted, "baseline": len(samples) - grafted, "fallbacks": dict(sorted(reasons.items())),
            "none_grafted": grafted == 0}


def graft_use_note(manifest: dict) -> str | None:
    """The line a graft run's summary prints when it grafted no artifact (its ``graft_use`` says
    ``none_grafted``): how many samples ran as the baseline and the refusals by check; ``None`` otherwise (a run
    that grafted, a run without ``--graft``, a manifest written before ``graft_use``)."""
    use = manifest.get("graft_use")
    if not isinstance(use, dict) or use.get("none_grafted") is not True:
        return None
    reasons = use.get("fallbacks") if isinstance(use.get("fallbacks"), dict) else {}
    refused = ", ".join(f"{n} {check}" for check, n in reasons.items())
    why = f"artifacts refused ({refused}: each sample's fallback says why)" if refused else \
        "no artifact was routed to any problem (the store holds none under this pin, or none close enough)"
    return (f"this graft run grafted no artifact: all {use.get('baseline')} sample(s) ran as the baseline; {why}. "
            "Its manifest records it (graft_use.none_grafted)")


def environment(code: dict | None = None, code_resumed_from: list[dict] | None = None) -> dict:
    """Where the run happened and what ran it: Python, OS, machine, CPU model, native capability and kernel flags
    (:func:`graftbench.util.provenance.machine`; no host or user names) and ``code``, the code version
    (:func:`graftbench.util.provenance.code_version`: graftbench's version, the checkout's commit and whether its
    tracked files differed from it). Sealed with the rest of a manifest; not part of the pin (``config``), so no
    replay or comparison of runs looks at it. Raises nothing.

    ``code``: the code version read when the work started (what produced the result); ``None`` reads it now, which
    is right only when the work and the writing happen together (a checkout can move during a long run).
    ``code_resumed_from``: for a resumed run, the code versions of the earlier processes whose journal records the
    result includes (:attr:`graftbench.results.runs.RunDir.earlier_code`), recorded as ``code_resumed_from`` when
    not empty (a run that was not resumed has no such field)."""
    return {**machine(), "code": code if code is not None else code_version(),
            **({"code_resumed_from": list(code_resumed_from)} if code_resumed_from else {})}


def canonical_bytes(obj, schema: str = SCHEMA) -> bytes:
    """The bytes a manifest of ``schema`` commits to for ``obj``: RFC 8785 for ``graftbench.manifest/2``,
    :func:`graftbench.util.hashing.canonical_json` (UTF-8) for ``graftbench.manifest/1``."""
    return jcs_json(obj) if schema == SCHEMA else canonical_json(obj).encode("utf-8")


def seal_sha256(obj, schema: str = SCHEMA) -> str:
    """SHA-256 of :func:`canonical_bytes` of ``obj``: ``manifest_sha256`` over a manifest's body, and (cut to 16
    hex digits) every digest of ``sealed_fields``."""
    return sha256_bytes(canonical_bytes(obj, schema))


def recorded_reasoning(manifest: dict) -> tuple[str, str] | None:
    """The reasoning delimiters the run's layout names (``config.layout.reasoning``, an ``(open, close)`` pair), or
    ``None`` when it names none (a model that does not think, and every manifest written before they existed).
    Raises ``ValueError`` for a recorded value that is not two non-empty strings."""
    config = manifest.get("config")
    layout = config.get("layout") if isinstance(config, dict) else None
    pair = layout.get("reasoning") if isinstance(layout, dict) else None
    if not pair:
        return None
    if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(d, str) and d for d in pair):
        raise ValueError(f"config.layout.reasoning: {str(pair)[:80]!r} is not two non-empty strings")
    return pair[0], pair[1]


def recorded_verifier_version(manifest: dict) -> int:
    """The verifier version a run manifest's samples were scored under: ``settings.verifier_version``, or 1 for a
    manifest written before versions were recorded. Raises ``ValueError`` for a version this graftbench does not
    know."""
    settings = manifest.get("settings")
    version = settings.get("verifier_version", 1) if isinstance(settings, dict) else 1
    return check_version(version)


def verifier_floor(manifest: dict) -> list[str]:
    """The verifier version against what the manifest's schema requires: ``graftbench.manifest/2`` records it
    (``settings.verifier_version``, at least :data:`MIN_VERIFIER`), ``graftbench.manifest/1`` was written before
    versions were recorded and holds none (its samples are checked under verifier 1). One mismatch line, or none."""
    settings = manifest.get("settings")
    recorded = isinstance(settings, dict) and "verifier_version" in settings
    schema = manifest.get("schema")
    if schema == SCHEMA_V1:
        return [f"settings.verifier_version: not a field of {SCHEMA_V1}, written before verifier versions were "
                "recorded"] if recorded else []
    if not recorded:
        return [f"settings.verifier_version: missing; a {schema} manifest records the verifier version its samples "
                f"were scored under ({MIN_VERIFIER} or later)"]
    version = settings["verifier_version"]
    if isinstance(version, int) and not isinstance(version, bool) and version < MIN_VERIFIER:
        return [f"settings.verifier_version: {version} is lower than {schema} requires ({MIN_VERIFIER} or later)"]
    return []


def build_manifest(*, run: str, command: str, config: dict, config_fingerprint: str, settings: dict,
                   problem_set: dict, problems: list[dict], samples: list[dict], energy: dict,
                   store: str | None, extra: dict | None = None, code: dict | None = None,
                   code_resumed_from: list[dict] | None = None) -> dict:
    """Assemble a manifest dict and seal it with ``manifest_sha256``.

    ``problems`` are ``{"id", "problem_sha256", "key"}`` (and ``family`` when the set gives one); ``samples`` as
    written by :mod:`graftbench.eval.evaluate`. ``metrics`` holds :func:`run_metrics`. ``extra`` adds sections (sealed
    like the others), e.g. the ``merged_from`` of a merged run. ``code``: the code version read when the run
    started, recorded as ``environment.code``, and ``code_resumed_from`` those of the earlier processes of a resumed
    run (:func:`environment`; ``code`` ``None`` reads it now).
    """
    artifacts = sorted({s["artifact_id"]: s["artifact_tokens"] for s in samples if s.get("artifact_id")}.items())
    body = {
        "schema": SCHEMA,
        "run": run,
        "command": command,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": config,
        "config_fingerprint": config_fingerprint,
        "environment": environment(code, code_resumed_from),
        "settings": settings,
        "problem_set": problem_set,
        "problems": problems,
        "samples": samples,
        "artifacts": [{"id": a, "sha256": a, "tokens": t} for a, t in artifacts],
        "store": store,
        "energy": energy,
        "totals": compute_totals(samples),
        "metrics": run_metrics(samples, problems, settings),
        **(extra or {}),
    }
    body["sealed_fields"] = sealed_fields(body)
    return {**body, "manifest_sha256": seal_sha256(body)}


def run_metrics(samples: list[dict], problems: list[dict], settings: dict) -> dict:
    """The run's statistics (:func:`graftbench.results.metrics.summarize`: avg@N, pass@k, maj@N, intervals, copy
    controls), bootstrapped with the run's ``seed`` and comparing keys under its verifier version. Raises ``ValueError``
    as ``summarize`` does."""
    from .metrics import summarize

    seed = settings.get("seed", 0) if isinstance(settings, dict) else 0
    version = settings.get("verifier_version", 1) if isinstance(settings, dict) else 1
    return summarize(samples, problems, seed=seed if isinstance(seed, int) else 0, verifier_version=version)


def _digest(value, schema: str) -> str:
    return seal_sha256(value, schema)[:DIGEST_CHARS]


def _section_digest(value, schema: str):
    return {k: _digest(v, schema) for k, v in value.items()} if isinstance(value, dict) else _digest(value, schema)


def _entries(manifest: dict, section: str) -> list:
    value = manifest.get(section, [])
    return value if isinstance(value, list) else []


def _entry_id(entry, section: str) -> str:
    """An entry's name: a problem's id; a sample's ``<problem_id>#<sample_index>`` (its problem id alone in a
    manifest written before samples had an index)."""
    if not isinstance(entry, dict):
        return f"<{type(entry).__name__}>"
    name = str(entry.get(_ENTRY_SECTIONS[section][1]))
    return f"{name}#{entry['sample_index']}" if section == "samples" and "sample_index" in entry else name


def sealed_fields(body: dict) -> dict:
    """Short digests of every top-level section (``sections``; one per key for an object such as ``config``) and
    of every field of every problem and sample (``problems`` / ``samples``, keyed by id): what lets
    :func:`verify_manifest` name the field that changed. Digests follow the body's ``schema`` convention."""
    schema = body.get("schema") if body.get("schema") in SCHEMAS else SCHEMA
    digests = {"sections": {k: _section_digest(v, schema) for k, v in body.items()
                            if k not in (*_ENTRY_SECTIONS, *_UNSEALED)}}
    for section in _ENTRY_SECTIONS:
        digests[section] = {
            _entry_id(entry, section): {f: _digest(v, schema) for f, v in entry.items()} if isinstance(entry, dict)
            else {"": _digest(entry, schema)}
            for entry in _entries(body, section)
        }
    return digests


def write_manifest(manifest: dict, path: str | Path) -> None:
    """Write the manifest's canonical bytes (:func:`canonical_bytes` under its ``schema``) and a newline
    atomically (see :func:`graftbench.util.durable.write_atomic`)."""
    from ..util.durable import write_file_atomic

    write_file_atomic(Path(path), canonical_bytes(manifest, manifest.get("schema", SCHEMA)) + b"\n")


def run_folder_manifest(folder: str | Path) -> Path:
    """``folder/manifest.json``, the sealed manifest of the run folder ``folder`` (it may not exist). Raises
    :class:`ManifestError` naming the folder and the file when that name exists but is not a regular file inside
    the folder: a symlink whose target lies outside it (a run folder's files are never followed out of it;
    :meth:`graftbench.results.runs.RunDir.check_own_files` holds the same for its other files), a symlink to
    nothing, a folder, a FIFO or a device (none is opened). A manifest named by its own path, not through a
    folder, is the caller's choice."""
    held = Path(folder) / RUN_MANIFEST_NAME
    if not os.path.lexists(held):
        return held
    where = f"run folder '{folder}':"
    try:
        check_within(held, folder, where)
    except UnsafeFileError as exc:
        raise ManifestError(f"{exc.strerror}; a run's files are never followed out of its folder: name the "
                            "manifest by its own path if it is meant") from None
    try:
        regular_file_size(held, what=where)
    except FileNotFoundError:
        raise ManifestError(f"{where} {held} is a symlink to {os.readlink(held)}, which does not exist") from None
    except OSError as exc:  # a folder, a FIFO, a device (UnsafeFileError names it), or unreadable
        shown = exc.strerror if isinstance(exc, (UnsafeFileError, IsADirectoryError)) else \
            f"{where} {held} cannot be read ({exc.strerror or exc})"
        raise ManifestError(str(shown)) from None
    return held


def load_manifest(path: str | Path, schema: str | tuple[str, ...] = SCHEMAS) -> dict:
    """Read a manifest of ``schema`` with :func:`graftbench.util.strict_json.load_strict`.

    Raises :class:`ManifestError` naming the path when it is missing, a directory, not valid JSON (``NaN`` and
    ``Infinity`` included), JSON that parsers may read differently (an object repeating a key, a lone-surrogate
    ``\\u`` escape, a number too large for a float: the message names the key or the place), not a regular file
    of at most :data:`graftbench.util.safe_files.MAX_JSON_BYTES` (a FIFO, a device), or not a ``schema`` document."""
    try:
        manifest = load_strict(path)
    except FileNotFoundError as exc:
        raise ManifestError(f"manifest '{path}' does not exist") from exc
    except IsADirectoryError as exc:
        raise ManifestError(f"manifest '{path}' is a directory") from exc
    except OSError as exc:  # a FIFO, a device, over the size cap (UnsafeFileError), or unreadable
        raise ManifestError(f"manifest '{path}' cannot be read: {exc.strerror or exc}") from exc
    except StrictJSONError as exc:
        raise ManifestRefused(f"manifest '{path}' {exc.reason}") from exc
    accepted = (schema,) if isinstance(schema, str) else schema
    if not isinstance(manifest, dict) or manifest.get("schema") not in accepted:
        raise ManifestError(f"manifest '{path}' is not a {' or '.join(accepted)} document")
    return manifest


def _check_sample(sample: dict, known: dict[str, dict], version: int,
                  reasoning: tuple[str, str] | None = None) -> list[str]:
    sid = sample.get("problem_id")
    where = f"sample {_entry_id(sample, 'samples')}"
    mismatches = []
    if not isinstance(sid, str) or sid not in known:
        return [f"{where}: problem_id is not among the manifest's problems"]
    key = known[sid].get("key")
    if sample.get("key") != key:
        mismatches.append(f"{where}: key {sample.get('key')!r} differs from the problem's key {key!r}")
    if sample.get("problem_sha256") != known[sid].get("problem_sha256"):
        mismatches.append(f"{where}: problem_sha256 differs from the problem's problem_sha256")
    output = sample.get("output")
    if not isinstance(output, str) or sha256_text(output) != sample.get("output_sha256"):
        mismatches.append(f"{where}: output_sha256 does not match the stored output")
    if any(name in sample for name in PROGRAM_FIELDS):
        mismatches += _check_program(sample, where)
    verdict = sample_verdict(sample, version, reasoning)
    if verdict.extracted != sample.get("extracted"):
        mismatches.append(f"{where}: extracted recorded {sample.get('extracted')!r}, re-extracted {verdict.extracted!r}")
    if verdict.correct != sample.get("correct"):
        mismatches.append(f"{where}: correct recorded {sample.get('correct')!r}, re-verified {verdict.correct!r}")
    certificate = sample.get("certificate_sha256")
    if certificate is not None and sample.get("certified") != (certificate == sample.get("logits_sha256")):
        mismatches.append(f"{where}: certified does not match certificate_sha256 against logits_sha256")
    return mismatches


def _check_program(sample: dict, where: str) -> list[str]:
    """A program-mode sample's own record: every program field present, the program the one in its output, the
    stdout hash, a known stopped reason. The verdict is re-checked from the recorded stdout; no program is run."""
    mismatches = []
    absent = [name for name in PROGRAM_FIELDS if name not in sample]
    if absent:
        mismatches.append(f"{where}: program fields {absent} are missing")
    output, program, stdout = sample.get("output"), sample.get("program"), sample.get("stdout")
    if not isinstance(program, str) or not isinstance(output, str) or extract_program(output) != program:
        mismatches.append(f"{where}: program is not the program extracted from the stored output")
    if not isinstance(stdout, str) or sha256_text(stdout) != sample.get("stdout_sha256"):
        mismatches.append(f"{where}: stdout_sha256 does not match the stored stdout")
    if sample.get("stopped") is not None and sample.get("stopped") not in STOPPED:
        mismatches.append(f"{where}: stopped {sample.get('stopped')!r} is not a known reason")
    return mismatches


def _check_structure(manifest: dict) -> list[str]:
    mismatches = []
    for section, (label, id_field) in _ENTRY_SECTIONS.items():
        value = manifest.get(section, [])
        if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
            mismatches.append(f"{section}: not a list of objects")
            continue
        ids = [_entry_id(e, section) for e in value]
        mismatches += [f"{label} {i}: {id_field} appears {ids.count(i)} times" for i in sorted(set(ids)) if ids.count(i) > 1]
    return mismatches


def _changed(name: str, sealed: dict, current: dict) -> str:
    state = "removed" if name not in current else "added" if name not in sealed else "changed"
    return f"{name} {state} since the manifest was sealed"


def _diff_digests(sealed, current: dict, prefix: str) -> list[str]:
    sealed = sealed if isinstance(sealed, dict) else {}
    names = sorted(set(sealed) | set(current))
    return [prefix + _changed(n, sealed, current) for n in names if sealed.get(n) != current.get(n)]


def _check_digests(manifest: dict) -> tuple[list[str], str | None]:
    sealed = manifest.get("sealed_fields")
    if sealed is None:
        return [], "no sealed_fields (an older manifest): an edit shows as manifest_sha256 only"
    if not isinstance(sealed, dict) or not all(isinstance(sealed.get(k), dict) for k in ("sections", *_ENTRY_SECTIONS)):
        return ["sealed_fields: not a map of sections, problems and samples"], None
    try:
        current = sealed_fields({k: v for k, v in manifest.items() if k not in _UNSEALED})
    except (ValueError, UnicodeEncodeError):
        return ["sealed_fields: cannot be recomputed (a value cannot be canonicalized)"], None
    mismatches = []
    old_sections, new_sections = sealed["sections"], current["sections"]
    for name in sorted(set(old_sections) | set(new_sections)):
        old, new = old_sections.get(name), new_sections.get(name)
        if isinstance(old, dict) and isinstance(new, dict):
            mismatches += _diff_digests(old, new, f"{name}.")
        elif old != new:
            mismatches.append(_changed(name, old_sections, new_sections))
    for section, (label, _) in _ENTRY_SECTIONS.items():
        old, new = sealed[section], current[section]
        for entry_id in sorted(set(old) | set(new)):
            if entry_id in old and entry_id in new:
                mismatches += _diff_digests(old[entry_id], new[entry_id], f"{label} {entry_id}: ")
            else:
                mismatches.append(f"{label} {_changed(entry_id, old, new)}")
    return mismatches, None


def _recorded_artifacts(samples: list[dict]) -> list[dict]:
    used = {s["artifact_id"]: s.get("artifact_tokens") for s in samples if s.get("artifact_id")}
    return [{"id": a, "sha256": a, "tokens": t} for a, t in sorted(used.items())]


def _check_derived(manifest: dict, problems_list: list[dict], samples: list[dict]) -> list[str]:
    """Values that can be re-derived from others: the config fingerprint, the artifact list, what a graft run
    grafted (``graft_use``, where recorded), the problem count."""
    mismatches = []
    config = manifest.get("config")
    if isinstance(config, dict):
        recomputed = pin_fingerprint(config)
        if recomputed != manifest.get("config_fingerprint"):
            mismatches.append(f"config_fingerprint: recorded {str(manifest.get('config_fingerprint'))[:16]!r}, "
                            f"recomputed from config {recomputed[:16]!r}")
    try:
        artifacts = _recorded_artifacts(samples)
    except (TypeError, AttributeError):
        artifacts = None
    if artifacts is not None and manifest.get("artifacts", []) != artifacts:
        mismatches.append("artifacts: the list differs from the artifacts the samples used")
    if "graft_use" in manifest:
        try:
            use = graft_use(samples)
        except (TypeError, AttributeError):
            use = None
        if manifest["graft_use"] != use:
            mismatches.append(f"graft_use: recorded {str(manifest['graft_use'])[:120]}, recomputed from the samples "
                              f"{str(use)[:120]}")
    problem_set = manifest.get("problem_set")
    if isinstance(problem_set, dict) and problem_set.get("n") != len(problems_list):
        mismatches.append(f"problem_set.n: recorded {problem_set.get('n')!r}, the manifest lists {len(problems_list)}")
    return mismatches


def _check_metrics(manifest: dict, problems_list: list[dict], samples: list[dict]) -> list[str]:
    """The ``metrics`` section against a recompute from the samples (absent in manifests written before it)."""
    if "metrics" not in manifest:
        return []
    recorded = manifest["metrics"] if isinstance(manifest["metrics"], dict) else {}
    try:
        metrics = recompute(lambda: run_metrics(samples, problems_list, manifest.get("settings")), recorded)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError, ZeroDivisionError) as exc:
        return [f"metrics cannot be recomputed from the samples ({exc!r})"]
    return [f"metrics.{name}: recorded {str(recorded.get(name))[:80]}, recomputed {str(metrics.get(name))[:80]}"
            for name in sorted(set(metrics) | set(recorded), key=str) if metrics.get(name) != recorded.get(name)]


def _check_totals(manifest: dict, samples: list[dict]) -> list[str]:
    recorded = manifest.get("totals", {})
    recorded = recorded if isinstance(recorded, dict) else {}
    try:
        totals = recompute(lambda: compute_totals(samples), recorded)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        return [f"totals cannot be recomputed: a sample lacks a field or has a wrong type ({exc!r})"]
    return [
        f"totals.{name}: recorded {recorded.get(name)!r}, recomputed {totals.get(name)!r}"
        for name in sorted(set(totals) | set(recorded), key=str) if totals.get(name) != recorded.get(name)
    ]


def _check_artifacts(manifest: dict, store: str | Path | None,
                     require: bool = False) -> tuple[list[str], str, str | None]:
    """Artifact list and payloads: ``(mismatches, note, unchecked)``. An artifact the store (a folder, or a URL
    such as ``s3://bucket/prefix``, read from the objects themselves) holds is hashed (a different payload is a
    mismatch); one it does not hold, or no store at all, or a URL store that cannot be reached, is counted as not
    checked (``unchecked`` says how many and why; ``None`` when every listed payload was checked), and is a
    mismatch only when ``require``. A file the folder store holds under the artifact's name but that is refused
    (not a regular file, a symlink leaving the store, over the size cap: :mod:`graftbench.util.safe_files`) is
    always a mismatch."""
    mismatches = []
    entries = manifest.get("artifacts", [])
    entries = [a for a in entries if isinstance(a, dict)] if isinstance(entries, list) else []
    listed = {a.get("id"): a for a in entries if isinstance(a.get("id"), str)}
    for sample in _entries(manifest, "samples"):
        artifact_id = sample.get("artifact_id") if isinstance(sample, dict) else None
        if artifact_id and (not isinstance(artifact_id, str) or artifact_id not in listed):
            mismatches.append(f"sample {sample.get('problem_id')}: artifact_id {str(artifact_id)[:16]} is not listed in artifacts")
    bad = [a for a in listed if not is_artifact_id(a)]
    mismatches += [f"artifacts: id {a[:40]!r} is not 64 lowercase hex digits (not looked up)" for a in bad]
    listed = {a: e for a, e in listed.items() if a not in bad}
    if not listed:
        return mismatches, "no artifacts used", None
    digest_of, absence = _payload_reader(store)
    if digest_of is None:
        if require:
            mismatches.append(f"artifacts: {len(listed)} required but {absence}")
            return mismatches, f"{len(listed)} artifact payloads not checked ({absence})", None
        unchecked = f"{len(listed)} artifact payloads not checked ({absence})"
        return mismatches, unchecked, unchecked
    unchecked = {"absent from the store": 0, "cannot be read": 0}
    checked = 0
    for artifact_id, entry in listed.items():
        try:
            digest = digest_of(artifact_id)
        except UnsafeFileError as exc:
            mismatches.append(f"artifact {artifact_id[:16]}: {exc}")
            continue
        except OSError as exc:
            digest, reason, why = None, "cannot be read", f"cannot be read from store {store}: {exc}"
        else:
            reason, why = "absent from the store", f"absent from store {store}"
        if digest is None:
            unchecked[reason] += 1
            if require:
                mismatches.append(f"artifact {artifact_id[:16]}: {why}")
            continue
        checked += 1
        if digest != entry.get("sha256") or entry.get("sha256") != artifact_id:
            mismatches.append(f"artifact {artifact_id[:16]}: payload SHA-256 differs from the manifest")
    note = f"{checked} artifact payloads checked against {store}"
    left = [f"{n} not checked ({reason})" for reason, n in unchecked.items() if n]
    missed = None if require or not left else f"{len(listed)} artifact payloads: " + ", ".join(left)
    return mismatches, note + "".join(f", {line}" for line in left), missed


def _payload_reader(store: str | Path | None):
    """``(digest_of, None)``: ``digest_of(artifact_id)`` gives the SHA-256 of the payload ``store`` holds
    (``None`` when it holds none; :class:`OSError` when it cannot be read); or ``(None, why)`` when there is no
    store to read (none given, no folder, a URL store that cannot be opened). Only ``store`` is ever read: the store
    a manifest records is data, never opened or contacted."""
    from ..store.folder import is_store_url

    if store is None:
        return None, NO_STORE
    if is_store_url(store):
        from ..store.codec import ArtifactError
        from ..store.object_store import ObjectStore
        from ..store.index import StoreError

        try:
            opened = ObjectStore(store, readonly=True)
        except StoreError as exc:
            return None, f"store {store} cannot be opened: {exc}"

        def object_digest(artifact_id: str) -> str | None:
            try:
                return opened.payload_sha256(artifact_id)
            except ArtifactError as exc:  # check "read": the object is there but cannot be read
                raise OSError(str(exc)) from exc

        return object_digest, None
    root = Path(store)
    if not artifacts_dir(root).is_dir():
        return None, f"no store at {root}"

    def digest_of(artifact_id: str) -> str | None:
        path = artifact_path(root, artifact_id)
        if not os.path.lexists(path):
            return None
        return sha256_regular(path, max_bytes=MAX_ARTIFACT_BYTES, within=root, what="artifact file")

    return digest_of, None


def store_unreadable(store: str | Path) -> str | None:
    """Why ``store`` (a folder, or a URL such as ``s3://bucket/prefix``, as given with ``--store``) cannot be read
    for artifact payloads (no such path, a folder that is not a store, a URL store that cannot be opened); ``None``
    when it can. Only ``store`` is read (:func:`_payload_reader`)."""
    from ..store.folder import is_store_url

    if not is_store_url(store) and not os.path.lexists(store):
        return f"{store}: no such folder"
    digest_of, why = _payload_reader(store)
    return None if digest_of is not None else why


def _check_seal(manifest: dict) -> list[str]:
    """``manifest_sha256`` against the body's canonical bytes under its schema; a body that cannot be
    canonicalized (a value RFC 8785 cannot carry) is a mismatch too."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    try:
        sealed = seal_sha256(body, manifest["schema"])
    except (ValueError, UnicodeEncodeError) as exc:
        return [f"the manifest cannot be canonicalized under {manifest['schema']} ({exc})"]
    return [] if sealed == manifest.get("manifest_sha256") else ["manifest_sha256 does not match the manifest's content"]


def verify_manifest(path: str | Path, store: str | Path | None = None,
                    require_artifacts: bool = False) -> tuple[list[str], list[str]]:
    """Re-check a manifest without a model: its own hash, the verifier version its schema requires
    (:func:`verifier_floor`), the sealed field digests (naming each section, problem or
    sample field that changed), every output hash, every verdict (re-extracted and re-verified from the stored
    output and key; a program-mode sample's from its recorded stdout, with its program and stdout hash, and no
    program is ever run), problem hashes and keys, the totals, the config fingerprint, the artifact list, and
    artifact payloads when a store is given (``store``: a folder, or a URL such as ``s3://bucket/prefix`` whose
    objects are read). The ``store`` field a manifest records is data: it is never opened or contacted, so
    without ``store`` no payload is checked (the note says so). An artifact the store does not hold, or a store
    that cannot be reached, is reported as not checked, not as a mismatch, unless ``require_artifacts``.

    Returns ``(mismatches, notes)``: it holds only when ``mismatches`` is empty. Raises :class:`ManifestError`
    when the file is not a manifest at all; any edit inside a manifest is a mismatch, never an exception.
    """
    return check_manifest(load_manifest(path), store, require_artifacts)


def check_manifest(manifest: dict, store: str | Path | None = None,
                   require_artifacts: bool = False) -> tuple[list[str], list[str]]:
    """:func:`verify_manifest` on a manifest already loaded (:func:`load_manifest`), so that a caller who checks it
    and then uses it reads the file once. Returns ``(mismatches, notes)`` as :func:`verify_manifest` does."""
    checked = check_body(manifest, store, require_artifacts)
    return checked.mismatches, checked.notes


@dataclass(frozen=True)
class BodyCheck:
    """What :func:`check_body` found: ``mismatches`` and ``notes`` as :func:`verify_manifest` returns them, and
    ``unchecked_payloads``: how many artifact payloads were not checked and why (no store, absent from it), or
    ``None`` when every payload the manifest lists was checked (or it lists none, or ``require_artifacts`` made
    each one a mismatch)."""

    mismatches: list[str]
    notes: list[str]
    unchecked_payloads: str | None


def check_body(manifest: dict, store: str | Path | None = None, require_artifacts: bool = False) -> BodyCheck:
    """:func:`check_manifest`, with what it could not check kept apart (:class:`BodyCheck`)."""
    mismatches, notes = _check_seal(manifest) + verifier_floor(manifest), []
    digest_problems, digest_note = _check_digests(manifest)
    mismatches += _check_structure(manifest) + digest_problems
    problems_list = [p for p in _entries(manifest, "problems") if isinstance(p, dict)]
    samples = [s for s in _entries(manifest, "samples") if isinstance(s, dict)]
    known = {p["id"]: p for p in problems_list if isinstance(p.get("id"), str)}
    try:
        version = recorded_verifier_version(manifest)
    except ValueError as exc:
        version = None
        mismatches.append(f"settings.verifier_version: {exc}; no verdict could be re-checked")
    try:
        reasoning = recorded_reasoning(manifest)
    except ValueError as exc:
        version = None
        mismatches.append(f"{exc}; no verdict could be re-checked")
    for sample in samples if version is not None else []:
        mismatches.extend(_check_sample(sample, known, version, reasoning))
    mismatches += _check_totals(manifest, samples) + _check_derived(manifest, problems_list, samples)
    mismatches += _check_metrics(manifest, problems_list, samples)
    artifact_problems, note, unchecked = _check_artifacts(manifest, store or None, require_artifacts)
    mismatches.extend(artifact_problems)
    notes.append(f"{len(samples)} samples re-verified under verifier {version}; {note}")
    if digest_note:
        notes.append(digest_note)
    return BodyCheck(mismatches, notes, unchecked)
