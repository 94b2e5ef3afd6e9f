"""Artifact format and the content-addressed store.

An artifact is one safetensors file: ``token_ids`` (int64 ``[n]``), and per decoder layer ``layers.{i}.keys`` and
``layers.{i}.values`` (``[1, kv_heads, kept, head_dim]`` in the pinned dtype), with a header (canonical JSON under
the safetensors metadata key ``graftbench``). The artifact id is the SHA-256 of the file's bytes, so the same
deposit gives the same id and one copy, and any flipped bit (payload or header) is caught on read. The header also
carries ``payload_sha256`` over the tensors' raw bytes, for provenance.

Layout on disk::

    <root>/artifacts/<id>.safetensors   written to a temporary file, fsynced, then renamed into place
    <root>/index.sqlite                  one row per artifact, inserted after its file is in place, and the
                                         router's MinHash band keys of its problem text (:mod:`graftbench.similarity`)

A writer killed at any point leaves at most a ``.tmp-*`` file (never an artifact name) or a complete file that is
not yet indexed (invisible to readers, indexed by the next deposit of the same artifact). A failed write (disk
full) raises :class:`graftbench.runs.StorageError` with the store as it was.

Nothing is ever unpickled: safetensors parses a JSON header and raw little-endian tensor bytes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
import sqlite3
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from . import similarity
from .artifact_reader import INTEGRITY_METHODS, MAX_HEADER_BYTES, ReadTiming, read_safetensors, xxh3_128_hex
from .hashing import sha256_file
from .runs import crash_point, storage_error, write_file_atomic

FORMAT = "graftbench.artifact/1"
HEADER_KEY = "graftbench"
_ID_PATTERN = re.compile(r"[0-9a-f]{64}")
_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS artifacts (
    id TEXT PRIMARY KEY,
    config_fingerprint TEXT NOT NULL,
    problem_key TEXT,
    problem_text TEXT,
    answer TEXT,
    n_tokens INTEGER NOT NULL,
    parent TEXT,
    bytes INTEGER NOT NULL,
    source TEXT,
    xxh3_128 TEXT
);
CREATE INDEX IF NOT EXISTS by_problem ON artifacts (config_fingerprint, problem_key);
CREATE TABLE IF NOT EXISTS bands (
    key INTEGER NOT NULL,
    artifact INTEGER NOT NULL,
    PRIMARY KEY (key, artifact)
) WITHOUT ROWID;
"""
_SCHEMA_VERSION = 2  # 1: no xxh3_128 column, no bands table
_COLUMNS = ("id", "config_fingerprint", "problem_key", "problem_text", "answer", "n_tokens", "parent", "bytes",
            "source", "xxh3_128")
_INSERT = f"INSERT OR IGNORE INTO artifacts ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
ROUTE_CANDIDATES = 32  # most artifacts compared with difflib per similarity lookup
BAND_ROWS = 256  # most index rows read per band key in a similarity lookup


class ArtifactError(ValueError):
    """An artifact that is refused. ``artifact_id`` names it and ``check`` names the check that failed
    (``id``, ``missing``, ``read``, ``size``, ``hash``, ``format``, ``header``, ``tensors``, ``payload``,
    ``config``, ``parent``)."""

    def __init__(self, artifact_id: str, check: str, detail: str):
        self.artifact_id = artifact_id
        self.check = check
        super().__init__(f"artifact {artifact_id[:16]}: {check} check failed: {detail}")


@dataclass
class Artifact:
    """A read and checked artifact: its id, header dict, ``token_ids`` (int64 ``[n]``) and per-layer
    ``(keys, values)`` tensors; ``timing`` says how long the read took, when it came from a file."""

    id: str
    header: dict
    token_ids: torch.Tensor
    layers: list[tuple[torch.Tensor, torch.Tensor]]
    timing: ReadTiming | None = None


def payload_sha256(token_ids: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> str:
    """SHA-256 over the raw bytes of ``token_ids`` then each layer's keys and values, in order."""
    digest = hashlib.sha256()
    for tensor in [token_ids, *[t for pair in layers for t in pair]]:
        digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def encode_artifact(header: dict, token_ids: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> bytes:
    """Serialize an artifact to safetensors bytes (deterministic: equal inputs give equal bytes).

    ``header`` gets ``format`` and ``payload_sha256`` filled in.
    """
    header = {**header, "format": FORMAT, "payload_sha256": payload_sha256(token_ids, layers)}
    tensors = {"token_ids": token_ids.contiguous()}
    for i, (keys, values) in enumerate(layers):
        tensors[f"layers.{i}.keys"] = keys.contiguous()
        tensors[f"layers.{i}.values"] = values.contiguous()
    return save_safetensors(tensors, metadata={HEADER_KEY: json.dumps(header, sort_keys=True, separators=(",", ":"))})


def check_artifact_id(artifact_id: str) -> str:
    """Return ``artifact_id`` if it is 64 lowercase hex digits; otherwise raise :class:`ArtifactError` (``id``).

    This is what keeps ids like ``../x``, absolute paths or NUL bytes from ever reaching the filesystem.
    """
    if not isinstance(artifact_id, str) or not _ID_PATTERN.fullmatch(artifact_id):
        raise ArtifactError(repr(artifact_id)[:40], "id", "an artifact id is 64 lowercase hex digits")
    return artifact_id


def _parse_header(artifact_id: str, data: bytes) -> dict:
    if len(data) < 8:
        raise ArtifactError(artifact_id, "format", f"file of {len(data)} bytes is shorter than a safetensors header")
    size = int.from_bytes(data[:8], "little")
    if size > MAX_HEADER_BYTES or size > len(data) - 8:
        raise ArtifactError(artifact_id, "format", f"safetensors header of {size} bytes is oversized or truncated")
    try:
        meta = json.loads(data[8 : 8 + size]).get("__metadata__") or {}
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise ArtifactError(artifact_id, "header", f"header is not valid graftbench JSON ({exc})") from exc
    return _header_from_metadata(artifact_id, meta)


def _header_from_metadata(artifact_id: str, meta: dict) -> dict:
    try:
        header = json.loads(meta[HEADER_KEY])
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ArtifactError(artifact_id, "header", f"header is not valid graftbench JSON ({exc})") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ArtifactError(artifact_id, "header", f"format is not {FORMAT}")
    return header


def decode_artifact(artifact_id: str, data: bytes) -> Artifact:
    """Parse and check artifact bytes whose SHA-256 must equal ``artifact_id``.

    Checks, in order: the id hash, the header, the tensor set and shapes against the header, the payload hash.
    Raises :class:`ArtifactError` naming the failed check; never returns a partial artifact.
    """
    if hashlib.sha256(data).hexdigest() != artifact_id:
        raise ArtifactError(artifact_id, "hash", "SHA-256 of the file does not equal its id (corrupt or edited)")
    header = _parse_header(artifact_id, data)
    try:
        tensors = load_safetensors(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise ArtifactError(artifact_id, "format", f"safetensors payload unreadable ({exc})") from exc
    token_ids, layers = _tensors_from(artifact_id, header, tensors)
    if payload_sha256(token_ids, layers) != header.get("payload_sha256"):
        raise ArtifactError(artifact_id, "payload", "payload SHA-256 does not equal the header's")
    return Artifact(artifact_id, header, token_ids, layers)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_header_fields(artifact_id: str, header: dict) -> None:
    positions, specs = header.get("positions"), header.get("layers")
    problems = []
    if not (isinstance(positions, list) and len(positions) == 2 and all(map(_is_count, positions))
            and positions[0] <= positions[1]):
        problems.append(f"positions {positions!r} is not [start, end] with 0 <= start <= end")
    if header.get("dtype") not in DTYPE_NAMES.values():
        problems.append(f"dtype {header.get('dtype')!r} is not one of {sorted(DTYPE_NAMES.values())}")
    for name in ("kv_heads", "head_dim"):
        if not _is_count(header.get(name)) or not header.get(name):
            problems.append(f"{name} {header.get(name)!r} is not a positive integer")
    if not isinstance(specs, list) or not all(
        isinstance(spec, dict) and spec.get("kind") in ("full", "sliding")
        and _is_count(spec.get("seen")) and _is_count(spec.get("kept")) for spec in specs
    ):
        problems.append("layers is not a list of {kind: full|sliding, seen: int, kept: int}")
    parent = header.get("parent")
    if parent is not None and not (isinstance(parent, str) and _ID_PATTERN.fullmatch(parent)):
        problems.append(f"parent {str(parent)[:40]!r} is neither null nor an artifact id")
    if problems:
        raise ArtifactError(artifact_id, "header", "; ".join(problems))


def _tensors_from(artifact_id: str, header: dict, tensors: dict) -> tuple[torch.Tensor, list]:
    _check_header_fields(artifact_id, header)
    specs = header["layers"]
    start, end = header["positions"]
    dtype = header["dtype"]
    kv_heads, head_dim = header["kv_heads"], header["head_dim"]
    expected = {"token_ids"} | {f"layers.{i}.{part}" for i in range(len(specs)) for part in ("keys", "values")}
    if set(tensors) != expected:
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise ArtifactError(artifact_id, "tensors", f"tensor set differs: missing {missing[:3]}, unexpected {extra[:3]}")
    token_ids = tensors["token_ids"]
    if token_ids.dtype != torch.int64 or tuple(token_ids.shape) != (end - start,):
        raise ArtifactError(artifact_id, "tensors", f"token_ids is {token_ids.dtype} {tuple(token_ids.shape)}")
    layers = []
    for i, spec in enumerate(specs):
        shape = (1, kv_heads, spec["kept"], head_dim)
        pair = (tensors[f"layers.{i}.keys"], tensors[f"layers.{i}.values"])
        for part, tensor in zip(("keys", "values"), pair):
            if DTYPE_NAMES.get(tensor.dtype) != dtype or tuple(tensor.shape) != shape:
                raise ArtifactError(
                    artifact_id, "tensors",
                    f"layers.{i}.{part} is {tensor.dtype} {tuple(tensor.shape)}, header says {dtype} {shape}",
                )
        layers.append(pair)
    return token_ids, layers


class Store:
    """A folder of content-addressed artifacts with a SQLite index (safe for concurrent writers)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.artifacts = self.root / "artifacts"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.index_path = self.root / "index.sqlite"
        with closing(self._connect()) as db, db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            db.executescript(_SCHEMA)
            if version < _SCHEMA_VERSION:
                _upgrade(db)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.index_path, timeout=60)

    def path(self, artifact_id: str) -> Path:
        """The file of an artifact id (checked to be 64 hex digits first)."""
        return self.artifacts / f"{check_artifact_id(artifact_id)}.safetensors"

    def put(self, data: bytes, header: dict) -> str:
        """Write artifact bytes atomically and index them; returns the artifact id (SHA-256 of ``data``).

        Writing the same bytes twice keeps one copy (a damaged copy already there is replaced). Raises
        :class:`graftbench.runs.StorageError` (e.g. disk full) with nothing new visible in the store or the index.
        """
        return self.write(data, header)[0]

    def write(self, data: bytes, header: dict) -> tuple[str, bool]:
        """:meth:`put`, also saying whether the file was written (``False`` when an intact copy was there)."""
        artifact_id = hashlib.sha256(data).hexdigest()
        target = self.path(artifact_id)
        written = not self._holds(target, artifact_id)
        if written:
            write_file_atomic(target, data, f"artifact {artifact_id[:16]} to {self.artifacts}",
                              crash="deposit-before-rename")
        crash_point("deposit-before-index")
        row = (
            artifact_id, header["config_fingerprint"], header.get("problem_key"), header.get("problem_text"),
            header.get("answer"), header["positions"][1] - header["positions"][0], header.get("parent"),
            len(data), header.get("source"), xxh3_128_hex(data),
        )
        try:
            with closing(self._connect()) as db, db:
                _index_row(db, row)
        except sqlite3.Error as exc:
            if written:
                target.unlink(missing_ok=True)
            full = getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL or "full" in str(exc).lower()
            cause = OSError(errno.ENOSPC if full else errno.EIO, str(exc))
            raise storage_error(cause, f"the index row of artifact {artifact_id[:16]} to {self.index_path}") from exc
        return artifact_id, written

    @staticmethod
    def _holds(target: Path, artifact_id: str) -> bool:
        try:
            return sha256_file(target) == artifact_id
        except OSError:
            return False

    def _indexed(self, artifact_id: str) -> tuple[int | None, str | None]:
        with closing(self._connect()) as db:
            row = db.execute("SELECT bytes, xxh3_128 FROM artifacts WHERE id=?", (artifact_id,)).fetchone()
        return (row[0], row[1]) if row else (None, None)

    def read(self, artifact_id: str, integrity: str = "xxh3_128") -> Artifact:
        """Read and check one artifact in one pass from its file (:func:`artifact_reader.read_safetensors`).

        Checks, in order: the size indexed for it (``size``, before reading), the whole file's hash (``hash``:
        XXH3-128 against the digest indexed at deposit, or with ``integrity="sha256"`` or no indexed digest,
        SHA-256 against the id), the safetensors layout (``format``), the graftbench header (``header``), the
        tensor set, dtypes and shapes against the header (``tensors``) and, on the SHA-256 path only, the payload
        hash against the header (``payload``). Raises :class:`ArtifactError` naming the
        failed check (also ``missing`` and ``read``); the returned artifact's ``timing`` splits read, hash and
        parse seconds.
        """
        if integrity not in INTEGRITY_METHODS:
            raise ValueError(f"integrity method {integrity!r} is not one of {INTEGRITY_METHODS}")
        path = self.path(artifact_id)
        try:
            size = path.stat().st_size
            indexed_bytes, indexed_xxh3 = self._indexed(artifact_id)
            if indexed_bytes is not None and size != indexed_bytes:
                raise ArtifactError(artifact_id, "size", f"file is {size} bytes, the index says {indexed_bytes}")
            method = "xxh3_128" if integrity == "xxh3_128" and indexed_xxh3 else "sha256"
            raw = read_safetensors(path, method)
        except FileNotFoundError as exc:
            raise ArtifactError(artifact_id, "missing", f"no file {path}") from exc
        except OSError as exc:
            raise ArtifactError(artifact_id, "read", f"cannot read {path}: {exc}") from exc
        if raw.digest != (indexed_xxh3 if method == "xxh3_128" else artifact_id):
            source = "the XXH3-128 indexed at deposit" if method == "xxh3_128" else "its id"
            raise ArtifactError(artifact_id, "hash", f"{method} of the file does not equal {source} (corrupt or edited)")
        if raw.layout_error is not None:
            raise ArtifactError(artifact_id, raw.layout_error.check, str(raw.layout_error))
        header = _header_from_metadata(artifact_id, raw.metadata)
        token_ids, layers = _tensors_from(artifact_id, header, raw.tensors)
        if method == "sha256" and payload_sha256(token_ids, layers) != header.get("payload_sha256"):
            raise ArtifactError(artifact_id, "payload", "payload SHA-256 does not equal the header's")
        return Artifact(artifact_id, header, token_ids, layers, raw.timing)

    def read_provenance(self, artifact_id: str) -> Artifact:
        """Read with the full provenance checks of :func:`decode_artifact`: SHA-256 of the file against the id
        and SHA-256 of the payload against the header (slower than :meth:`read`; for ``store verify``)."""
        path = self.path(artifact_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise ArtifactError(artifact_id, "missing", f"no file {path}") from exc
        except OSError as exc:
            raise ArtifactError(artifact_id, "read", f"cannot read {path}: {exc}") from exc
        indexed_bytes, indexed_xxh3 = self._indexed(artifact_id)
        if indexed_bytes is not None and len(data) != indexed_bytes:
            raise ArtifactError(artifact_id, "size", f"file is {len(data)} bytes, the index says {indexed_bytes}")
        artifact = decode_artifact(artifact_id, data)
        if indexed_xxh3 is not None and xxh3_128_hex(data) != indexed_xxh3:
            raise ArtifactError(artifact_id, "hash", "XXH3-128 of the file does not equal the digest indexed for it")
        return artifact

    def find_exact(self, config_fingerprint: str, problem_key: str) -> str | None:
        """The id of an artifact deposited for this normalized problem under this config, or ``None``."""
        with closing(self._connect()) as db:
            row = db.execute(
                "SELECT id FROM artifacts WHERE config_fingerprint=? AND problem_key=? ORDER BY n_tokens, id LIMIT 1",
                (config_fingerprint, problem_key),
            ).fetchone()
        return row[0] if row else None

    def candidates(self, config_fingerprint: str, normalized_text: str,
                   limit: int = ROUTE_CANDIDATES) -> list[tuple[str, str]]:
        """``(id, problem_text)`` of up to ``limit`` top-level artifacts under this config whose problem text
        shares a MinHash band with ``normalized_text`` (most shared bands first, then id), for similarity routing.

        Reads at most ``BAND_ROWS`` index rows for each of the query's 20 band keys
        (:mod:`graftbench.similarity`), so its cost is bounded whatever the store holds. A band that many
        deposits share (a common phrase) contributes only its first ``BAND_ROWS`` rows; a near-duplicate still
        shares most of the query's bands, including rare ones.
        """
        keys = similarity.band_keys(config_fingerprint, normalized_text)
        if not keys:
            return []
        shared: Counter[int] = Counter()
        with closing(self._connect()) as db:
            for key in keys:
                shared.update(row[0] for row in db.execute(
                    "SELECT artifact FROM bands WHERE key = ? LIMIT ?", (key, BAND_ROWS)))
            top = sorted(shared.items(), key=lambda item: -item[1])[: limit * 4]
            rows = db.execute(
                f"SELECT rowid, id, problem_text FROM artifacts WHERE rowid IN ({','.join('?' * len(top))}) "
                "AND config_fingerprint = ? AND parent IS NULL",
                (*[rowid for rowid, _ in top], config_fingerprint),
            ).fetchall()
        ranked = sorted(rows, key=lambda row: (-shared[row[0]], row[1]))
        return [(artifact_id, text) for _, artifact_id, text in ranked[:limit]]

    def rows(self) -> list[dict]:
        """Every index row as a dict (id, config_fingerprint, problem_key, answer, n_tokens, parent, bytes, source)."""
        with closing(self._connect()) as db:
            db.row_factory = sqlite3.Row
            return [dict(r) for r in db.execute("SELECT * FROM artifacts ORDER BY id")]

    def ids(self) -> list[str]:
        """Every indexed artifact id, sorted."""
        with closing(self._connect()) as db:
            return [r[0] for r in db.execute("SELECT id FROM artifacts ORDER BY id")]

    def verify(self) -> list[str]:
        """Re-check every indexed artifact with SHA-256 (file against id, payload against header) and its indexed
        XXH3-128; returns one line per problem found (empty when all hold)."""
        problems = []
        for artifact_id in self.ids():
            try:
                self.read_provenance(artifact_id)
            except ArtifactError as exc:
                problems.append(str(exc))
        return problems

    def inventory(self) -> dict[str, list[str]]:
        """A snapshot for crash and fault checks, each a sorted list: ``indexed`` ids, ``intact`` artifact files
        (SHA-256 equals the name), ``damaged`` artifact files (it does not), ``orphans`` (intact files not
        indexed: a deposit killed before its index insert), ``missing`` (indexed ids without a file),
        ``temporaries`` (``.tmp-*`` left by a killed writer) and ``other`` names."""
        indexed = set(self.ids())
        intact, damaged, temporaries, other = [], [], [], []
        for path in sorted(self.artifacts.iterdir()):
            name = path.name.removesuffix(".safetensors")
            if path.name.startswith(".tmp-"):
                temporaries.append(path.name)
            elif path.suffix != ".safetensors" or not _ID_PATTERN.fullmatch(name):
                other.append(path.name)
            else:
                (intact if self._holds(path, name) else damaged).append(name)
        files = set(intact) | set(damaged)
        return {"indexed": sorted(indexed), "intact": intact, "damaged": damaged,
                "orphans": sorted(set(intact) - indexed), "missing": sorted(indexed - files),
                "temporaries": temporaries, "other": other}


def _index_row(db: sqlite3.Connection, row: tuple) -> None:
    """Insert one artifact row and, for a top-level artifact with a problem text, its MinHash band keys."""
    cursor = db.execute(_INSERT, row)
    text, parent = row[_COLUMNS.index("problem_text")], row[_COLUMNS.index("parent")]
    if cursor.rowcount and text and parent is None:
        keys = similarity.band_keys(row[_COLUMNS.index("config_fingerprint")], text)
        db.executemany("INSERT OR IGNORE INTO bands VALUES (?, ?)", [(key, cursor.lastrowid) for key in keys])


def _upgrade(db: sqlite3.Connection) -> None:
    """Bring an index written by an older graftbench up to date: add the ``xxh3_128`` column (left empty, so
    those artifacts are checked with SHA-256 on read) and the band keys of every top-level problem text."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(artifacts)")}
    if "xxh3_128" not in columns:
        db.execute("ALTER TABLE artifacts ADD COLUMN xxh3_128 TEXT")
    rows = db.execute("SELECT rowid, config_fingerprint, problem_text FROM artifacts "
                      "WHERE parent IS NULL AND problem_text IS NOT NULL").fetchall()
    for rowid, fingerprint, text in rows:
        db.executemany("INSERT OR IGNORE INTO bands VALUES (?, ?)",
                       [(key, rowid) for key in similarity.band_keys(fingerprint, text)])
    db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
