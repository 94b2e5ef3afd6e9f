"""Durable writes: atomic file replacement, unbuffered appends, fsync, and the errors and fault hook they share.

Artifacts, manifests, run settings and samples are written through here, so a write either lands whole or
leaves the old file as it was, and a failed write (disk full) surfaces as one
:class:`StorageError` naming the file. :func:`crash_point` is the fault-injection hook that the crash tests and
``graftbench.faults`` (``benchmarks/faults.py``) use to kill a writer at a named point.

A writer killed before its rename leaves a ``.tmp-*`` file. The writer holds an exclusive ``flock`` on its
temporary file from creation to rename (the kernel drops it when the process dies), so
:func:`clean_temporaries` removes exactly the temporary files whose lock it can take without waiting: those of
dead writers, never one that a live process is still writing.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

FAULT_ENV = "GRAFTBENCH_FAULT"
TEMP_PREFIX = ".tmp-"  # the name every temporary file of an atomic write starts with
_UMASK = os.umask(0o022)
os.umask(_UMASK)
FILE_MODE = 0o644 & ~_UMASK  # every file written here: what open() gives a new file under the process's umask


class StorageError(OSError):
    """A write that failed (disk full, quota, read-only): the message names the file and says that nothing was
    kept. ``errno`` is the underlying one (``ENOSPC`` for a full disk)."""


def storage_error(exc: BaseException, what: str) -> StorageError:
    """A :class:`StorageError` for a failed write of ``what``, keeping ``exc``'s errno (``EIO`` where it has none)."""
    code = getattr(exc, "errno", None) or errno.EIO
    reason = getattr(exc, "strerror", None) or str(exc) or os.strerror(code)
    advice = "free some space and run again" if code in (errno.ENOSPC, errno.EDQUOT) else "fix that and run again"
    return StorageError(code, f"cannot write {what}: {reason}; this write was undone (what was written before it "
                              f"is kept), {advice}")


def crash_point(name: str, before_kill: Callable[[], None] | None = None) -> None:
    """Fault-injection hook: when the environment variable ``GRAFTBENCH_FAULT`` equals ``name``, run
    ``before_kill`` (if any) and kill this process with SIGKILL. Does nothing otherwise.

    Points: ``deposit-before-rename``, ``deposit-before-index`` (:meth:`graftbench.store.folder.Store.put`),
    ``sample-before-append``, ``sample-torn`` (:meth:`graftbench.results.runs.RunDir.append`, the latter after writing
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
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
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


def blocking_file(path: str | Path) -> Path | None:
    """The nearest of ``path`` and its parents that exists, when it is not a folder: what keeps anything from being
    created at ``path``. ``None`` when that nearest one is a folder."""
    for folder in (Path(path), *Path(path).parents):
        if folder.exists():
            return None if folder.is_dir() else folder
    return None


def locked_temp(folder: Path, suffix: str = "") -> tuple[int, Path]:
    """Create a temporary file ``.tmp-*<suffix>`` in ``folder`` and return ``(fd, path)`` with an exclusive
    ``flock`` held on it, which marks it as being written: :func:`clean_temporaries` leaves it alone until the
    descriptor is closed (or the process dies). The caller closes ``fd``. Its mode is :data:`FILE_MODE`, as for
    an appended file, not ``mkstemp``'s 0600.

    Raises ``OSError`` when the file cannot be created.
    """
    for _ in range(64):
        fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=suffix, dir=folder)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            mine = os.fstat(fd)
            now = os.stat(name, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
                os.fchmod(fd, FILE_MODE)
                return fd, Path(name)
        except FileNotFoundError:
            pass  # a cleaner removed it between its creation and our lock: take another name
        except BaseException:
            os.close(fd)
            Path(name).unlink(missing_ok=True)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, f"could not create a temporary file in {folder}")


def clean_temporaries(folder: Path, follow: bool = True) -> list[Path]:
    """Remove the ``.tmp-*`` files in ``folder`` (not below it) that writers killed before their rename left:
    only those whose ``flock`` can be taken without waiting, so a file that a live process is still writing
    (:func:`locked_temp`) is never removed. Returns the paths removed, sorted; a folder that does not exist
    gives ``[]``. Files that cannot be opened or removed are left as they are.

    Every name is opened, checked and removed relative to the folder's own descriptor, and a ``.tmp-*`` name that
    is a symlink is never followed. With ``follow=False`` a ``folder`` that is itself a symlink gives ``[]``:
    nothing outside the folder named is ever removed (a store's symlinked ``artifacts/`` is left alone).
    """
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except OSError:  # missing, not a folder, or (follow=False) a symlink
        return []
    try:
        names = sorted(entry.name for entry in os.scandir(dir_fd) if entry.name.startswith(TEMP_PREFIX))
        return [Path(folder) / name for name in names if _remove_unlocked(dir_fd, name)]
    finally:
        os.close(dir_fd)


def _remove_unlocked(dir_fd: int, name: str) -> bool:
    """Remove the regular file ``name`` under ``dir_fd`` if no live writer holds its ``flock``; whether it was."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        held = os.fstat(fd)
        if not stat.S_ISREG(held.st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live writer holds it
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            return False
        os.unlink(name, dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def write_file_atomic(path: Path, data: bytes, what: str | None = None, crash: str | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, fsync and rename: readers see the
    old file or the new one, never half. ``what`` names the file in errors; ``crash`` names a
    :func:`crash_point` between the fsync and the rename. The temporary file is locked while it is written
    (:func:`locked_temp`), so a cleaner never removes it; one left by a kill is removed by
    :func:`clean_temporaries`.

    Raises :class:`StorageError` (e.g. disk full): the old file is untouched and no temporary file is left.
    """
    what = what or str(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = locked_temp(path.parent)
    except OSError as exc:
        raise storage_error(exc, what) from exc
    try:
        write_all(fd, data)
        os.fsync(fd)
        if crash:
            crash_point(crash)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise storage_error(exc, what) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)  # drops the lock, after the rename
    fsync_dir(path.parent)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`write_file_atomic`)."""
    write_file_atomic(path, text.encode("utf-8"))
