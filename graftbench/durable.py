"""Durable writes: atomic file replacement, unbuffered appends, fsync, and the errors and fault hook they share.

Artifacts, manifests, run settings and samples are written through here, so a write either lands whole or
leaves the old file as it was, and a failed write (disk full) surfaces as one
:class:`StorageError` naming the file. :func:`crash_point` is the fault-injection hook that the crash tests and
``graftbench.faults`` (``benchmarks/faults.py``) use to kill a writer at a named point.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

FAULT_ENV = "GRAFTBENCH_FAULT"


class StorageError(OSError):
    """A write that failed (disk full, quota, read-only): the message names the file and says that nothing was
    kept. ``errno`` is the underlying one (``ENOSPC`` for a full disk)."""


def storage_error(exc: BaseException, what: str) -> StorageError:
    """A :class:`StorageError` for a failed write of ``what``, keeping ``exc``'s errno (``EIO`` where it has none)."""
    code = getattr(exc, "errno", None) or errno.EIO
    reason = getattr(exc, "strerror", None) or str(exc) or os.strerror(code)
    advice = "free some space and run again" if code in (errno.ENOSPC, errno.EDQUOT) else "fix that and run again"
    return StorageError(code, f"cannot write {what}: {reason}; nothing was kept, {advice}")


def crash_point(name: str, before_kill: Callable[[], None] | None = None) -> None:
    """Fault-injection hook: when the environment variable ``GRAFTBENCH_FAULT`` equals ``name``, run
    ``before_kill`` (if any) and kill this process with SIGKILL. Does nothing otherwise.

    Points: ``deposit-before-rename``, ``deposit-before-index`` (:meth:`graftbench.store.Store.put`),
    ``sample-before-append``, ``sample-torn`` (:meth:`graftbench.runs.RunDir.append`, the latter after writing
    half the line).
    """
    if os.environ.get(FAULT_ENV) != name:
        return
    if before_kill is not None:
        before_kill()
    os.kill(os.getpid(), signal.SIGKILL)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to the file descriptor ``fd`` with unbuffered ``os.write`` calls (no buffer is left
    to flush later, so a failure surfaces here and can be cut back)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def append_json_line(path: Path, record: dict, what: str, crash: str | None = None) -> None:
    """Append ``record`` to ``path`` as one JSON line (sorted keys, UTF-8), durably: unbuffered writes, then fsync.

    A write that fails (e.g. disk full) is cut back first, so the file stays as it was, and raised as
    :class:`StorageError` naming ``what``; a file that cannot be opened is named by its path. With ``crash``, the
    fault-injection points ``<crash>-before-append`` and ``<crash>-torn`` (after half the line) are offered.
    """
    line = (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    if crash:
        crash_point(f"{crash}-before-append")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise storage_error(exc, f"{path}") from exc
    try:
        size = os.fstat(fd).st_size
        if crash:
            crash_point(f"{crash}-torn", lambda: write_all(fd, line[: len(line) // 2]))
        write_all(fd, line)
        os.fsync(fd)
    except OSError as exc:
        os.ftruncate(fd, size)
        raise storage_error(exc, f"{what} to {path}") from exc
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """fsync a directory so that a rename into it survives a power loss (best effort where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file_atomic(path: Path, data: bytes, what: str | None = None, crash: str | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, fsync and rename: readers see the
    old file or the new one, never half. ``what`` names the file in errors; ``crash`` names a
    :func:`crash_point` between the fsync and the rename.

    Raises :class:`StorageError` (e.g. disk full): the old file is untouched and no temporary file is left.
    """
    what = what or str(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    except OSError as exc:
        raise storage_error(exc, what) from exc
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if crash:
            crash_point(crash)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise storage_error(exc, what) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`write_file_atomic`)."""
    write_file_atomic(path, text.encode("utf-8"))
