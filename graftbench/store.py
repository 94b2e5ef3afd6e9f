"""The content-addressed artifact store: a folder of artifact files and a SQLite index.

Layout on disk::

    <root>/artifacts/<id>.safetensors   written to a temporary file, fsynced, then renamed into place
    <root>/index.sqlite                  one row per artifact, inserted after its file is in place, and the
                                         router's MinHash band keys of its problem text (:mod:`graftbench.similarity`)

The file format and its checks are :mod:`graftbench.artifact_codec`'s; ids and paths are
:mod:`graftbench.artifact_ids`'. An index row is derived from the header inside the bytes written, so the row and
the file cannot disagree (except through :meth:`Store.plant`, which exists to test that they are caught).

A writer killed at any point leaves at most a ``.tmp-*`` file (never an artifact name) or a complete file that is
not yet indexed (invisible to readers, indexed by the next deposit of the same artifact). A failed write (disk
full) raises :class:`graftbench.durable.StorageError` with the store as it was.
"""

from __future__ import annotations

import errno
import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

from . import similarity
from .artifact_codec import (Artifact, ArtifactError, check_artifact_id, check_tensors, decode_artifact, decode_header,
                             header_from_metadata, payload_sha256)
from .artifact_ids import artifact_id_of, artifact_path, artifacts_dir, id_of_path
from .artifact_reader import INTEGRITY_METHODS, read_safetensors, xxh3_128_hex
from .durable import crash_point, storage_error, write_file_atomic
from .hashing import sha256_file

_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"

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


class Store:
    """A folder of content-addressed artifacts with a SQLite index (safe for concurrent writers)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.artifacts = artifacts_dir(self.root)
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
        """The file of an artifact id (checked to be 64 hex digits first: :class:`ArtifactError` ``id``)."""
        return artifact_path(self.root, check_artifact_id(artifact_id))

    def put(self, data: bytes) -> str:
        """Store artifact bytes: write the file atomically, then index it from the header inside ``data``;
        returns the artifact id (SHA-256 of ``data``).

        Writing the same bytes twice keeps one copy (a damaged copy already there is replaced). Raises
        :class:`ArtifactError` (``format`` or ``header``) for bytes whose graftbench header cannot be read, before
        anything is written, and :class:`graftbench.durable.StorageError` (e.g. disk full) with nothing new
        visible in the store or the index.
        """
        return self.put_reporting(data)[0]

    def put_reporting(self, data: bytes) -> tuple[str, bool]:
        """:meth:`put`, returning ``(id, written)``: ``written`` is ``False`` when an intact copy was already
        there (the index row is still inserted if it was missing)."""
        artifact_id = artifact_id_of(data)
        return self._put(artifact_id, data, decode_header(artifact_id, data))

    def plant(self, data: bytes, index_header: dict) -> str:
        """For fault injection only: store ``data`` (any bytes) and index it with the fields of ``index_header``
        (``config_fingerprint`` and ``positions`` required; ``problem_key``, ``problem_text``, ``answer``,
        ``parent``, ``source`` optional) instead of the header inside it, so that a forged or unreadable file is
        routed to and the read checks must refuse it. Returns the id; raises as :meth:`put`."""
        return self._put(artifact_id_of(data), data, index_header)[0]

    def _put(self, artifact_id: str, data: bytes, header: dict) -> tuple[str, bool]:
        row = _row(artifact_id, header, data)
        target = self.path(artifact_id)
        written = not self._holds(target, artifact_id)
        if written:
            write_file_atomic(target, data, f"artifact {artifact_id[:16]} to {self.artifacts}",
                              crash="deposit-before-rename")
        crash_point("deposit-before-index")
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
        """Read and check one artifact in one pass from its file (:func:`artifact_reader.read_safetensors`): the
        fast read a graft uses. For the full provenance checks use :meth:`read_audited`.

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
        header = header_from_metadata(artifact_id, raw.metadata)
        token_ids, layers = check_tensors(artifact_id, header, raw.tensors)
        if method == "sha256" and payload_sha256(token_ids, layers) != header.get("payload_sha256"):
            raise ArtifactError(artifact_id, "payload", "payload SHA-256 does not equal the header's")
        return Artifact(artifact_id, header, token_ids, layers, raw.timing)

    def read_audited(self, artifact_id: str) -> Artifact:
        """Read and check one artifact with every check there is (slower than :meth:`read`; for ``store verify``):
        the size indexed for it, SHA-256 of the file against the id and of the payload against the header
        (:func:`graftbench.artifact_codec.decode_artifact`), and the file's XXH3-128 against the digest indexed for
        it. Raises :class:`ArtifactError` naming the failed check (also ``missing`` and ``read``)."""
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
                self.read_audited(artifact_id)
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
            name = id_of_path(path)
            if path.name.startswith(".tmp-"):
                temporaries.append(path.name)
            elif name is None:
                other.append(path.name)
            else:
                (intact if self._holds(path, name) else damaged).append(name)
        files = set(intact) | set(damaged)
        return {"indexed": sorted(indexed), "intact": intact, "damaged": damaged,
                "orphans": sorted(set(intact) - indexed), "missing": sorted(indexed - files),
                "temporaries": temporaries, "other": other}


def _row(artifact_id: str, header: dict, data: bytes) -> tuple:
    """The index row (in ``_COLUMNS`` order) of artifact bytes ``data`` with graftbench header ``header``. Raises
    :class:`ArtifactError` (``header``) when ``config_fingerprint`` or ``positions`` is missing or malformed."""
    try:
        n_tokens = header["positions"][1] - header["positions"][0]
        fingerprint = header["config_fingerprint"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ArtifactError(artifact_id, "header",
                            f"no config_fingerprint or [start, end] positions ({exc!r})") from exc
    return (artifact_id, fingerprint, header.get("problem_key"), header.get("problem_text"), header.get("answer"),
            n_tokens, header.get("parent"), len(data), header.get("source"), xxh3_128_hex(data))


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
