"""Who wrote an artifact: the kind of CPU (and the pin) a deposit ran on, kept beside the artifact, outside its bytes.

Two CPUs can share one pin (its fingerprint) and still compute other bytes: expectations recorded under ``--isa
avx2`` on an AMD EPYC differ from an Intel Xeon's at the first pair (``manifests/replays.jsonl``), while neither pin
field tells them apart. So an artifact written under a pin that is not proven portable
(:data:`PORTABLE_PINS`) is grafted only on the kind of CPU that wrote it (:func:`kind_refusal`); on another
kind it is refused like an artifact of another pin.

The kind is :func:`graftbench.util.isa.environment` (the CPU's model name, native capability and kernel flags,
compared with :func:`graftbench.util.isa.same_cpu_kind`), the same record a manifest's environment carries. It is
never part of the artifact's bytes, so an artifact's id (the SHA-256 of its bytes) stays what it was and every
committed exactness expectation replays with the same ids. Each deposit writes one small *writer record* (canonical
JSON: the artifact id, the CPU kind, the deposit's pin) to ``<store>/writers/<id>.<digest>.json``, ``<digest>`` being
the first 16 hex digits of the record's SHA-256: equal bytes deposited on two kinds of CPU get two records, and the
same deposit repeated writes the same file. The store's index holds the records too (``store reindex`` reads them
back from the files); a store deposited before records were written holds none, says so, and its artifacts are
grafted only under ``--assume-kind``, which treats an artifact without a record as written on this machine.

Imports no torch: ``store ls`` and the pre-flight read the records on any machine.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from ..util.hashing import canonical_json, sha256_bytes
from ..util.isa import KIND_FIELDS as CPU_KIND_FIELDS
from ..util.isa import describe_cpu, environment, same_cpu_kind
from ..util.strict_json import loads_strict
from .ids import is_artifact_id

WRITERS_DIR = "writers"  # folder (or object prefix) of the writer records under a store's root
FORMAT = "graftbench.writer/1"
SUFFIX = ".json"
MAX_RECORD_BYTES = 1 << 20  # a record is a CPU description and a pin: a few kB
ASSUME_KIND_OPTION = "--assume-kind"
KIND_FIELDS = CPU_KIND_FIELDS  # isa.environment's fields

# Pins (config fingerprints) proven to give the same bytes on every kind of CPU, each with the replay records that
# prove it. A pin listed here is grafted on any kind; every other pin only on a kind that wrote the artifact. Empty:
# no pin is proven portable across CPU vendors yet (the avx2 pin is not, manifests/replays.jsonl).
PORTABLE_PINS: Mapping[str, str] = MappingProxyType({})


class WriterRecordError(ValueError):
    """A writer record that cannot be read: not canonical JSON of this format, or naming another artifact."""


def kind_of(environment: dict) -> dict:
    """The CPU kind within a recorded environment (a manifest's, or a Ray worker's): its :data:`KIND_FIELDS`
    (``None`` for one it lacks)."""
    return {name: environment.get(name) for name in KIND_FIELDS}


def this_kind() -> dict:
    """This machine's kind of CPU, as writer records and manifests record it (:func:`graftbench.util.isa.environment`)."""
    return environment()


def record_bytes(artifact_id: str, cpu: dict, pin: dict | None) -> bytes:
    """The canonical JSON bytes of the writer record of ``artifact_id``: deposited on a CPU of kind ``cpu``
    (:func:`this_kind`) under the pin ``pin`` (a :meth:`graftbench.engine.pin.PinnedConfig.to_dict`, ``None`` when
    the writer did not say)."""
    return canonical_json({"format": FORMAT, "artifact": artifact_id, "cpu": cpu, "pin": pin}).encode("utf-8")


def new_record(artifact_id: str, pin: dict | None) -> tuple[bytes, tuple[str, str, str, str | None]]:
    """This machine's writer record of ``artifact_id`` deposited under ``pin``: its bytes (:func:`record_bytes`)
    and its index entry ``(file name, artifact id, cpu, pin)`` as :func:`parse_record` reads it back."""
    data = record_bytes(artifact_id, this_kind(), pin)
    name = record_name(artifact_id, data)
    return data, (name, *parse_record(name, data))


def record_name(artifact_id: str, data: bytes) -> str:
    """The file name of the writer record ``data`` of ``artifact_id``: ``<id>.<16 hex digits of its SHA-256>.json``."""
    return f"{artifact_id}.{sha256_bytes(data)[:16]}{SUFFIX}"


def artifact_of_name(name: str) -> str | None:
    """The artifact id a writer record's file name starts with, or ``None`` for a name that is not a record's."""
    parts = name.split(".")
    if len(parts) != 3 or "." + parts[2] != SUFFIX or len(parts[1]) != 16 or not is_artifact_id(parts[0]):
        return None
    return parts[0]


def parse_record(name: str, data: bytes) -> tuple[str, str, str | None]:
    """``(artifact id, the CPU kind's canonical JSON, the pin's canonical JSON or None)`` of the writer record file
    ``name`` holding ``data``. Raises :class:`WriterRecordError` for a name that is not a record's, bytes that are
    not strict JSON of this format, a record of another artifact than its name says, or a CPU kind without a model
    name."""
    artifact_id = artifact_of_name(name)
    if artifact_id is None:
        raise WriterRecordError(f"{name}: not a writer record name (<artifact id>.<16 hex>.json)")
    try:
        record = loads_strict(data, source=f"writer record {name}")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise WriterRecordError(f"{name}: not valid JSON ({exc})") from exc
    if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("artifact") != artifact_id:
        raise WriterRecordError(f"{name}: not a {FORMAT} record of artifact {artifact_id[:16]}")
    cpu, pin = record.get("cpu"), record.get("pin")
    if not isinstance(cpu, dict) or not isinstance(cpu.get("cpu_model"), str) or not (pin is None or
                                                                                      isinstance(pin, dict)):
        raise WriterRecordError(f"{name}: its cpu is not a CPU description or its pin not an object")
    return artifact_id, canonical_json(cpu), None if pin is None else canonical_json(pin)


def kind_refusal(fingerprint: str, kinds: list[dict], here: dict, assume_kind: bool) -> str | None:
    """Why an artifact of the pin ``fingerprint`` whose writer records name the CPU kinds ``kinds`` may not be
    grafted on a CPU of kind ``here``, or ``None`` when it may: its pin is in :data:`PORTABLE_PINS`, a writer was
    of this kind (:func:`graftbench.util.isa.same_cpu_kind`), or no writer is recorded and ``assume_kind`` treats it
    as written here."""
    if fingerprint in PORTABLE_PINS or any(same_cpu_kind(kind, here) for kind in kinds):
        return None
    if not kinds:
        if assume_kind:
            return None
        return (f"it records no kind of CPU (deposited before writer records were kept, or its record was lost) and "
                f"its pin is not proven portable; pass {ASSUME_KIND_OPTION} if it was deposited on this kind of CPU "
                f"({describe_cpu(here)})")
    written = "; ".join(describe_cpu(kind) for kind in kinds)
    return (f"it was written on another kind of CPU ({written}), this one is {describe_cpu(here)}, and its pin is "
            "not proven portable across kinds of CPU: deposit it again on this machine")


def kinds_label(kinds: list[dict]) -> str:
    """The CPU kinds ``kinds`` for a table cell: each :func:`graftbench.util.isa.describe_cpu`, or ``not recorded``."""
    return "; ".join(describe_cpu(kind) for kind in kinds) if kinds else "not recorded"


def kind_lines(rows: list[dict], kinds: dict[str, list[dict]]) -> list[str]:
    """``store ls``'s lines on who wrote the artifacts of index ``rows`` (dicts with ``id``): for each kind of CPU
    the writer records name (``kinds``: artifact id to kinds, as :meth:`graftbench.store.index.IndexedStore.kinds_by_id`
    gives them), how many of the artifacts it wrote, then how many record no kind (grafted only under
    ``--assume-kind``)."""
    counts: dict[str, int] = {}
    unrecorded = 0
    for row in rows:
        written = kinds.get(row.get("id"), [])
        unrecorded += not written
        for kind in written:
            counts[describe_cpu(kind)] = counts.get(describe_cpu(kind), 0) + 1
    lines = [f"written on {label}: {n} artifact(s)" for label, n in sorted(counts.items())]
    if unrecorded:
        lines.append(f"no kind of CPU recorded: {unrecorded} artifact(s), grafted only under {ASSUME_KIND_OPTION} "
                     "(under a pin not proven portable)")
    return lines
