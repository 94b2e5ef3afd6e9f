"""The content-addressed artifact store: a folder of artifact files and a SQLite index.

Layout on disk::

    <root>/artifacts/<id>.safetensors   written to a temporary file, fsynced, then renamed into place
    <root>/writers/<id>.<digest>.json    who wrote it: the kind of CPU and the pin of each deposit of these
                                         bytes (:mod:`graftbench.store.writers`), outside the artifact's bytes
    <root>/index.sqlite                  one row per artifact, inserted after its file is in place, the
                                         router's MinHash band keys of its problem text
                                         (:mod:`graftbench.store.minhash`), and the writer records

The file format and its checks are :mod:`graftbench.store.codec`'s; ids and paths are
:mod:`graftbench.store.ids`'. An index row is derived from the header inside the bytes written, so the row and
the file cannot disagree (except through :meth:`Store.plant`, which exists to test that they are caught).

A writer killed at any point leaves at most a ``.tmp-*`` file (never an artifact name) or a complete file that is
not yet indexed (invisible to readers, indexed by the next deposit of the same artifact or by ``store reindex``).
A failed write (disk full) raises :class:`graftbench.util.durable.StorageError` with the store as it was. A deposit
holds the store's write lock (``<root>/write.lock``, an ``flock`` that a killed process drops) from its file
write to its index row, so a failed deposit never removes a file that another deposit has just indexed.
Opening a store for writing removes the ``.tmp-*`` files of killed writers (never one still being written, see
:func:`graftbench.util.durable.clean_temporaries`).

A store that does not exist is created only when asked (``create=True``, what deposits do); ``readonly`` opens
create, clean and upgrade nothing. A missing or damaged index raises :class:`StoreError` naming the file and
advising ``graftbench store reindex``, which rebuilds it from the files (:mod:`graftbench.store.index`).

A root that is a URL (``s3://bucket/prefix``, ``file://…``, ``memory://…``: :func:`is_store_url`) is a store on
object storage, opened by :func:`graftbench.store.open.open_store` as a
:class:`graftbench.store.object_store.ObjectStore` (a folder :class:`Store` refuses one); a plain path is this folder
store.
"""

from __future__ import annotations

import errno
import time
import os
import re
import sqlite3
from contextlib import closing, contextmanager
from pathlib import Path


from .codec import (
    LLAMA_FORMAT,
    Artifact,
    ArtifactError,
    check_artifact_id,
    check_tensors,
    decode_artifact,
    decode_header,
    header_from_metadata,
    payload_sha256,
)
from .ids import (
    SUFFIX,
    artifact_id_of,
    artifact_path,
    artifacts_dir,
    id_of_path,
)
from .llama_state import audit_any, decode_state, parse_state
from .writers import WRITERS_DIR, new_record
from .reader import (INTEGRITY_METHODS, LayoutError, header_length, metadata_of, parse_table,
                     read_safetensors, xxh3_128_hex, xxh3_128_stream)
from ..util.durable import (
    TEMP_PREFIX,
    blocking_file,
    clean_temporaries,
    crash_point,
    storage_error,
    write_file_atomic,
)
from ..util.safe_files import (MAX_ARTIFACT_BYTES, UnsafeFileError, open_regular, read_regular, read_regular_into,
                               regular_file_size, sha256_regular)
from .index import (
    INDEX_NAME,
    IndexedStore,
    ReindexReport,
    StoreError,
    check_tables,
    create_or_upgrade,
    held_lock,
    index_error,
    insert_row,
    insert_writer,
    is_damaged,
    rebuild_index,
    reindex_advice,
    row_of,
)

__all__ = ["Store", "clean_folder_store", "is_store_url", "reindex_folder_store", "require_folder_store"]

_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
WRITE_LOCK = "write.lock"  # under the store's root: held by a deposit from its file write to its index row
WRITE_LOCK_TIMEOUT_S = 600.0


def is_store_url(root: object) -> bool:
    """Whether the store root ``root`` is a URL (``scheme://…``, e.g. ``s3://bucket/prefix``): a store on object
    storage (:mod:`graftbench.store.object_store`). A ``Path`` never is one; a plain path string is a folder."""
    return isinstance(root, str) and _URL.match(root) is not None


def _has_artifact_files(folder: Path) -> bool:
    try:
        return any(entry.name.endswith(SUFFIX) and id_of_path(entry.name) for entry in os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return False


def _check_store_folder(root: Path, index_path: Path, create: bool) -> bool:
    """Whether the store at ``root`` has to be created; raises :class:`StoreError` when it does not exist and
    ``create`` is false, when it is not a store, or when its artifact files have no index."""
    if not root.exists():
        if create:
            return True
        raise StoreError(f"no store at {root}: the folder does not exist (check the path; "
                         f"`graftbench deposit --store {root}` creates a store)", missing=True)
    if not root.is_dir():
        raise StoreError(f"{root} is not a store: it is a file, not a folder")
    if index_path.exists():
        return False
    if _has_artifact_files(artifacts_dir(root)):
        raise StoreError(f"the store {root} has artifact files but no index {index_path}; {reindex_advice(root)}")
    if create:
        return True
    if artifacts_dir(root).is_dir():
        raise StoreError(f"the store {root} has no index {index_path}; {reindex_advice(root)}")
    raise StoreError(f"{root} is not a graftbench store (no {INDEX_NAME}, no artifacts/ folder)", missing=True)


def require_folder_store(root: str | Path) -> None:
    """Check that a folder store with an index exists at ``root`` without opening or creating anything. Raises
    :class:`StoreError` naming the path otherwise (``missing`` when the folder does not exist)."""
    root = Path(root)
    _check_store_folder(root, root / INDEX_NAME, create=False)


def check_store_target(root: str | Path) -> None:
    """Check, without opening or creating anything, that a store can be opened or created at ``root`` (what
    ``deposit`` checks before it loads a model): raises :class:`StoreError` naming the path when it, or the nearest
    of its parents that exists, is a file, or when it is a folder with artifact files but no index. A URL is left to
    its object storage."""
    if is_store_url(root):
        return
    root = Path(root)
    blocking = blocking_file(root.parent)  # root itself is checked by _check_store_folder
    if blocking is not None:
        raise StoreError(f"no store can be made at {root}: {blocking} is a file, not a folder")
    _check_store_folder(root, root / INDEX_NAME, create=True)


def clean_folder_store(root: str | Path) -> list[Path]:
    """Remove the ``.tmp-*`` files that writers killed before their rename left in the folder store at ``root`` (its
    ``artifacts/`` folder and its root), never one that a live process is still writing; the index is not
    opened. Returns the paths removed. Raises :class:`StoreError` when ``root`` is not an existing store."""
    root = Path(root)
    _check_store_folder(root, root / INDEX_NAME, create=False)
    return _clean(root)


def _clean(root: Path) -> list[Path]:
    """The ``.tmp-*`` files of killed writers removed from ``root`` (the folder the user named, followed if it is a
    symlink) and its ``artifacts/`` folder (never followed: a symlinked ``artifacts/`` is left alone)."""
    writers = root / WRITERS_DIR
    return (clean_temporaries(artifacts_dir(root), follow=False) + clean_temporaries(root)
            + (clean_temporaries(writers, follow=False) if writers.is_dir() and not writers.is_symlink() else []))


def reindex_folder_store(root: str | Path) -> tuple[ReindexReport, list[Path]]:
    """Rebuild the index of the folder store at ``root`` from its artifact files
    (:func:`graftbench.store.index.rebuild_index`), under the store's write lock, after removing the temporary files of
    killed writers. Returns (the report, the temporary files removed). Nothing deposited is moved or deleted: files that
    fail the checks are named in the report and left in place.

    Raises :class:`StoreError` when ``root`` has no ``artifacts/`` folder (not a store) or the write lock is held
    too long, and ``OSError`` when the new index cannot be written (the old one is then unchanged).
    """
    root = Path(root)
    if not artifacts_dir(root).is_dir():
        if not root.exists():
            raise StoreError(f"no store at {root}: the folder does not exist (check the path)", missing=True)
        raise StoreError(f"{root} is not a graftbench store (no artifacts/ folder): nothing to reindex")
    with _write_lock(root):
        cleaned = _clean(root)
        return rebuild_index(artifacts_dir(root), root / INDEX_NAME, root / WRITERS_DIR), cleaned


def _write_lock(root: Path):
    return held_lock(root / WRITE_LOCK, WRITE_LOCK_TIMEOUT_S, f"the store {root} is locked by another writer ("
                     f"{root / WRITE_LOCK}) for more than {WRITE_LOCK_TIMEOUT_S:.0f} s; wait for it or stop it")


def _artifact_sha256(path: Path) -> str:
    """SHA-256 of the artifact file at ``path`` in a store's ``artifacts/`` folder, streamed; a file that is not
    regular, leaves the store or exceeds the artifact size cap raises
    :class:`graftbench.util.safe_files.UnsafeFileError`."""
    return sha256_regular(path, max_bytes=MAX_ARTIFACT_BYTES, within=path.parent.parent, what="artifact file")


class Store(IndexedStore):
    """A folder of content-addressed artifacts with a SQLite index (safe for concurrent writers).

    ``Store(root)`` opens the store for writing and creates it when the folder does not exist;
    ``create=False`` refuses a store that does not exist; ``readonly=True`` (for ``store ls`` and ``store
    verify``) also refuses one and writes nothing at all. Opening for writing removes the temporary files of
    killed writers; ``cleaned`` lists them. Raises :class:`StoreError` for a store that does not exist (when not
    to be created), a folder that is not a store, or an index that is missing, damaged or (read-only) from an
    older graftbench, and ``ValueError`` for a URL root (:func:`is_store_url`: open it with
    :func:`graftbench.store.open.open_store`).
    """

    def __init__(self, root: str | Path, *, create: bool = True, readonly: bool = False):
        if is_store_url(root):
            raise ValueError(f"{root} is a URL, not a folder: open it with open_store")
        self.root = Path(root)
        self.artifacts = artifacts_dir(self.root)
        self.index_path = self.root / INDEX_NAME
        self.readonly = readonly
        self.cleaned: list[Path] = []
        new = _check_store_folder(self.root, self.index_path, create and not readonly)
        if readonly:
            with self._index() as db:
                check_tables(db, self.index_path, self.root)
            return
        self.artifacts.mkdir(parents=True, exist_ok=True)
        if not new:
            self.cleaned = _clean(self.root)
        with self._index(write=True) as db:
            empty = not db.execute("SELECT name FROM sqlite_master WHERE name='artifacts'").fetchone()
            if empty and not new and _has_artifact_files(self.artifacts):
                raise StoreError(f"the store's index {self.index_path} is empty but {self.artifacts} holds artifact "
                                 f"files; {reindex_advice(self.root)}")
            create_or_upgrade(db)

    def path(self, artifact_id: str) -> Path:
        """The file of an artifact id (checked to be 64 hex digits first: :class:`ArtifactError` ``id``)."""
        return artifact_path(self.root, check_artifact_id(artifact_id))

    def put(self, data: bytes, pin: dict | None = None) -> str:
        """Store artifact bytes: write the file atomically and its writer record (this machine's kind of CPU and
        the deposit's pin ``pin``, :mod:`graftbench.store.writers`), then index both from the header inside
        ``data`` and the record; returns the artifact id (SHA-256 of ``data``). The bytes must have been computed
        on this machine: the record says so.

        Writing the same bytes twice keeps one copy (a damaged copy already there is replaced). Raises
        :class:`ArtifactError` (``format`` or ``header``) for bytes whose graftbench header cannot be read, before
        anything is written, :class:`graftbench.util.durable.StorageError` (e.g. disk full) with nothing new
        visible in the store or the index, and :class:`StoreError` for a damaged index or a read-only store.
        """
        return self.put_reporting(data, pin)[0]

    def put_reporting(self, data: bytes, pin: dict | None = None) -> tuple[str, bool]:
        """:meth:`put`, returning ``(id, written)``: ``written`` is ``False`` when an intact copy was already
        there (the index row is still inserted if it was missing, and the writer record added if this machine's
        kind or this pin had none)."""
        artifact_id = artifact_id_of(data)
        return self._put(artifact_id, data, decode_header(artifact_id, data), pin)

    def plant(self, data: bytes, index_header: dict) -> str:
        """For fault injection only: store ``data`` (any bytes) and index it with the fields of ``index_header``
        (``config_fingerprint`` and ``positions`` required; ``problem_key``, ``problem_text``, ``answer``,
        ``parent``, ``source`` optional) instead of the header inside it, so that a forged or unreadable file is
        routed to and the read checks must refuse it. Returns the id; raises as :meth:`put`."""
        return self._put(artifact_id_of(data), data, index_header)[0]

    def _put(self, artifact_id: str, data: bytes, header: dict, pin: dict | None = None) -> tuple[str, bool]:
        if self.readonly:
            raise StoreError(f"the store {self.root} was opened read-only")
        row = row_of(artifact_id, header, data)
        record, writer = new_record(artifact_id, pin)
        target = self.path(artifact_id)
        with _write_lock(self.root):  # from the file write to the index row: see the module's docstring
            written = not self._holds(target, artifact_id)
            if written:
                write_file_atomic(target, data, f"artifact {artifact_id[:16]} to {self.artifacts}",
                                  crash="deposit-before-rename")
            record_path = self.root / WRITERS_DIR / writer[0]
            if not record_path.is_file():  # a record is written once: the same name holds the same bytes
                record_path.parent.mkdir(exist_ok=True)
                write_file_atomic(record_path, record, f"the writer record of artifact {artifact_id[:16]}")
            crash_point("deposit-before-index")
            try:
                with closing(self._connect()) as db, db:
                    insert_row(db, row)
                    insert_writer(db, *writer)
            except sqlite3.Error as exc:
                if written:
                    target.unlink(missing_ok=True)
                if is_damaged(exc):
                    raise index_error(exc, self.index_path, self.root) from exc
                code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
                full = code == _SQLITE_FULL or "full" in str(exc).lower()
                cause = OSError(errno.ENOSPC if full else errno.EIO, str(exc))
                what = f"the index row of artifact {artifact_id[:16]} to {self.index_path}"
                raise storage_error(cause, what) from exc
        return artifact_id, written

    @staticmethod
    def _holds(target: Path, artifact_id: str) -> bool:
        try:
            return _artifact_sha256(target) == artifact_id
        except OSError:
            return False

    def read(self, artifact_id: str, integrity: str = "xxh3_128", room: int = 0) -> Artifact:
        """Read and check one artifact in one pass from its file (:func:`artifact_reader.read_safetensors`): the
        fast read a graft uses. For the full provenance checks use :meth:`read_audited`. With ``room`` (tokens)
        the keys and values are read into buffers with that many spare positions (:attr:`Artifact.room`), so the
        cache it is grafted into can take the query and the decode without moving them.

        Checks, in order: the size indexed for it (``size``, before reading), the whole file's hash (``hash``:
        XXH3-128 against the digest indexed at deposit, or with ``integrity="sha256"`` or no indexed digest,
        SHA-256 against the id), the safetensors layout (``format``), the graftbench header (``header``), the
        tensor set, dtypes and shapes against the header (``tensors``) and, on the SHA-256 path only, the payload
        hash against the header (``payload``). Raises :class:`ArtifactError` naming the
        failed check (also ``missing`` and ``read``); the returned artifact's ``timing`` splits read, hash and
        parse seconds. A damaged index raises :class:`StoreError` (it is not the artifact's fault).
        """
        if integrity not in INTEGRITY_METHODS:
            raise ValueError(f"integrity method {integrity!r} is not one of {INTEGRITY_METHODS}")
        return self._read_file(artifact_id, self.path(artifact_id), integrity, room)

    def _read_file(self, artifact_id: str, path: Path, integrity: str, room: int = 0) -> Artifact:
        """:meth:`read` of the artifact file at ``path`` (this store's file, or a store on object storage's
        checked local copy), with the checks :meth:`read` lists."""
        indexed_bytes, indexed_xxh3 = self._indexed(artifact_id)  # a damaged index raises StoreError, not a refusal
        with _file_errors(artifact_id, path):
            _check_size(artifact_id, path, path.parent.parent, indexed_bytes)
            method = "xxh3_128" if integrity == "xxh3_128" and indexed_xxh3 else "sha256"
            raw = read_safetensors(path, method, room)
        if raw.digest != (indexed_xxh3 if method == "xxh3_128" else artifact_id):
            source = "the XXH3-128 indexed at deposit" if method == "xxh3_128" else "its id"
            raise ArtifactError(artifact_id, "hash", f"{method} of the file does not equal {source} (corrupt or edited)")
        if raw.layout_error is not None:
            raise ArtifactError(artifact_id, raw.layout_error.check, str(raw.layout_error))
        header = header_from_metadata(artifact_id, raw.metadata)
        token_ids, layers = check_tensors(artifact_id, header, raw.tensors)
        if method == "sha256" and payload_sha256(token_ids, layers) != header.get("payload_sha256"):
            raise ArtifactError(artifact_id, "payload", "payload SHA-256 does not equal the header's")
        buffers = [(raw.buffers[f"layers.{i}.keys"], raw.buffers[f"layers.{i}.values"])
                   for i in range(len(layers))] if raw.buffers else None
        return Artifact(artifact_id, header, token_ids, layers, raw.timing, buffers)

    def header(self, artifact_id: str) -> dict:
        """The graftbench header of an artifact, read from its file's first bytes (no tensors). Raises
        :class:`ArtifactError`: ``missing``, ``read``, ``format`` or ``header``."""
        with self._header_table(artifact_id) as (_, _, table):
            return header_from_metadata(artifact_id, metadata_of(table))

    def token_ids(self, artifact_id: str) -> list[int]:
        """The token ids an artifact holds (``token_ids``, int64 ``[n]``), read from the file without its KV
        tensors: what the example-as-prompt arm prefills instead of restoring. Checked against the header's
        positions; the payload is not hashed (an arm that prefills these ids is judged by its logits against the
        graft's). Raises :class:`ArtifactError`: ``missing``, ``read``, ``format``, ``header`` or ``tensors``."""
        with self._header_table(artifact_id) as (handle, length, table):
            start, n = _token_span(artifact_id, table, header_from_metadata(artifact_id, metadata_of(table)))
            handle.seek(8 + length + start)
            data = handle.read(8 * n)
        if len(data) != 8 * n:
            raise ArtifactError(artifact_id, "format", f"token_ids runs past the end of {self.path(artifact_id)}")
        return [int.from_bytes(data[i:i + 8], "little", signed=True) for i in range(0, len(data), 8)]

    @contextmanager
    def _header_table(self, artifact_id: str):
        """An artifact file opened (a regular file inside the store, under the size cap) with its safetensors
        header parsed: ``(handle, header length, table)``, the handle just past the header. A missing or unreadable
        file, a malformed header, and a :class:`LayoutError` raised in the ``with`` body all become one
        :class:`ArtifactError` (``missing``, ``read``, or the layout check's name)."""
        path = self.path(artifact_id)
        try:
            with open_regular(path, max_bytes=MAX_ARTIFACT_BYTES, within=self.root, what="artifact file") as handle:
                length = header_length(handle.read(8), os.fstat(handle.fileno()).st_size)
                yield handle, length, parse_table(handle.read(length))
        except FileNotFoundError as exc:
            raise ArtifactError(artifact_id, "missing", f"no file {path}") from exc
        except OSError as exc:
            raise ArtifactError(artifact_id, "read", f"cannot read {path}: {exc}") from exc
        except LayoutError as exc:
            raise ArtifactError(artifact_id, exc.check, str(exc)) from exc

    def read_audited(self, artifact_id: str) -> Artifact:
        """Read and check one artifact with every check there is (slower than :meth:`read`; for ``store verify``):
        the size indexed for it, SHA-256 of the file against the id and of the payload against the header
        (:func:`graftbench.store.codec.decode_artifact`), and the file's XXH3-128 against the digest indexed for
        it. Raises :class:`ArtifactError` naming the failed check (also ``missing`` and ``read``), and
        :class:`StoreError` for a damaged index."""
        indexed = self._indexed(artifact_id)
        return self._audit(artifact_id, self._file_bytes(artifact_id, indexed), indexed)

    def audit(self, artifact_id: str) -> dict:
        """:meth:`read_audited`'s checks on the file's bytes without making tensors (no torch: ``store verify``),
        for a torch KV artifact or a llama.cpp state (:func:`graftbench.store.llama_state.audit_any`); returns the
        artifact's header. Raises as :meth:`read_audited`."""
        indexed = self._indexed(artifact_id)
        return self._audit(artifact_id, self._file_bytes(artifact_id, indexed), indexed, audit_any)

    def read_state(self, artifact_id: str, integrity: str = "xxh3_128", timing: dict | None = None,
                   buffer: bytearray | None = None,
                   formats: tuple[str, ...] = (LLAMA_FORMAT,)) -> tuple[dict, list[int], memoryview]:
        """A llama.cpp sequence state artifact: ``(header, token ids, state bytes)``, read only when it is a regular
        file inside the store of the size indexed for it. As :meth:`read` for a torch artifact, the whole file's
        hash is the XXH3-128 indexed at deposit (``hash``; ``integrity="sha256"`` or no indexed digest: SHA-256
        against the id and of the payload against the header,
        :func:`graftbench.store.llama_state.decode_state`), then its layout, header and tensors
        (:func:`graftbench.store.llama_state.parse_state`). The state is a view of the bytes read. Whether it may
        be restored under a run's pin is the engine's check. The XXH3-128 is fed each block as it is read, while
        the block is in cache (:func:`graftbench.util.safe_files.read_regular_into`). ``timing`` (when given) gets
        ``read_s`` (with that hashing), ``integrity_s`` (the digest compared; SHA-256 path: the whole check) and
        ``parse_s`` in seconds. With ``buffer`` the file is read into it (grown when needed):
        a caller that keeps one reads each graft without allocating, and the state is a view of it, valid until
        the buffer is read into again. ``formats``: the state formats the caller restores (a llama.cpp state's by
        default; another engine names its own, :func:`graftbench.store.codec.is_state_format`). Raises :class:`ArtifactError` (``missing``, ``size``, ``read``,
        ``hash``, ``header``, ``format``, ``tensors``, ``payload``), ``ValueError`` for another ``integrity``,
        :class:`StoreError` for a damaged index."""
        if integrity not in INTEGRITY_METHODS:
            raise ValueError(f"integrity method {integrity!r} is not one of {INTEGRITY_METHODS}")
        timing = {} if timing is None else timing
        started = time.perf_counter()
        indexed = self._indexed(artifact_id)
        streamed = integrity == "xxh3_128" and indexed[1] is not None
        digest = xxh3_128_stream() if streamed else None
        data = self._file_bytes(artifact_id, indexed, buffer, on_block=digest.update if streamed else None)
        read = time.perf_counter()
        timing["read_s"] = read - started
        if not streamed:
            header, token_ids, state = decode_state(artifact_id, data, formats)
            timing["integrity_s"], timing["parse_s"] = time.perf_counter() - read, 0.0
            return header, token_ids, state
        if digest.hexdigest() != indexed[1]:
            raise ArtifactError(artifact_id, "hash", "xxh3_128 of the file does not equal the XXH3-128 indexed at "
                                                     "deposit (corrupt or edited)")
        hashed = time.perf_counter()
        header, token_ids, state = parse_state(artifact_id, data, formats)
        timing["integrity_s"], timing["parse_s"] = hashed - read, time.perf_counter() - hashed
        return header, [int(t) for t in token_ids], state

    def _file_bytes(self, artifact_id: str, indexed: tuple[int | None, str | None],
                    buffer: bytearray | None = None, on_block=None):
        """The artifact file's bytes (read into ``buffer``, or a new one when only ``on_block`` is given: a view of
        it, each block read handed to ``on_block``: :func:`graftbench.util.safe_files.read_regular_into`), read only
        when it is a regular file inside the store, under the size cap and of the size the index records
        (``indexed``). Raises :class:`ArtifactError` (``missing``, ``size``, ``read``)."""
        path = self.path(artifact_id)
        with _file_errors(artifact_id, path):
            _check_size(artifact_id, path, self.root, indexed[0])
            if buffer is not None or on_block is not None:
                return read_regular_into(path, bytearray() if buffer is None else buffer, max_bytes=MAX_ARTIFACT_BYTES,
                                         within=self.root, what="artifact file", on_block=on_block)
            return read_regular(path, max_bytes=MAX_ARTIFACT_BYTES, within=self.root, what="artifact file")

    @staticmethod
    def _audit(artifact_id: str, data: bytes, indexed: tuple[int | None, str | None], decode=decode_artifact):
        """:meth:`read_audited`'s checks of the bytes ``data`` read for ``artifact_id``, against its ``(bytes,
        xxh3_128)`` index entry ``indexed`` (``None`` where not indexed); returns what ``decode`` (which checks
        the id and payload hashes) returns."""
        indexed_bytes, indexed_xxh3 = indexed
        if indexed_bytes is not None and len(data) != indexed_bytes:
            raise ArtifactError(artifact_id, "size", f"file is {len(data)} bytes, the index says {indexed_bytes}")
        decoded = decode(artifact_id, data)
        if indexed_xxh3 is not None and xxh3_128_hex(data) != indexed_xxh3:
            raise ArtifactError(artifact_id, "hash", "XXH3-128 of the file does not equal the digest indexed for it")
        return decoded

    def inventory(self) -> dict[str, list[str]]:
        """A snapshot for crash and fault checks, each a sorted list: ``indexed`` ids, ``intact`` artifact files
        (SHA-256 equals the name), ``damaged`` artifact files (it does not), ``orphans`` (intact files not
        indexed: a deposit killed before its index insert), ``missing`` (indexed ids without a file),
        ``temporaries`` (``.tmp-*`` left by a killed writer) and ``other`` names."""
        indexed = set(self.ids())
        intact, damaged, temporaries, other = [], [], [], []
        for path in sorted(self.artifacts.iterdir()) if self.artifacts.is_dir() else []:
            name = id_of_path(path)
            if path.name.startswith(TEMP_PREFIX):
                temporaries.append(path.name)
            elif name is None:
                other.append(path.name)
            else:
                (intact if self._holds(path, name) else damaged).append(name)
        files = set(intact) | set(damaged)
        return {"indexed": sorted(indexed), "intact": intact, "damaged": damaged,
                "orphans": sorted(set(intact) - indexed), "missing": sorted(indexed - files),
                "temporaries": temporaries, "other": other}

    def temporaries(self) -> list[str]:
        """The names of the ``.tmp-*`` files in the store (its ``artifacts/`` folder and its root): writes in
        flight, or left by writers killed before their rename (``store clean`` removes those)."""
        return sorted(entry.name for folder in (self.artifacts, self.root) if folder.is_dir()
                      for entry in os.scandir(folder) if entry.name.startswith(TEMP_PREFIX))


@contextmanager
def _file_errors(artifact_id: str, path: Path):
    """Refuse ``artifact_id`` with :class:`ArtifactError` when its file ``path`` cannot be read inside the block:
    ``missing`` (no file), ``read`` (a FIFO, a device, a symlink out of the store, over the size cap, or any other
    ``OSError``)."""
    try:
        yield
    except FileNotFoundError as exc:
        raise ArtifactError(artifact_id, "missing", f"no file {path}") from exc
    except UnsafeFileError as exc:  # a FIFO, a device, a symlink out of the store, over the size cap
        raise ArtifactError(artifact_id, "read", str(exc)) from exc
    except OSError as exc:
        raise ArtifactError(artifact_id, "read", f"cannot read {path}: {exc}") from exc


def _check_size(artifact_id: str, path: Path, within: Path, indexed_bytes: int | None) -> None:
    """Before a byte of it is read: ``path`` is a regular file inside ``within``, of at most
    :data:`MAX_ARTIFACT_BYTES`, and of the size the index records (``indexed_bytes``; ``None``: not indexed), else
    :class:`ArtifactError` (``size``) or what :func:`graftbench.util.safe_files.regular_file_size` raises."""
    size = regular_file_size(path, max_bytes=MAX_ARTIFACT_BYTES, within=within, what="artifact file")
    if indexed_bytes is not None and size != indexed_bytes:
        raise ArtifactError(artifact_id, "size", f"file is {size} bytes, the index says {indexed_bytes}")


def _token_span(artifact_id: str, table: dict, header: dict) -> tuple[int, int]:
    """Where an artifact's ``token_ids`` bytes start after the safetensors header, and how many ids it holds: the
    header's position span, which the tensor must match (int64 ``[n]``, ``8 n`` bytes). Raises
    :class:`ArtifactError` (``tensors``) otherwise."""
    n = header["positions"][1] - header["positions"][0]
    spec = table.get("token_ids")
    spec = spec if isinstance(spec, dict) else {}
    offsets = spec.get("data_offsets")
    if (spec.get("dtype"), spec.get("shape")) != ("I64", [n]):
        raise ArtifactError(artifact_id, "tensors", f"token_ids is not int64 [{n}] (the header's position span)")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(x) is int for x in offsets)
            and 0 <= offsets[0] and offsets[1] - offsets[0] == 8 * n):
        raise ArtifactError(artifact_id, "tensors", "token_ids' data offsets do not hold its shape")
    return offsets[0], n
