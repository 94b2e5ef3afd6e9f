"""Exactness manifests (``check-exact``): build, seal, verify and compare pins. Imports no torch.

An exactness manifest is also the pre-registered expectation that ``check-exact --expect`` replays: it records
the full config pin and, per pair, the token ids' hash, the artifact id and the graft's logits hash.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from .fingerprint import UNPINNED_FIELDS
from ..util.durable import append_json_line
from ..util.float_sums import recompute, total
from ..util.hashing import sha256_json
from ..util.isa import environment as cpu_environment
from ..util.isa import KIND_FIELDS as CPU_KIND_FIELDS
from ..util.isa import UNPROVEN_FIELDS, same_cpu_kind
from ..util.provenance import code_version
from .manifest import ManifestError, environment, load_manifest
from .runs import UNRECORDED_CODE
from ..util.strict_json import loads_strict

SCHEMA = "graftbench.exactness/1"
# Besides the pin's own unpinned fields, a replay ignores the eval prompt layout: check-exact builds its pairs from
# its own pair layout, recorded in the settings.
REPLAY_UNPINNED_FIELDS = (*UNPINNED_FIELDS, "layout")


def control_table(records: list[dict]) -> dict[str, dict]:
    """Per control, over the pairs that ran it: pairs, exact pairs, max |Δlogit|, mean of per-pair mean KL,
    max of per-pair p99 KL (nats), mean argmax agreement (fraction). Means are sums by
    :func:`graftbench.util.float_sums.total` over the count."""
    names = sorted({name for r in records for name in r.get("controls", {})})
    table = {}
    for name in names:
        rows = [r["controls"][name] for r in records if name in r.get("controls", {})]
        table[name] = {
            "pairs": len(rows),
            "exact_pairs": sum(1 for row in rows if row["equal"]),
            "max_abs_delta": max(row["max_abs_delta"] for row in rows),
            "kl_mean": total(row["kl_mean"] for row in rows) / len(rows),
            "kl_p99": max(row["kl_p99"] for row in rows),
            "argmax_agreement": total(row["argmax_agreement"] for row in rows) / len(rows),
        }
    return table


def exactness_totals(records: list[dict]) -> dict:
    """Pairs, byte-exact pairs (graft hash equal to fresh hash), worst graft-vs-fresh figures, kinds, controls."""
    return {
        "pairs": len(records),
        "exact_pairs": sum(1 for r in records if r["graft_logits_sha256"] == r["fresh_logits_sha256"]),
        "max_abs_delta": max((r["max_abs_delta"] for r in records), default=0.0),
        "kl_max": max((r["kl_max"] for r in records), default=0.0),
        "min_argmax_agreement": min((r["argmax_agreement"] for r in records), default=1.0),
        "max_artifact_tokens": max((r["artifact_tokens"] for r in records), default=0),
        "kinds": {k: sum(1 for r in records if r["kind"] == k) for k in sorted({r["kind"] for r in records})},
        "controls": control_table(records),
    }


def build_exactness_manifest(*, config: dict, config_fingerprint: str, problem_set: dict, settings: dict,
                             records: list[dict], code: dict | None = None,
                             code_resumed_from: list[dict] | None = None) -> dict:
    """Assemble and seal (``manifest_sha256``) an exactness manifest; ``code`` is the code version read when the
    check started (``environment.code``: :func:`graftbench.results.manifest.environment`; ``None`` reads it now) and
    ``code_resumed_from`` those of the earlier processes whose journalled pair records it reuses
    (``environment.code_resumed_from``, only when not empty)."""
    body = {
        "schema": SCHEMA,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": config,
        "config_fingerprint": config_fingerprint,
        "environment": environment(code, code_resumed_from),
        "problem_set": problem_set,
        "settings": settings,
        "pairs": records,
        "totals": exactness_totals(records),
    }
    return seal_exactness_manifest(body)


def reused_code(extended: dict | None, journal: list[dict]) -> list[dict]:
    """The distinct code versions of the earlier processes whose pair records a check may reuse, in order: those
    that made the expectation ``extended`` it extends (``--extend``; its ``environment.code``, or
    :data:`graftbench.results.runs.UNRECORDED_CODE` for one written before the field, then its
    ``environment.code_resumed_from``), then those of its run folder's journal (``journal``:
    :attr:`graftbench.results.runs.RunDir.earlier_code`). What becomes the manifest's
    ``environment.code_resumed_from``."""
    found: list[dict] = []
    recorded = (extended or {}).get("environment") or {}
    made = [recorded.get("code") or dict(UNRECORDED_CODE), *(recorded.get("code_resumed_from") or [])] \
        if extended else []
    for code in [*made, *journal]:
        if code not in found:
            found.append(code)
    return found


def seal_holds(manifest: dict) -> bool:
    """Whether ``manifest``'s ``manifest_sha256`` is the SHA-256 of the rest of it (:func:`seal_exactness_manifest`)."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return sha256_json(body) == manifest.get("manifest_sha256")


def seal_exactness_manifest(manifest: dict) -> dict:
    """``manifest`` (an exactness manifest's fields; a ``manifest_sha256`` it holds is dropped) sealed again: the
    same fields and ``manifest_sha256``, the SHA-256 of :func:`graftbench.util.hashing.canonical_json` of the rest.
    What :func:`verify_exactness_manifest` re-checks; anyone can call it, so the seal proves no origin (see
    :mod:`graftbench.results.anchor`)."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return {**body, "manifest_sha256": sha256_json(body)}


def verify_exactness_manifest(manifest: dict) -> list[str]:
    """Re-check the seal and recompute the totals from the pair records; returns mismatches (empty if it holds).

    The totals hold when they equal a recomputation under one of the summations graftbench has written float
    totals with (:func:`graftbench.util.float_sums.recompute`: Python's ``sum`` changed in 3.12); a mismatch is
    reported against the recomputation that differs in the fewest totals."""
    mismatches = []
    if not seal_holds(manifest):
        mismatches.append("manifest_sha256 does not match the manifest's content")
    for record in manifest.get("pairs", []):
        if record.get("equal") != (record.get("graft_logits_sha256") == record.get("fresh_logits_sha256")):
            mismatches.append(f"pair {record.get('id')}: equal does not match its two logits hashes")
    recorded = manifest.get("totals", {})
    try:
        totals = recompute(lambda: exactness_totals(manifest.get("pairs", [])), recorded)
    except (KeyError, TypeError, ValueError, OverflowError, ZeroDivisionError) as exc:
        return mismatches + [f"totals cannot be recomputed ({exc})"]
    for name in sorted(set(totals) | set(recorded)):
        if totals.get(name) != recorded.get(name):
            mismatches.append(f"totals.{name}: recorded {recorded.get(name)!r}, recomputed {totals.get(name)!r}")
    return mismatches


def pin_differences(expected: dict, current: dict) -> list[str]:
    """Fields of two config pins that differ (nested dicts as ``a.b``), ignoring :data:`REPLAY_UNPINNED_FIELDS`."""
    differing = []
    for name in sorted(set(expected) | set(current)):
        if name in REPLAY_UNPINNED_FIELDS:
            continue
        a, b = expected.get(name), current.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            differing += [f"{name}.{sub}" for sub in pin_differences(a, b)]
        elif a != b:
            differing.append(name)
    return differing


def load_expectation(path) -> dict:
    """Read an exactness manifest (to verify, or to replay through :func:`load_sealed_expectation`); raises
    :class:`graftbench.results.manifest.ManifestError` if it is not one."""
    return load_manifest(path, schema=SCHEMA)


def load_sealed_expectation(path) -> dict:
    """:func:`load_expectation`, for a replay: also refuses (:class:`graftbench.results.manifest.ManifestError`,
    naming ``path``) an expectation whose ``manifest_sha256`` is not the SHA-256 of its content, since a replay logs
    its outcome under that id: a changed copy would otherwise be replayed and logged as the expectation it was copied
    from. ``verify-manifest`` reads such a file and reports every mismatch instead. Also refuses one that is not shaped
    as an exactness manifest (:func:`graftbench.results.anchor.exactness_shape`: a field missing or of another
    kind, ``config`` not an object, ``pairs`` not a list of pair records), re-sealed or not, naming ``path`` and what
    is wrong, before anything reads its pin."""
    from .anchor import exactness_shape

    manifest = load_expectation(path)
    if not seal_holds(manifest):
        raise ManifestError(f"{path}: its manifest_sha256 is not the SHA-256 of its content (it was changed after it "
                            "was sealed): a replay would log it under an id that is not its own; check it with "
                            "`graftbench verify-manifest`")
    shape = exactness_shape(manifest)
    if shape:
        shown = "; ".join(shape[:5]) + (f"; and {len(shape) - 5} more" if len(shape) > 5 else "")
        raise ManifestError(f"{path}: not an exactness manifest a replay can read: {shown}")
    return manifest


REPLAY_SCHEMA = "graftbench.replay/1"


def replay_record(expected: dict, *, compared: int, equal: int, first_difference: str | None,
                  pin_differences_found: list[str], replayed_gpu: str | None = None,
                  across_cpu_kinds: dict | None = None, code: dict | None = None) -> dict:
    """One line of a replay log: which expectation (by its ``manifest_sha256``) was replayed where, under which
    pin, and with what outcome. ``recorded_on`` and ``replayed_on`` name the CPUs (model and native capability)
    and, for a run on a GPU, the GPU (``gpu``: the recorded pin's ``accelerator.gpu``, and ``replayed_gpu``);
    ``code`` the code version that replayed it (:func:`graftbench.util.provenance.code_version`, read when the
    replay started; ``None`` reads it now).
    ``across_cpu_kinds`` (``{"recorded_only": [...], "replayed_only": [...]}``, the CPU features that differ; only
    when given): the pairs were compared although the pin differs in ``pin_differences_found``, CPU features alone
    (``check-exact --across-cpu-kinds``, :mod:`graftbench.eval.replay_committed`), so the record verifies no CPU
    (:func:`verified_cpus`)."""
    recorded = expected.get("environment", {})
    recorded_gpu = (expected["config"].get("accelerator") or {}).get("gpu")
    return {
        "schema": REPLAY_SCHEMA,
        "replayed_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "expectation_sha256": expected.get("manifest_sha256"),
        "model": expected["config"].get("model"),
        "dtype": expected["config"].get("dtype"),
        "isa": expected["config"].get("isa", "native"),
        "recorded_on": {**{k: recorded[k] for k in CPU_KIND_FIELDS if k in recorded},
                        **({"gpu": recorded_gpu} if recorded_gpu else {})},
        "replayed_on": {**cpu_environment(), **({"gpu": replayed_gpu} if replayed_gpu else {})},
        "code": code if code is not None else code_version(),
        "compared": compared,
        "equal": equal,
        "first_difference": first_difference,
        "pin_differences": pin_differences_found,
        **({"across_cpu_kinds": across_cpu_kinds} if across_cpu_kinds is not None else {}),
    }


def replay_log_refusal(log: Path, here: dict) -> str | None:
    """Why a replay on a CPU of environment ``here`` (:func:`graftbench.util.isa.environment`) may not append its
    record to ``log``, asked before the replay starts (a replay may take hours; its record is written at the end):
    ``log`` is a folder or its folder does not exist; ``log`` exists and is not a regular file (a FIFO, whose append
    would block after the replay, or a device); or ``log`` (or the file a link there leads to) is a replay log of CPUs
    (named as :data:`graftbench.results.layout.REPLAY_LOG`) and ``here`` is an emulated CPU or one whose emulation
    could not be checked, whose replays prove no pin on any CPU. ``None`` when it may."""
    from .layout import EMULATED_REPLAY_LOG, REPLAY_LOG

    if log.is_dir() or not log.parent.is_dir():
        return (f"--log {log}: {'is a folder' if log.is_dir() else 'its folder does not exist'}; the replay record is "
                "appended to a file there")
    if log.exists() and not log.is_file():
        return f"--log {log}: not a regular file (a FIFO or a device); the replay record is appended to a file"
    unproven = [field for field in UNPROVEN_FIELDS if here.get(field)]
    if unproven and REPLAY_LOG.name in (log.name, log.resolve().name):
        return (f"--log {log}: this CPU is {'emulated' if 'emulated' in unproven else 'not checked for emulation'} "
                f"({unproven[0]}), and a replay here proves no pin on any CPU; log it to {EMULATED_REPLAY_LOG.name} "
                f"(an emulated CPU) or another file, never to {REPLAY_LOG.name}")
    return None


def append_replay_log(path, record: dict) -> None:
    """Append one replay record as a JSON line to ``path`` (a log, never rewritten; see
    :func:`graftbench.util.durable.append_json_line`)."""
    append_json_line(Path(path), record, f"the replay record of {record.get('expectation_sha256', '')[:16]}")


def read_replay_log(path) -> list[dict]:
    """The records of a replay log (``[]`` when the file does not exist), each line read with
    :func:`graftbench.util.strict_json.loads_strict`. Raises ``ValueError`` naming the line that is not a JSON object
    (:class:`~graftbench.util.strict_json.StrictJSONError`, a ``ValueError``, for a line that is not strict JSON: an
    object repeating a key, ``NaN``, a lone surrogate); ``UnicodeDecodeError`` for a file that is not UTF-8."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = loads_strict(line, source=f"{path} line {number}")
        if not isinstance(record, dict):
            raise ValueError(f"{path} line {number}: not a JSON object")
        records.append(record)
    return records


def verified_cpus(expected: dict, records: list[dict]) -> list[dict]:
    """The CPUs (recorded environments, see :func:`graftbench.util.isa.environment`) on which ``expected`` is known to
    reproduce: the one it was recorded on, plus every CPU on which a logged replay of this very expectation (same
    ``manifest_sha256``, no pin difference) found every compared pair equal."""
    verified = [expected.get("environment", {})]
    for record in records:
        if (record.get("expectation_sha256") == expected.get("manifest_sha256") and not record.get("pin_differences")
                and record.get("compared", 0) > 0 and record.get("compared") == record.get("equal")):
            verified.append(record.get("replayed_on", {}))
    return [env for env in verified if env.get("cpu_model")]


def known_to_reproduce(expected: dict, records: list[dict], here: dict) -> bool:
    """Whether the CPU ``here`` is of a kind (:func:`graftbench.util.isa.same_cpu_kind`) in :func:`verified_cpus`."""
    return any(same_cpu_kind(env, here) for env in verified_cpus(expected, records))
