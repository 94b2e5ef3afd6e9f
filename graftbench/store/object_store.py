"""Stores on object storage: an fsspec URL (``s3://bucket/prefix``, ``file:///path``, ``memory://name``) used as a
content-addressed artifact store, with a local index and a local read-through cache.

Under the URL (the folder store's layout, without its index)::

    <url>/artifacts/<id>.safetensors   one object per artifact, created with a put-if-absent
    <url>/writers/<id>.<digest>.json   who wrote it (kind of CPU, pin: :mod:`graftbench.store.writers`), put-if-absent
    <url>/graftbench-store.json        written when a writer creates the store, so that a mistyped URL is refused

On this machine, under the store cache (``$GRAFTBENCH_STORE_CACHE``, default ``$GRAFTBENCH_CACHE/store``)::

    artifacts/<id>.safetensors         the read-through cache: checked copies, keyed by artifact id (any URL)
    stores/<key>/index.sqlite          the URL's index, derived from its objects (key: SHA-256 of the URL)
    stores/<key>/url                   the URL itself, for a person looking at the folder

What holds:

* **Put-if-absent.** A deposit creates its object only if no object has that name: S3's conditional write
  (``If-None-Match: *``, through ``s3fs``'s ``mode="create"``), an exclusive ``link`` of a fully written and
  fsynced temporary file for ``file://``, an exclusive create under a process lock for ``memory://``. Two workers
  depositing the same artifact leave one object and both succeed; an object already there that is not these bytes
  (damaged) is replaced by them.
* **No partial object.** An S3 PUT is atomic (a killed upload leaves nothing); a ``file://`` object appears by
  ``link`` of a complete file; a killed ``file://`` writer leaves only a ``.tmp-*`` file (``store clean``).
* **The index is derived.** Each index row comes from the header at the start of an object (ranged reads) and
  the object's listed size (:func:`graftbench.store.index.row_from_header`); opening the store lists the objects
  and indexes the new ones, so a worker with an empty cache builds its index from the objects alone, and ``store
  reindex`` rebuilds it from scratch. Nothing in the index is the source of truth.
* **Checked reads, once.** :meth:`ObjectStore.read` fetches an object the first time it is read, checks that the
  SHA-256 of its bytes equals its id, keeps the copy in the cache (written atomically) and records its XXH3-128
  in the local index; later reads use the copy with the XXH3-128 check of :meth:`graftbench.store.folder.Store.read`. A
  copy that fails a check is removed and fetched again once. ``store verify`` reads the objects themselves
  (SHA-256 against the id, payload against the header).

The S3 endpoint is AWS's unless ``$GRAFTBENCH_S3_ENDPOINT`` (or botocore's own ``AWS_ENDPOINT_URL_S3``) names
another (MinIO, a test server); credentials come from the usual AWS variables or files. ``s3fs`` is the optional
extra ``graftbench[s3]``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from .codec import LLAMA_FORMAT, Artifact, ArtifactError, check_artifact_id, decode_header
from .llama_state import audit_any
from .ids import ARTIFACTS_DIR, SUFFIX, artifact_id_of, id_of_path
from .reader import INTEGRITY_METHODS, LayoutError, header_length, xxh3_128_hex
from ..util.durable import TEMP_PREFIX, StorageError, clean_temporaries, crash_point, storage_error, write_file_atomic
from ..util.hashing import canonical_json, sha256_bytes, sha256_text
from .object_backend import BACKEND_ERRORS as _ERRORS
from .object_backend import Objects
from ..settings import cache_root
from .folder import Store
from .index import (INDEX_NAME, ReindexReport, StoreError, create_or_upgrade, has_writers, held_lock, insert_row,
                    insert_writer, is_damaged, row_from_header, row_of, write_index)
from .writers import MAX_RECORD_BYTES, WRITERS_DIR, WriterRecordError, new_record, parse_record

__all__ = ["CACHE_ENV", "ObjectStore", "clean_object_store", "require_object_store", "store_cache"]

CACHE_ENV = "GRAFTBENCH_STORE_CACHE"  # the store cache folder; default <GRAFTBENCH_CACHE>/store
MARKER = "graftbench-store.json"  # under the URL: says a graftbench store was created there
MARKER_BYTES = canonical_json({"format": "graftbench.store/1"}).encode()
HEAD_BYTES = 64 << 10  # bytes read first for an object's header; a longer header takes a second ranged read
LOCK_TIMEOUT_S = 600.0


def store_cache() -> Path:
    """The local folder of every store on object storage's read-through cache and index:
    ``$GRAFTBENCH_STORE_CACHE``, else ``<GRAFTBENCH_CACHE>/store`` (:func:`graftbench.settings.cache_root`)."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else cache_root() / "store"


def _cache_folder(url: str) -> Path:
    return store_cache() / "stores" / sha256_text(url.rstrip("/"))[:32]


def _unreachable(url: str, exc: BaseException) -> StoreError:
    return StoreError(f"cannot reach the store {url}: {exc}")


def _no_store(url: str) -> StoreError:
    return StoreError(f"no store at {url}: no {MARKER} and no artifacts/ objects there (check the URL; "
                      f"`graftbench deposit --store {url}` creates a store; the bucket must exist)", missing=True)


def require_object_store(url: str) -> None:
    """Check that a store exists at ``url`` (its marker object, or any artifact object) without creating or
    changing anything. Raises :class:`StoreError` naming the URL otherwise (``missing`` when there is none),
    or when the URL cannot be opened or reached."""
    objects = Objects(url)
    try:
        present = bool(objects.list(ARTIFACTS_DIR)) or objects.exists(MARKER)
    except _ERRORS as exc:
        raise _unreachable(objects.url, exc) from exc
    if not present:
        raise _no_store(objects.url)


def clean_object_store(url: str) -> list[Path]:
    """Remove the ``.tmp-*`` files of killed writers: those under a ``file://`` store's ``artifacts/`` folder and
    those in this machine's store cache (never one a live process is writing). Returns the paths removed.
    Raises :class:`StoreError` when no store exists at ``url``."""
    require_object_store(url)
    objects = Objects(url)
    removed = clean_temporaries(Path(objects.key(ARTIFACTS_DIR))) if objects.local else []
    return removed + clean_temporaries(store_cache() / ARTIFACTS_DIR) + clean_temporaries(_cache_folder(url))


class ObjectStore(Store):
    """A content-addressed store on object storage at the fsspec URL ``root`` (see the module's docstring):
    the same reads, lookups and deposits as a folder :class:`graftbench.store.folder.Store`, with the index and a
    read-through cache on this machine. :func:`graftbench.store.open.open_store` opens one for a URL.

    ``create=False`` refuses a URL where no store exists; ``readonly=True`` also refuses one and never writes
    the store (only this machine's cache and index). Opening lists the objects and indexes new ones
    (:meth:`refresh`); ``skipped`` names the objects whose header could not be read. Raises :class:`StoreError`
    for a URL that cannot be opened or reached or has no store (when not to be created), and
    :class:`graftbench.util.durable.StorageError` when the store's marker cannot be written.
    """

    def __init__(self, root: str, *, create: bool = True, readonly: bool = False):
        self.objects = Objects(root)
        self.root = self.url = self.objects.url
        self.readonly = readonly
        self.cache = _cache_folder(self.url)
        self.index_path = self.cache / INDEX_NAME
        self.artifacts = store_cache() / ARTIFACTS_DIR  # the local copies, not the store's objects
        self.cleaned: list[Path] = []
        self.skipped: list[tuple[str, str]] = []
        try:
            listing = self.objects.list(ARTIFACTS_DIR)
            marked = self.objects.exists(MARKER)
        except _ERRORS as exc:
            raise _unreachable(self.url, exc) from exc
        if not listing and not marked and (readonly or not create):
            raise _no_store(self.url)
        if not marked and not readonly:
            try:
                self.objects.put_if_absent(MARKER, MARKER_BYTES)
            except _ERRORS as exc:
                raise storage_error(exc, f"the store marker {self.url}/{MARKER}") from exc
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.cache.mkdir(parents=True, exist_ok=True)
        (self.cache / "url").write_text(self.url + "\n", encoding="utf-8")
        if not readonly:
            local = clean_temporaries(Path(self.objects.key(ARTIFACTS_DIR))) if self.objects.local else []
            self.cleaned = local + clean_temporaries(self.artifacts) + clean_temporaries(self.cache)
        self.refresh(listing)

    # ------------------------------------------------------------------------------------------ the index

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.index_path, timeout=60)  # this machine's cache: written even when read-only

    def _index_lock(self):
        return held_lock(self.cache / "index.lock", LOCK_TIMEOUT_S, f"the local index of {self.url} ("
                         f"{self.index_path}) is locked for more than {LOCK_TIMEOUT_S:.0f} s by another process")

    def _ready_index(self) -> None:
        """Create or upgrade the local index; a damaged one (it is only a cache) is removed and started again."""
        try:
            with self._index_lock(), self._index(write=True) as db:
                create_or_upgrade(db)
        except StoreError as exc:
            if not isinstance(exc.__cause__, sqlite3.DatabaseError) or not is_damaged(exc.__cause__):
                raise
            with self._index_lock():
                for suffix in ("", "-journal", "-wal", "-shm"):
                    Path(f"{self.index_path}{suffix}").unlink(missing_ok=True)
                with self._index(write=True) as db:
                    create_or_upgrade(db)

    def _header_row(self, artifact_id: str, size: int) -> tuple[tuple | None, str]:
        """The index row of the object of ``artifact_id`` (``size`` bytes) from its header alone (one or two
        ranged reads), or ``(None, why it is skipped)``."""
        try:
            return row_from_header(artifact_id, self._read_header(artifact_id, size), size, None), ""
        except LayoutError as exc:
            return None, f"{exc.check}: {exc}"
        except ArtifactError as exc:
            return None, str(exc)
        except FileNotFoundError:
            return None, "gone while the store was listed"
        except _ERRORS as exc:
            return None, f"cannot read its header ({exc})"

    def _read_header(self, artifact_id: str, size: int) -> dict:
        """The graftbench header of the object of ``artifact_id`` (``size`` bytes), from one or two ranged reads."""
        name = f"{ARTIFACTS_DIR}/{artifact_id}{SUFFIX}"
        head = self.objects.get(name, 0, min(size, HEAD_BYTES))
        end = 8 + header_length(head[:8], size)
        if end > len(head):
            head += self.objects.get(name, len(head), end)
        return decode_header(artifact_id, head[:end])

    def header(self, artifact_id: str) -> dict:
        """The graftbench header of an indexed artifact, read from the store (its header only, no tensors).
        Raises :class:`ArtifactError` (``missing``, ``read``, ``format``, ``header``)."""
        size = self._indexed(artifact_id)[0]
        try:
            return self._read_header(artifact_id, size if size is not None else HEAD_BYTES)
        except FileNotFoundError as exc:
            raise ArtifactError(artifact_id, "missing", f"no object for {artifact_id[:16]} in {self.url}") from exc
        except LayoutError as exc:
            raise ArtifactError(artifact_id, exc.check, str(exc)) from exc
        except _ERRORS as exc:
            raise ArtifactError(artifact_id, "read", f"cannot read its header from {self.url} ({exc})") from exc

    def refresh(self, listing: dict[str, int] | None = None) -> None:
        """Bring this machine's index up to date with the objects (``listing``, ``{name: bytes}``, is listed when
        not given): index each new artifact object from its header, drop the rows of objects that are gone or
        changed size. Rows inserted by another process after this listing began are kept. Objects whose header
        cannot be read are named in ``skipped``. Raises :class:`StoreError` when the store cannot be listed."""
        self._ready_index()
        with self._index() as db:
            before = dict(db.execute("SELECT id, bytes FROM artifacts"))
        if listing is None:
            try:
                listing = self.objects.list(ARTIFACTS_DIR)
            except _ERRORS as exc:
                raise _unreachable(self.url, exc) from exc
        listed = {aid: size for name, size in listing.items() if (aid := id_of_path(name))}
        stale = [aid for aid, size in before.items() if listed.get(aid) != size]
        rows, self.skipped = [], []
        for aid, size in sorted(listed.items()):
            if before.get(aid) != size:
                row, reason = self._header_row(aid, size)
                rows.append(row) if row else self.skipped.append((f"{aid}{SUFFIX}", reason))
        with self._index() as db:
            known = {name for (name,) in db.execute("SELECT name FROM writers")} if has_writers(db) else set()
        writers = self._writer_records(known)
        if not stale and not rows and not writers:
            return
        with self._index(write=True) as db:
            for aid in stale:
                db.execute("DELETE FROM bands WHERE artifact = (SELECT rowid FROM artifacts WHERE id = ?)", (aid,))
                db.execute("DELETE FROM artifacts WHERE id = ?", (aid,))
            for row in rows:
                insert_row(db, row)
            for writer in writers:
                insert_writer(db, *writer)

    def _writer_records(self, known: set[str], skipped: list | None = None) -> list[tuple]:
        """The index entries of the writer record objects whose names are not in ``known`` (one read each); a
        record that cannot be read is left out (and named in ``skipped`` when given). Raises :class:`StoreError`
        when the records cannot be listed."""
        try:
            listing = self.objects.list(WRITERS_DIR)
        except _ERRORS as exc:
            raise _unreachable(self.url, exc) from exc
        entries = []
        for name, size in sorted(listing.items()):
            if name in known or name.startswith(TEMP_PREFIX):
                continue
            try:
                if size > MAX_RECORD_BYTES:
                    raise WriterRecordError(f"{name}: {size} bytes, over the {MAX_RECORD_BYTES} a record may have")
                entries.append((name, *parse_record(name, self.objects.get(f"{WRITERS_DIR}/{name}"))))
            except (WriterRecordError, FileNotFoundError, *_ERRORS) as exc:
                if skipped is not None:
                    skipped.append((f"{WRITERS_DIR}/{name}", str(exc)))
        return entries

    def reindex(self) -> ReindexReport:
        """Rebuild this machine's index of the store from its objects alone (each artifact object's header, one or
        two ranged reads each), into a new index file renamed over the old one. Objects whose name is not an
        artifact id or whose header cannot be read are named in the report and left as they are; ``.tmp-*``
        objects (a ``file://`` write in flight) are listed apart. Raises :class:`StoreError` when the store
        cannot be listed, ``OSError`` when the new index cannot be written."""
        try:
            listing = self.objects.list(ARTIFACTS_DIR)
        except _ERRORS as exc:
            raise _unreachable(self.url, exc) from exc
        temporaries = sorted(name for name in listing if name.startswith(TEMP_PREFIX))
        entries = []
        for name, size in sorted(listing.items()):
            aid = id_of_path(name)
            if name.startswith(TEMP_PREFIX):
                continue
            if aid is None:
                entries.append((name, None, "not an artifact file name (64 hex digits + .safetensors)"))
            else:
                entries.append((name, *self._header_row(aid, size)))
        unreadable: list[tuple[str, str]] = []
        writers = self._writer_records(set(), unreadable)
        with self._index_lock():
            report = write_index(self.index_path, entries, temporaries, writers)
        report.skipped += unreadable
        self.skipped = [(name, reason) for name, reason in report.skipped if id_of_path(name)]
        return report

    def _record_xxh3(self, artifact_id: str, size: int, digest: str) -> None:
        with self._index(write=True) as db:
            db.execute("UPDATE artifacts SET xxh3_128 = ? WHERE id = ? AND bytes = ? AND xxh3_128 IS NULL",
                       (digest, artifact_id, size))

    # ------------------------------------------------------------------------------------------ deposits

    def _name(self, artifact_id: str) -> str:
        return f"{ARTIFACTS_DIR}/{check_artifact_id(artifact_id)}{SUFFIX}"

    def _put(self, artifact_id: str, data: bytes, header: dict, pin: dict | None = None) -> tuple[str, bool]:
        """Create the object put-if-absent (an object already there with other bytes is replaced), keep a local
        copy, then index it here. Raises :class:`StoreError` for a read-only store,
        :class:`graftbench.util.durable.StorageError` when the object cannot be written (nothing partial is visible)."""
        if self.readonly:
            raise StoreError(f"the store {self.url} was opened read-only")
        row = row_of(artifact_id, header, data)
        name = self._name(artifact_id)
        try:
            written = self.objects.put_if_absent(name, data, crash="deposit-before-rename")
            if not written and self.objects.get(name) != data:  # a damaged object: every writer puts the same bytes
                self.objects.put(name, data)
                written = True
        except _ERRORS as exc:
            raise storage_error(exc, f"artifact {artifact_id[:16]} to {self.url}") from exc
        record, writer = new_record(artifact_id, pin)
        try:  # the same name always holds the same bytes: a record already there is this one
            self.objects.put_if_absent(f"{WRITERS_DIR}/{writer[0]}", record)
        except _ERRORS as exc:
            raise storage_error(exc, f"the writer record of artifact {artifact_id[:16]} to {self.url}") from exc
        crash_point("deposit-before-index")
        try:
            write_file_atomic(self.path(artifact_id), data, f"the local copy of artifact {artifact_id[:16]}")
        except StorageError:
            pass  # the object is stored; a read will fetch it
        with self._index_lock(), self._index(write=True) as db:
            insert_row(db, row)
            insert_writer(db, *writer)
        return artifact_id, written

    # ------------------------------------------------------------------------------------------ reads

    def path(self, artifact_id: str) -> Path:
        """This machine's copy of an artifact in the read-through cache (it may not be there yet); the id is
        checked to be 64 hex digits first (:class:`ArtifactError` ``id``)."""
        return self.artifacts / f"{check_artifact_id(artifact_id)}{SUFFIX}"

    def _fetch(self, artifact_id: str) -> None:
        """Fetch the object of ``artifact_id``, check that its SHA-256 equals the id, keep it in the cache
        (atomically) and record its XXH3-128 in the local index. Raises :class:`ArtifactError`: ``missing``,
        ``read`` (including a copy that cannot be kept), ``hash`` (the object is damaged; nothing is kept)."""
        name, data = self._name(artifact_id), self._get_object(artifact_id)
        if artifact_id_of(data) != artifact_id:
            raise ArtifactError(artifact_id, "hash", f"SHA-256 of the object {self.url}/{name} does not equal its "
                                                     "id (damaged in the store; not kept)")
        try:
            write_file_atomic(self.path(artifact_id), data, f"the local copy of artifact {artifact_id[:16]}")
        except StorageError as exc:
            raise ArtifactError(artifact_id, "read", str(exc)) from exc
        self._record_xxh3(artifact_id, len(data), xxh3_128_hex(data))

    def token_ids(self, artifact_id: str) -> list[int]:
        """:meth:`Store.token_ids` from the read-through cache, fetched (and checked against its id) the first
        time. Raises :class:`ArtifactError` as :meth:`Store.token_ids` and :meth:`_fetch` do."""
        if not self.path(artifact_id).exists():
            self._fetch(artifact_id)
        return super().token_ids(artifact_id)

    def read(self, artifact_id: str, integrity: str = "xxh3_128", room: int = 0) -> Artifact:
        """Read and check one artifact through the read-through cache: fetched and checked (SHA-256 against the
        id) the first time, then read from the local copy with every check of :meth:`Store.read` (XXH3-128
        against the digest recorded when it was fetched). A local copy that fails a check is removed and fetched
        once more. ``room`` as for :meth:`Store.read`. Raises :class:`ArtifactError` naming the failed check (also ``missing`` and ``read``),
        :class:`StoreError` for a damaged index."""
        if integrity not in INTEGRITY_METHODS:
            raise ValueError(f"integrity method {integrity!r} is not one of {INTEGRITY_METHODS}")
        path = self.path(artifact_id)
        fetched = not path.exists()
        if fetched:
            self._fetch(artifact_id)
        indexed_bytes, indexed_xxh3 = self._indexed(artifact_id)
        try:
            artifact = self._read_file(artifact_id, path, integrity, room)
        except ArtifactError:
            if fetched:
                raise
            path.unlink(missing_ok=True)  # a damaged local copy: the object is the truth
            self._fetch(artifact_id)
            return self._read_file(artifact_id, path, integrity, room)
        if indexed_bytes is not None and indexed_xxh3 is None:  # checked with SHA-256 just now: keep the fast digest
            data = path.read_bytes()
            if artifact_id_of(data) == artifact_id:
                self._record_xxh3(artifact_id, len(data), xxh3_128_hex(data))
        return artifact

    def read_audited(self, artifact_id: str) -> Artifact:
        """Read the object itself (not the local copy) and check it with every check there is, as
        :meth:`Store.read_audited` does (size, SHA-256 against the id, payload against the header, XXH3-128
        against the local index). Raises :class:`ArtifactError` (also ``missing`` and ``read``)."""
        indexed = self._indexed(artifact_id)
        return self._audit(artifact_id, self._get_object(artifact_id), indexed)

    def audit(self, artifact_id: str) -> dict:
        """:meth:`read_audited`'s checks without making tensors (no torch); returns the artifact's header."""
        indexed = self._indexed(artifact_id)
        return self._audit(artifact_id, self._get_object(artifact_id), indexed, audit_any)

    def read_state(self, artifact_id: str, integrity: str = "xxh3_128", timing: dict | None = None,
                   buffer: bytearray | None = None,
                   formats: tuple[str, ...] = (LLAMA_FORMAT,)) -> tuple[dict, list[int], memoryview]:
        """:meth:`Store.read_state` from the read-through cache, fetched (and checked against its id) the first
        time. Raises :class:`ArtifactError` as :meth:`Store.read_state` and :meth:`_fetch` do."""
        if not self.path(artifact_id).exists():
            self._fetch(artifact_id)
        return super().read_state(artifact_id, integrity, timing, buffer, formats)

    def _get_object(self, artifact_id: str) -> bytes:
        """The whole object of ``artifact_id``. Raises :class:`ArtifactError`: ``missing`` or ``read``."""
        name = self._name(artifact_id)
        try:
            data = self.objects.get(name)
        except FileNotFoundError as exc:
            raise ArtifactError(artifact_id, "missing", f"no object {self.url}/{name}") from exc
        except _ERRORS as exc:
            raise ArtifactError(artifact_id, "read", f"cannot read {self.url}/{name}: {exc}") from exc
        return data

    def payload_sha256(self, artifact_id: str) -> str | None:
        """SHA-256 (hex) of the object of ``artifact_id`` as the store holds it (not the local copy), ``None`` when
        the store has no such object. Raises :class:`ArtifactError` ``read`` when it cannot be read."""
        try:
            return sha256_bytes(self._get_object(artifact_id))
        except ArtifactError as exc:
            if exc.check == "missing":
                return None
            raise

    def verify(self) -> list[str]:
        """:meth:`Store.verify` over the objects (each read from the store, not from the cache), and the objects
        whose header could not be read when the store was opened; one line per problem (empty when all hold)."""
        return [f"object {name}: not indexed: {reason}" for name, reason in self.skipped] + super().verify()

    def inventory(self) -> dict[str, list[str]]:
        """The snapshot of :meth:`Store.inventory` over the objects (each read whole to check its SHA-256)."""
        indexed = set(self.ids())
        intact, damaged, temporaries, other = [], [], [], []
        for name in sorted(self.objects.list(ARTIFACTS_DIR)):
            aid = id_of_path(name)
            if name.startswith(TEMP_PREFIX):
                temporaries.append(name)
            elif aid is None:
                other.append(name)
            else:
                (intact if artifact_id_of(self.objects.get(f"{ARTIFACTS_DIR}/{name}")) == aid else damaged).append(aid)
        files = set(intact) | set(damaged)
        return {"indexed": sorted(indexed), "intact": intact, "damaged": damaged,
                "orphans": sorted(set(intact) - indexed), "missing": sorted(indexed - files),
                "temporaries": temporaries, "other": other}

    def temporaries(self) -> list[str]:
        """The names of ``.tmp-*`` objects under ``artifacts/`` (a ``file://`` store's writes in flight or left by
        killed writers; an S3 store never has any)."""
        return sorted(name for name in self.objects.list(ARTIFACTS_DIR) if name.startswith(TEMP_PREFIX))

