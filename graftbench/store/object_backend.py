"""Access to the objects under one store URL through fsspec (*torch-free*): whole and ranged reads, listing,
whole writes, and the put-if-absent that a deposit on object storage rests on (:mod:`graftbench.store.object_store`).

Put-if-absent, by filesystem: S3's conditional write (``If-None-Match: *``, which ``s3fs`` sends for
``pipe_file(..., mode="create")``; a second writer gets HTTP 412, read here as "already there"); for ``file://``
a complete, fsynced temporary file hard-linked into place (``link`` fails when the name exists, so the first
complete file wins and no partial file is ever visible); for ``memory://`` fsspec's exclusive create under a
process lock. Other fsspec filesystems get their own ``mode="create"``.

The S3 endpoint is AWS's unless ``$GRAFTBENCH_S3_ENDPOINT`` names another (MinIO, a test server on loopback);
botocore's own ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` work as well. Credentials and region come from the
usual AWS variables and files. ``s3://`` needs ``s3fs`` (``pip install 'graftbench[s3]'``).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..util.durable import crash_point, fsync_dir, locked_temp, write_all, write_file_atomic
from .index import StoreError

try:  # the errors botocore raises outside s3fs's translation (no credentials, endpoint unreachable)
    from botocore.exceptions import BotoCoreError
except ImportError:  # no s3fs installed: only file:// and memory:// stores
    BotoCoreError = OSError

__all__ = ["BACKEND_ERRORS", "ENDPOINT_ENV", "Objects"]

ENDPOINT_ENV = "GRAFTBENCH_S3_ENDPOINT"  # an S3-compatible endpoint URL (MinIO, a test server); AWS when unset
BACKEND_ERRORS = (OSError, BotoCoreError)  # what a call on the objects may raise besides FileNotFoundError
_MEMORY_LOCK = threading.Lock()  # memory:// has no exclusive create of its own across threads
MULTIPART_CHUNK_BYTES = 50 << 20  # s3fs uploads an object of 2 chunks or more in parts (the condition is then
# checked when the upload completes; an upload killed before that leaves parts that are never an object)
CONFLICT_RETRIES = 8  # S3 answers 409 ConditionalRequestConflict while another conditional write of the key runs
CONFLICT_WAIT_S = 0.05  # first wait before a retry; doubled each time


def _conflict(exc: OSError) -> bool:
    """Whether ``exc`` is S3's 409 ConditionalRequestConflict (a concurrent conditional write of the same key
    is in flight: retry, and the first writer's object then answers 412)."""
    response = getattr(exc.__cause__, "response", None) or {}
    return response.get("Error", {}).get("Code") == "ConditionalRequestConflict"


class Objects:
    """The objects under one store URL, through fsspec: ranged and whole reads, listing, put-if-absent.

    Raises :class:`StoreError` when the URL's scheme is unknown or its filesystem is not installed (``s3://``
    needs ``pip install 'graftbench[s3]'``). The methods raise ``FileNotFoundError`` for a missing object and
    ``OSError`` (or botocore's ``BotoCoreError``) for other failures.
    """

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        protocol = self.url.split("://", 1)[0].lower()
        options: dict = {}
        self.s3 = protocol in ("s3", "s3a")
        if self.s3:
            options = {"use_listings_cache": False}
            if os.environ.get(ENDPOINT_ENV):
                options["client_kwargs"] = {"endpoint_url": os.environ[ENDPOINT_ENV]}
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **options)
        except ImportError as exc:
            raise StoreError(f"the store {self.url} needs fsspec's {protocol}:// filesystem, which is not installed "
                             f"(for s3://: pip install 'graftbench[s3]'): {exc}") from exc
        except ValueError as exc:
            raise StoreError(f"the store {self.url} is not a URL fsspec can open ({exc})") from exc
        self.root = root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)
        self.memory = protocol == "memory"

    def key(self, name: str) -> str:
        """The filesystem path of the object ``name`` (relative to the store URL)."""
        return f"{self.root}/{name}"

    def get(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of the object ``name`` (all of it by default)."""
        return self.fs.cat_file(self.key(name), start=start, end=end)

    def exists(self, name: str) -> bool:
        """Whether the object ``name`` exists."""
        return self.fs.exists(self.key(name))

    def list(self, folder: str) -> dict[str, int]:
        """``{name: size in bytes}`` of the objects directly under ``folder``; ``{}`` when there are none."""
        try:
            entries = self.fs.ls(self.key(folder), detail=True)
        except FileNotFoundError:
            return {}
        return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
                for entry in entries if entry.get("type") == "file"}

    def _parts(self) -> dict:
        return {"chunksize": MULTIPART_CHUNK_BYTES} if self.s3 else {}

    def put(self, name: str, data: bytes) -> None:
        """Write the object ``name`` whole, replacing any (atomic for readers: S3 PUT, rename for ``file://``)."""
        if self.local:
            write_file_atomic(Path(self.key(name)), data)
        else:
            self.fs.pipe_file(self.key(name), data, **self._parts())

    def put_if_absent(self, name: str, data: bytes, crash: str | None = None) -> bool:
        """Create the object ``name`` with ``data`` unless it exists; returns whether this call created it. Never
        leaves a partial object: S3's conditional PUT (``If-None-Match: *``), or, for ``file://``, a complete and
        fsynced temporary file linked into place (``crash`` names a :func:`graftbench.util.durable.crash_point`
        before the link)."""
        if self.local:
            return _link_new(Path(self.key(name)), data, crash)
        attempt = 0
        while True:
            try:
                if self.memory:
                    with _MEMORY_LOCK:
                        self.fs.pipe_file(self.key(name), data, mode="create")
                else:
                    self.fs.pipe_file(self.key(name), data, mode="create", **self._parts())
                return True
            except FileExistsError:
                return False
            except OSError as exc:
                if not _conflict(exc) or attempt >= CONFLICT_RETRIES:
                    raise
            time.sleep(CONFLICT_WAIT_S * 2**attempt)
            attempt += 1


def _link_new(path: Path, data: bytes, crash: str | None) -> bool:
    """Put-if-absent of a local file: write ``data`` to a locked temporary file beside ``path``, fsync it, then
    hard-link it to ``path`` (fails if ``path`` exists, so the first complete file wins) and remove the
    temporary name. Returns whether ``path`` was created. Raises ``OSError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = locked_temp(path.parent)
    try:
        write_all(fd, data)
        os.fsync(fd)
        if crash:
            crash_point(crash)
        try:
            os.link(tmp, path)
            created = True
        except FileExistsError:
            created = False
    finally:
        tmp.unlink(missing_ok=True)
        os.close(fd)
    fsync_dir(path.parent)
    return created
