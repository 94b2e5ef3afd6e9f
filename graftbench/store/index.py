"""The store's SQLite index: its schema, the row derived from an artifact's bytes, the error a missing or damaged
index raises, the rebuild of the index from the artifact files (``graftbench store reindex``), and the lookups
every store answers from its index (:class:`IndexedStore`: exact key, MinHash candidates, rows).

The artifact files are the source of truth and the index is derived from them: every row comes from the header
inside the bytes (:func:`row_of`, or :func:`row_from_header` where only the header and the size were read), so a
lost or damaged index can always be rebuilt by reading the files again (:func:`rebuild_index`,
:func:`write_index`), and the rebuild gives the rows that depositing the same files would have given.
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from collections.abc import Iterable
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from urllib.parse import quote

from . import minhash
from .codec import ArtifactError, decode_header
from .ids import artifact_id_of, id_of_path
from .reader import xxh3_128_hex
from .writers import MAX_RECORD_BYTES, WRITERS_DIR, WriterRecordError, parse_record
from ..util.durable import TEMP_PREFIX, fsync_dir, locked_temp
from ..problems.types import family_of_id
from ..util.safe_files import MAX_ARTIFACT_BYTES, UnsafeFileError, read_regular, regular_file_size
from ..util.strict_json import loads_strict

INDEX_NAME = "index.sqlite"
ROUTE_CANDIDATES = 32  # most artifacts ranked per similarity lookup
BAND_ROWS = 256  # most index rows read per band key in a similarity lookup
SCHEMA = """
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
    xxh3_128 TEXT,
    problem_id TEXT,
    family TEXT
);
CREATE INDEX IF NOT EXISTS by_problem ON artifacts (config_fingerprint, problem_key);
CREATE TABLE IF NOT EXISTS bands (
    key INTEGER NOT NULL,
    artifact INTEGER NOT NULL,
    PRIMARY KEY (key, artifact)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS writers (
    name TEXT PRIMARY KEY,
    id TEXT NOT NULL,
    cpu TEXT NOT NULL,
    pin TEXT
);
CREATE INDEX IF NOT EXISTS writers_by_id ON writers (id);
"""
# 1: no xxh3_128 column, no bands table; 2: no problem_id and family columns; 3: no writers table (a store whose
# artifacts record no kind of CPU, graftbench.store.writers)
SCHEMA_VERSION = 4
COLUMNS = ("id", "config_fingerprint", "problem_key", "problem_text", "answer", "n_tokens", "parent", "bytes",
           "source", "xxh3_128", "problem_id", "family")
_INSERT = f"INSERT OR IGNORE INTO artifacts ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
_DAMAGED_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB (primary codes)


class StoreError(OSError):
    """A store that cannot be used as asked: no such folder, not a store, or its index missing, damaged or from
    an older graftbench. The message names the path and what to do; ``missing`` is true when the store's folder
    does not exist at all."""

    def __init__(self, message: str, missing: bool = False):
        super().__init__(message)
        self.missing = missing


@contextmanager
def held_lock(path: Path, timeout_s: float, busy: str):
    """Hold the ``filelock`` lock file at ``path`` for the ``with`` block. Raises :class:`StoreError` with the
    message ``busy`` when another process holds it for more than ``timeout_s`` seconds."""
    from filelock import FileLock, Timeout

    lock = FileLock(path, timeout=timeout_s)
    try:
        lock.acquire()
    except Timeout as exc:
        raise StoreError(busy) from exc
    try:
        yield
    finally:
        lock.release()


def reindex_advice(root: Path) -> str:
    """The sentence that tells how to rebuild a store's index from its files."""
    return ("the artifact files are the source of truth: rebuild the index with "
            f"`graftbench store reindex --store {root}`")


def is_damaged(exc: sqlite3.Error) -> bool:
    """Whether a SQLite error says that the index file is damaged (not a database, corrupt pages)."""
    code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
    return code in _DAMAGED_CODES or "malformed" in str(exc) or "not a database" in str(exc)


def index_error(exc: sqlite3.Error, index_path: Path, root: Path) -> StoreError:
    """The :class:`StoreError` for a SQLite error met while reading or writing the index at ``index_path``: a
    damaged file (not a database, corrupt pages) is named as such with the reindex advice."""
    if is_damaged(exc):
        return StoreError(f"the store's index {index_path} is damaged ({exc}); {reindex_advice(root)}")
    return StoreError(f"cannot use the store's index {index_path} ({exc}); if it is damaged, {reindex_advice(root)}")


def check_tables(db: sqlite3.Connection, index_path: Path, root: Path) -> None:
    """Raise :class:`StoreError` unless the index has the current schema (the ``artifacts`` table with its
    ``xxh3_128`` column and the ``bands`` table), as a read-only open cannot upgrade it."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    columns = {row[1] for row in db.execute("PRAGMA table_info(artifacts)")}
    if not {"artifacts", "bands"} <= tables or not {"xxh3_128", "family"} <= columns:
        raise StoreError(f"the store's index {index_path} is empty, damaged or from an older graftbench "
                         f"(tables: {sorted(tables) or 'none'}); {reindex_advice(root)}")


def check_index_file(index_path: Path, root: object) -> None:
    """Raise :class:`StoreError` naming ``index_path`` when it exists but is not a regular file inside its folder
    (a FIFO would block SQLite's open forever, a device or a symlink leaving the store is not an index); a missing
    index is left to the caller (a writer creates it)."""
    if not os.path.lexists(index_path):
        return
    try:
        regular_file_size(index_path, within=index_path.parent, what="the store's index")
    except UnsafeFileError as exc:
        raise StoreError(f"{exc}; {reindex_advice(root)}") from exc
    except OSError as exc:  # a dangling symlink, no permission
        raise StoreError(f"the store's index {index_path} cannot be read ({exc.strerror or exc}); "
                         f"{reindex_advice(root)}") from exc


def row_of(artifact_id: str, header: dict, data: bytes) -> tuple:
    """The index row (in ``COLUMNS`` order) of artifact bytes ``data`` with graftbench header ``header``. Raises
    :class:`ArtifactError` (``header``) when ``config_fingerprint`` or ``positions`` is missing or malformed."""
    return row_from_header(artifact_id, header, len(data), xxh3_128_hex(data))


def row_from_header(artifact_id: str, header: dict, size: int, xxh3: str | None) -> tuple:
    """The index row (in ``COLUMNS`` order) of an artifact of ``size`` bytes with graftbench header ``header``
    and the XXH3-128 hex digest ``xxh3`` of its bytes, or ``None`` where only the header was read (a store on
    object storage; the artifact is then read with SHA-256 until its digest is known). Raises
    :class:`ArtifactError` (``header``) when ``config_fingerprint`` or ``positions`` is missing or malformed."""
    try:
        n_tokens = header["positions"][1] - header["positions"][0]
        fingerprint = header["config_fingerprint"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ArtifactError(artifact_id, "header",
                            f"no config_fingerprint or [start, end] positions ({exc!r})") from exc
    problem_id = header.get("problem_id")
    family = header.get("family") or (family_of_id(problem_id) if isinstance(problem_id, str) else None)
    return (artifact_id, fingerprint, header.get("problem_key"), header.get("problem_text"), header.get("answer"),
            n_tokens, header.get("parent"), size, header.get("source"), xxh3, problem_id, family)


def insert_writer(db: sqlite3.Connection, name: str, artifact_id: str, cpu: str, pin: str | None) -> None:
    """Index the writer record file ``name`` of ``artifact_id``: the CPU kind's and the pin's canonical JSON
    (:func:`graftbench.store.writers.parse_record`)."""
    db.execute("INSERT OR IGNORE INTO writers (name, id, cpu, pin) VALUES (?, ?, ?, ?)", (name, artifact_id, cpu, pin))


def has_writers(db: sqlite3.Connection) -> bool:
    """Whether the index has the ``writers`` table (an index of graftbench before writer records, opened read-only,
    has not: its artifacts record no kind of CPU)."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='writers'").fetchone() is not None


def insert_row(db: sqlite3.Connection, row: tuple) -> None:
    """Insert one artifact row and, for a top-level artifact with a problem text, its MinHash band keys."""
    cursor = db.execute(_INSERT, row)
    text, parent = row[COLUMNS.index("problem_text")], row[COLUMNS.index("parent")]
    if cursor.rowcount and text and parent is None:
        keys = minhash.band_keys(row[COLUMNS.index("config_fingerprint")], text)
        db.executemany("INSERT OR IGNORE INTO bands VALUES (?, ?)", [(key, cursor.lastrowid) for key in keys])


def create_or_upgrade(db: sqlite3.Connection) -> None:
    """Create the tables of an empty index, or bring an index written by an older graftbench up to date: add the
    ``xxh3_128`` column (left empty, so those artifacts are checked with SHA-256 on read), the band keys of
    every top-level problem text, and the ``problem_id`` and ``family`` columns (left empty: ``store reindex``
    fills them from the files)."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    db.executescript(SCHEMA)
    if version >= SCHEMA_VERSION:
        return
    columns = {row[1] for row in db.execute("PRAGMA table_info(artifacts)")}
    for column in ("xxh3_128", "problem_id", "family"):
        if column not in columns:
            db.execute(f"ALTER TABLE artifacts ADD COLUMN {column} TEXT")
    if version >= 2:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return  # the band keys are there already
    rows = db.execute("SELECT rowid, config_fingerprint, problem_text FROM artifacts "
                      "WHERE parent IS NULL AND problem_text IS NOT NULL").fetchall()
    for rowid, fingerprint, text in rows:
        db.executemany("INSERT OR IGNORE INTO bands VALUES (?, ?)",
                       [(key, rowid) for key in minhash.band_keys(fingerprint, text)])
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@dataclass
class ReindexReport:
    """What :func:`rebuild_index` did: ``indexed`` artifact ids (sorted), ``skipped`` files as ``(name,
    reason)`` (left where they are), and ``temporaries`` (``.tmp-*`` names of writes in flight, not indexed)."""

    indexed: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    temporaries: list[str] = field(default_factory=list)


def _row_of_file(path: Path) -> tuple[tuple | None, str]:
    """The index row of the artifact file at ``path``, or ``(None, why it is skipped)``."""
    artifact_id = id_of_path(path)
    if artifact_id is None:
        return None, "not an artifact file name (64 hex digits + .safetensors)"
    try:  # a regular file inside the store, of at most the artifact size cap: never a FIFO, a device, a symlink out
        data = read_regular(path, max_bytes=MAX_ARTIFACT_BYTES, within=path.parent.parent, what="artifact file")
    except OSError as exc:
        return None, f"cannot read it ({exc.strerror or exc})"
    if artifact_id_of(data) != artifact_id:
        return None, "damaged: the SHA-256 of its bytes does not equal its name"
    try:
        return row_of(artifact_id, decode_header(artifact_id, data), data), ""
    except ArtifactError as exc:
        return None, str(exc)


def candidate_rows_sql(n: int) -> str:
    """The query for the index rows of ``n`` candidate rowids under one config fingerprint (``n`` rowid parameters,
    then the fingerprint). The unary ``+`` keeps SQLite from answering it through the ``by_problem`` index, which
    its planner otherwise picks for a long ``IN`` list and then scans every row of the fingerprint: 39 ms a lookup
    at 100,000 artifacts instead of a fraction of a millisecond."""
    return (f"SELECT rowid, id, problem_text FROM artifacts WHERE rowid IN ({','.join('?' * n)}) "
            "AND +config_fingerprint = ? AND parent IS NULL")


def exact_id(db: sqlite3.Connection, config_fingerprint: str, problem_key: str) -> str | None:
    """The id of an artifact deposited for this normalized problem under this config (the shortest, then the
    smallest id), or ``None``."""
    row = db.execute("SELECT id FROM artifacts WHERE config_fingerprint=? AND problem_key=? ORDER BY n_tokens, id "
                     "LIMIT 1", (config_fingerprint, problem_key)).fetchone()
    return row[0] if row else None


def band_candidates(db: sqlite3.Connection, config_fingerprint: str, normalized_text: str,
                    limit: int) -> list[tuple[str, str]]:
    """``(id, problem_text)`` of up to ``limit`` top-level artifacts under this config whose problem text shares a
    MinHash band with ``normalized_text``: those sharing the most bands (among equal counts, those read first:
    the query's bands in order, each band's rows in deposit order), returned most shared bands first, then by id.

    Reads at most ``BAND_ROWS`` index rows for each of the query's 20 band keys (:mod:`graftbench.store.minhash`), so
    its cost is bounded whatever the store holds. A band that many deposits share (a common phrase) contributes
    only its first ``BAND_ROWS`` rows; a near-duplicate still shares most of the query's bands, including rare
    ones. Empty for an empty text.
    """
    keys = minhash.band_keys(config_fingerprint, normalized_text)
    if not keys:
        return []
    shared: Counter[int] = Counter()
    for key in keys:
        shared.update(map(itemgetter(0), db.execute("SELECT artifact FROM bands WHERE key = ? LIMIT ?",
                                                    (key, BAND_ROWS))))
    top = shared.most_common(limit)
    rows = db.execute(candidate_rows_sql(len(top)), (*[rowid for rowid, _ in top], config_fingerprint)).fetchall()
    return [(artifact_id, text) for _, artifact_id, text in sorted(rows, key=lambda row: (-shared[row[0]], row[1]))]


def read_writer_records(folder: Path) -> tuple[list[tuple[str, str, str, str | None]], list[tuple[str, str]]]:
    """The writer records in ``folder`` (a store's ``writers/``: :mod:`graftbench.store.writers`) as
    ``(name, artifact id, cpu, pin)`` index entries, and ``(writers/<name>, why it is skipped)`` for each file that
    is not a readable record (left where it is). Nothing when the folder does not exist (a store from before
    writer records)."""
    records, skipped = [], []
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if not entry.name.startswith(TEMP_PREFIX))
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    for name in names:
        try:
            data = read_regular(folder / name, max_bytes=MAX_RECORD_BYTES, within=folder, what="writer record")
            records.append((name, *parse_record(name, data)))
        except (OSError, WriterRecordError) as exc:
            skipped.append((f"{WRITERS_DIR}/{name}", str(exc)))
    return records, skipped


def rebuild_index(artifacts: Path, index_path: Path, writers: Path | None = None) -> ReindexReport:
    """Rebuild the index at ``index_path`` from the artifact files in ``artifacts``: each file whose name is an
    artifact id, whose SHA-256 equals that id and whose graftbench header parses gets its row; every other file
    is skipped and named (nothing is moved or deleted); the writer records in ``writers`` (when given) are indexed
    the same way (:func:`read_writer_records`). The new index is written to a temporary file and renamed
    over the old one (:func:`write_index`), so readers see the old index or the new one. The caller holds the
    store's write lock.

    Raises ``OSError`` (including ``sqlite3`` errors turned into :class:`StoreError`) when the new index cannot
    be written; the old index is then left as it was.
    """
    names = sorted(entry.name for entry in os.scandir(artifacts))
    records, unreadable = read_writer_records(writers) if writers is not None else ([], [])
    report = write_index(index_path, ((name, *_row_of_file(artifacts / name)) for name in names
                                      if not name.startswith(TEMP_PREFIX)),
                         temporaries=[name for name in names if name.startswith(TEMP_PREFIX)], writers=records)
    report.skipped += unreadable
    return report


def write_index(index_path: Path, entries: Iterable[tuple[str, tuple | None, str]],
                temporaries: list[str] | None = None,
                writers: Iterable[tuple[str, str, str, str | None]] = ()) -> ReindexReport:
    """Write a new index at ``index_path`` from ``(name, row, reason)`` entries: a row is inserted, an entry
    without one is reported as skipped with its reason; ``writers`` are writer records' ``(name, artifact id,
    cpu, pin)`` entries (:func:`insert_writer`). The index is written to a locked temporary file beside
    ``index_path``, fsynced and renamed over the old one. ``temporaries`` (names of writes in flight) go into the
    report as they are. Raises :class:`StoreError` when SQLite cannot write the new index and ``OSError`` when
    the file cannot be created; the old index is then left as it was."""
    report = ReindexReport(temporaries=list(temporaries or []))
    fd, tmp = locked_temp(index_path.parent, suffix=".sqlite")
    try:
        with closing(sqlite3.connect(tmp)) as db:
            db.execute("PRAGMA journal_mode=OFF")  # a throwaway file until the rename: no journal beside it
            create_or_upgrade(db)
            for name, row, reason in entries:
                if row is None:
                    report.skipped.append((name, reason))
                else:
                    insert_row(db, row)
                    report.indexed.append(row[0])
            for writer in writers:
                insert_writer(db, *writer)
            db.commit()
        os.fsync(fd)
        for suffix in ("-journal", "-wal", "-shm"):  # they belong to the old index, never to the new one
            Path(f"{index_path}{suffix}").unlink(missing_ok=True)
        os.replace(tmp, index_path)
    except sqlite3.Error as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write a new index at {tmp} ({exc}); the old index is unchanged") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    fsync_dir(index_path.parent)
    report.indexed.sort()
    return report


class IndexedStore:
    """The lookups a store answers from its SQLite index (``index_path``): the exact key, the MinHash
    candidates, family controls, rows and ids, and ``verify`` over them. A subclass sets ``root``,
    ``index_path`` and ``readonly`` and provides ``read_audited``; SQLite errors become :class:`StoreError`
    naming the index file."""

    root: object
    index_path: Path
    readonly: bool

    def _connect(self) -> sqlite3.Connection:
        check_index_file(self.index_path, self.root)
        if self.readonly:
            return sqlite3.connect(f"file:{quote(str(self.index_path.resolve()))}?mode=ro", uri=True, timeout=60)
        return sqlite3.connect(self.index_path, timeout=60)

    @contextmanager
    def _index(self, write: bool = False):
        """A connection to the index (a transaction with ``write``); SQLite errors become :class:`StoreError`
        naming the index file."""
        try:
            with closing(self._connect()) as db:
                if write:
                    with db:
                        yield db
                else:
                    yield db
        except sqlite3.DatabaseError as exc:
            raise index_error(exc, self.index_path, self.root) from exc

    def _indexed(self, artifact_id: str) -> tuple[int | None, str | None]:
        with self._index() as db:
            row = db.execute("SELECT bytes, xxh3_128 FROM artifacts WHERE id=?", (artifact_id,)).fetchone()
        return (row[0], row[1]) if row else (None, None)

    def find_exact(self, config_fingerprint: str, problem_key: str) -> str | None:
        """The id of an artifact deposited for this normalized problem under this config, or ``None``."""
        with self._index() as db:
            return exact_id(db, config_fingerprint, problem_key)

    def lookup(self, config_fingerprint: str, problem_key: str, normalized_text: str,
               limit: int = ROUTE_CANDIDATES) -> tuple[str | None, list[tuple[str, str]]]:
        """The router's reads in one connection to the index: ``(exact id, [])`` as :meth:`find_exact` gives it,
        or, when there is none, ``(None, candidates)`` as :meth:`candidates` gives them. One connection instead of
        two saves SQLite's parse of the schema that each new connection does on its first statement."""
        with self._index() as db:
            exact = exact_id(db, config_fingerprint, problem_key)
            return exact, [] if exact else band_candidates(db, config_fingerprint, normalized_text, limit)

    def exact_ids(self, config_fingerprint: str, problem_key: str, n_tokens: int) -> list[str]:
        """The ids of every top-level artifact of ``n_tokens`` tokens deposited for this normalized problem under
        this config, by id: the deposits :func:`graftbench.eval.deposit.stored_artifact` compares a new one with."""
        with self._index() as db:
            return [row[0] for row in db.execute(
                "SELECT id FROM artifacts WHERE config_fingerprint=? AND problem_key=? AND n_tokens=? "
                "AND parent IS NULL ORDER BY id", (config_fingerprint, problem_key, n_tokens))]

    def other_pins_holding(self, config_fingerprint: str, problem_keys: list[str]) -> dict[str, int]:
        """For every config fingerprint but ``config_fingerprint``: how many of the distinct ``problem_keys`` have
        a top-level artifact under it (fingerprints that hold none are left out). Asks the index in batches of
        500 keys, below SQLite's limit on bound parameters."""
        keys, counts = sorted(set(problem_keys)), {}
        with self._index() as db:
            for start in range(0, len(keys), 500):
                batch = keys[start:start + 500]
                rows = db.execute(
                    f"SELECT config_fingerprint, COUNT(DISTINCT problem_key) FROM artifacts WHERE parent IS NULL "
                    f"AND config_fingerprint != ? AND problem_key IN ({','.join('?' * len(batch))}) "
                    f"GROUP BY config_fingerprint", (config_fingerprint, *batch))
                for fingerprint, n in rows:
                    counts[fingerprint] = counts.get(fingerprint, 0) + n
        return counts

    def family_candidates(self, config_fingerprint: str, family: str | None,
                          exclude: bool = True) -> list[tuple[str, str]]:
        """``(id, problem_text)`` of the top-level artifacts under this config whose family is not ``family``
        (``exclude``) or is ``family``, by id; with ``family`` ``None``, every top-level artifact with a recorded
        problem text. Rows without a recorded family (an index upgraded from an older graftbench and not yet
        reindexed) are left out of a family filter. Reads every such row: it serves controls on a library, not
        routing at scale."""
        clause, params = "", (config_fingerprint,)
        if family is not None:
            op = "!=" if exclude else "="
            clause, params = f"AND family IS NOT NULL AND family {op} ? ", (config_fingerprint, family)
        with self._index() as db:
            return db.execute(
                f"SELECT id, problem_text FROM artifacts WHERE config_fingerprint = ? AND parent IS NULL "
                f"AND problem_text IS NOT NULL {clause}ORDER BY id", params,
            ).fetchall()

    def candidates(self, config_fingerprint: str, normalized_text: str,
                   limit: int = ROUTE_CANDIDATES) -> list[tuple[str, str]]:
        """``(id, problem_text)`` of up to ``limit`` top-level artifacts under this config whose problem text
        shares a MinHash band with ``normalized_text``, for similarity routing (:func:`band_candidates`)."""
        with self._index() as db:
            return band_candidates(db, config_fingerprint, normalized_text, limit)

    def pin_counts(self) -> list[tuple[str, int, str]]:
        """Per config fingerprint the store holds top-level artifacts under: ``(fingerprint, how many, the
        smallest of their ids)``, by fingerprint (the id names an artifact whose header tells the pin's model)."""
        with self._index() as db:
            return db.execute("SELECT config_fingerprint, COUNT(*), MIN(id) FROM artifacts WHERE parent IS NULL "
                              "GROUP BY config_fingerprint ORDER BY config_fingerprint").fetchall()

    def writer_kinds(self, artifact_id: str) -> list[dict]:
        """The CPU kinds (:func:`graftbench.util.isa.environment` records) the writer records of ``artifact_id``
        name, in the order of their canonical JSON; empty when none is recorded."""
        with self._index() as db:
            if not has_writers(db):
                return []
            return [loads_strict(cpu) for (cpu,) in db.execute(
                "SELECT DISTINCT cpu FROM writers WHERE id = ? ORDER BY cpu", (artifact_id,))]

    def kinds_by_id(self) -> dict[str, list[dict]]:
        """For every artifact with a writer record: the CPU kinds recorded (as :meth:`writer_kinds`)."""
        kinds: dict[str, list[dict]] = {}
        with self._index() as db:
            if not has_writers(db):
                return {}
            for artifact_id, cpu in db.execute("SELECT DISTINCT id, cpu FROM writers ORDER BY id, cpu"):
                kinds.setdefault(artifact_id, []).append(loads_strict(cpu))
        return kinds

    def kinds_under(self, config_fingerprint: str) -> list[list[dict]]:
        """For each top-level artifact under ``config_fingerprint``, by id: the CPU kinds its writer records name
        (empty for one with none)."""
        with self._index() as db:
            ids = [r[0] for r in db.execute("SELECT id FROM artifacts WHERE config_fingerprint = ? AND parent IS NULL "
                                            "ORDER BY id", (config_fingerprint,))]
            kinds: dict[str, list[dict]] = {artifact_id: [] for artifact_id in ids}
            if has_writers(db):
                for artifact_id, cpu in db.execute(
                        "SELECT DISTINCT w.id, w.cpu FROM writers w JOIN artifacts a ON a.id = w.id "
                        "WHERE a.config_fingerprint = ? AND a.parent IS NULL ORDER BY w.id, w.cpu",
                        (config_fingerprint,)):
                    kinds[artifact_id].append(loads_strict(cpu))
        return list(kinds.values())

    def recorded_pins(self) -> dict[str, dict]:
        """For each config fingerprint of a top-level artifact whose writer record holds its pin: that pin (a
        :meth:`graftbench.engine.pin.PinnedConfig.to_dict`; the first in record order where several were
        recorded). The pre-flight names the fields in which a run's pin differs from these."""
        pins: dict[str, dict] = {}
        with self._index() as db:
            if not has_writers(db):
                return {}
            for fingerprint, pin in db.execute(
                    "SELECT a.config_fingerprint, w.pin FROM writers w JOIN artifacts a ON a.id = w.id "
                    "WHERE a.parent IS NULL AND w.pin IS NOT NULL ORDER BY w.name"):
                pins.setdefault(fingerprint, loads_strict(pin))
        return pins

    def rows(self) -> list[dict]:
        """Every index row as a dict (id, config_fingerprint, problem_key, answer, n_tokens, parent, bytes, source)."""
        with self._index() as db:
            db.row_factory = sqlite3.Row
            return [dict(r) for r in db.execute("SELECT * FROM artifacts ORDER BY id")]

    def ids(self) -> list[str]:
        """Every indexed artifact id, sorted."""
        with self._index() as db:
            return [r[0] for r in db.execute("SELECT id FROM artifacts ORDER BY id")]

    def verify(self) -> list[str]:
        """Re-check every indexed artifact with SHA-256 (file against id, payload against header) and its indexed
        XXH3-128 (``audit``: the checks of ``read_audited`` without torch); returns one line per problem found
        (empty when all hold)."""
        problems = []
        for artifact_id in self.ids():
            try:
                self.audit(artifact_id)
            except ArtifactError as exc:
                problems.append(str(exc))
        return problems
