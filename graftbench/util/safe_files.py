"""Bounded reads of files whose path comes from a user or from another file: the one place that opens them.

Invariants of every function here:

- only a regular file is opened: a FIFO, a device (``/dev/zero``), a socket or a folder is refused from its
  ``stat`` before any ``open`` (opening a FIFO blocks until a writer comes, a device may act on being opened), and
  the opened file is checked again with ``fstat`` (it cannot have been swapped for something else);
- with ``within``, a path whose real location (every symlink followed) is not inside the real ``within`` folder is
  refused: a symlink that leaves a store is never followed;
- a file larger than ``max_bytes`` is refused from its size before a byte is read, and no more than
  ``max_bytes`` are ever read (a file that grows while read is refused too), so memory stays bounded;
- hashing streams in 1 MiB blocks.

Errors are :class:`UnsafeFileError` (an ``OSError``) whose message names the file and what is wrong with it;
``FileNotFoundError`` and ``IsADirectoryError`` are raised as such, with the path. Imports only the standard library.
"""

from __future__ import annotations

import errno
import hashlib
import os
import queue
import stat
import threading
from pathlib import Path

MiB = 1 << 20
GiB = 1 << 30
MAX_JSON_BYTES = 256 * MiB  # a manifest, an exactness expectation, a replay log, a run's settings
MAX_ARTIFACT_BYTES = 4 * GiB  # one artifact file (a KV cache of 8,192 tokens of a 1.5B model is under 0.5 GiB)
_BLOCK = MiB
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class UnsafeFileError(OSError):
    """A file that is refused before it is read: not a regular file, a symlink leaving its folder, or larger than
    its size cap. The message (``str()``) names the file."""

    def __str__(self) -> str:
        return str(self.strerror)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_within(path: str | Path, within: str | Path | None, what: str) -> None:
    """Raise :class:`UnsafeFileError` naming ``what`` and ``path`` when the real location of ``path`` (every
    symlink followed) is not inside the real ``within`` folder; nothing when ``within`` is ``None``."""
    if within is None:
        return
    real, root = os.path.realpath(path), os.path.realpath(within)
    if os.path.commonpath([real, root]) != root:
        raise UnsafeFileError(errno.EACCES, f"{what} {path} is refused: it resolves to {real}, outside {within} "
                              "(a symlink leaving it)")


def _check_stat(path: Path, status: os.stat_result, max_bytes: int | None, what: str) -> None:
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, f"{what} {path} is a directory, not a file", str(path))
    if not stat.S_ISREG(status.st_mode):
        raise UnsafeFileError(errno.EINVAL, f"{what} {path} is refused: it is {_kind(status.st_mode)}, "
                              "not a regular file")
    if max_bytes is not None and status.st_size > max_bytes:
        raise UnsafeFileError(errno.EFBIG, f"{what} {path} is refused: it is {status.st_size:,} bytes, more than "
                              f"the {max_bytes:,} bytes read at most")


def regular_file_size(path: str | Path, *, max_bytes: int | None = None, within: str | Path | None = None,
                      what: str = "file") -> int:
    """The size in bytes of the regular file at ``path`` (symlinks followed), checked as :func:`open_regular`
    checks it, without opening it. Raises ``FileNotFoundError``, ``IsADirectoryError`` or
    :class:`UnsafeFileError` (naming ``what`` and the path)."""
    path = Path(path)
    check_within(path, within, what)
    status = os.stat(path)
    _check_stat(path, status, max_bytes, what)
    return status.st_size


def open_regular(path: str | Path, *, max_bytes: int | None = None, within: str | Path | None = None,
                 what: str = "file"):
    """Open the regular file at ``path`` for reading in binary (an unbuffered file object; the caller closes it),
    after the checks of the module's docstring. Raises ``FileNotFoundError``, ``IsADirectoryError``,
    :class:`UnsafeFileError` (naming ``what`` and the path), or another ``OSError`` when it cannot be opened."""
    path = Path(path)
    regular_file_size(path, max_bytes=max_bytes, within=within, what=what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # O_NONBLOCK: a FIFO swapped in cannot block
    try:
        _check_stat(path, os.fstat(fd), max_bytes, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _blocks(handle, max_bytes: int | None, path: Path, what: str):
    total = 0
    while block := handle.read(_BLOCK):
        total += len(block)
        if max_bytes is not None and total > max_bytes:
            raise UnsafeFileError(errno.EFBIG, f"{what} {path} is refused: it grew past the {max_bytes:,} bytes "
                                  "read at most while it was read")
        yield block


def read_regular(path: str | Path, *, max_bytes: int, within: str | Path | None = None, what: str = "file") -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` of them (checked as :func:`open_regular`).
    Raises as :func:`open_regular`, and :class:`UnsafeFileError` when the file grows past ``max_bytes``."""
    path = Path(path)
    with open_regular(path, max_bytes=max_bytes, within=within, what=what) as handle:
        return b"".join(_blocks(handle, max_bytes, path, what))


# Block size (bytes) of a read handed to ``on_block``: each block is handed to a second thread as soon as it is
# read, which runs ``on_block`` on it while the next block is read (python-xxhash and ``readinto`` both release the
# GIL), so a streaming hash costs about the longer of the two, not their sum. Measured on the 2-core Intel Xeon, a
# 188 MiB file from the page cache: read alone 30 ms; read then XXH3-128 of each 512 KiB block on the same thread
# 40 ms; handed to the second thread in blocks of 512 KiB 35 ms, 2 MiB 34 ms, 8 MiB 32 ms, 16 MiB 32 ms.
READ_BLOCK_BYTES = 8 << 20


class _BlockPipe:
    """A thread that calls ``on_block`` on each view handed to it, in order, beside the thread that reads.

    ``hand(view)`` queues a view (the caller never writes into it again); ``close()`` waits until every view
    handed is done and re-raises the first exception ``on_block`` raised (after which no later view is passed to
    it, and ``failed`` is true)."""

    _DONE = object()

    def __init__(self, on_block):
        self._on_block, self._queue, self._error = on_block, queue.SimpleQueue(), None
        self._thread = threading.Thread(target=self._run, name="graftbench-read-block", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (view := self._queue.get()) is not self._DONE:
            if self._error is None:
                try:
                    self._on_block(view)
                except BaseException as exc:  # noqa: BLE001 - re-raised on the reading thread by close()
                    self._error = exc

    @property
    def failed(self) -> bool:
        """Whether ``on_block`` has raised (the reader may stop reading)."""
        return self._error is not None

    def hand(self, view: memoryview) -> None:
        self._queue.put(view)

    def close(self, reraise: bool = True) -> None:
        """Wait for every view handed; then re-raise ``on_block``'s exception when ``reraise``."""
        self._queue.put(self._DONE)
        self._thread.join()
        if reraise and self._error is not None:
            raise self._error


def read_regular_into(path: str | Path, buffer: bytearray, *, max_bytes: int, within: str | Path | None = None,
                      what: str = "file", on_block=None) -> memoryview:
    """Read the regular file at ``path`` (checked as :func:`open_regular`) into ``buffer``, grown when the file is
    larger, so a caller that keeps its buffer reads without allocating; returns a view of the bytes read. With
    ``on_block`` the file is read in blocks of :data:`READ_BLOCK_BYTES`, and ``on_block(view)`` gets each block
    read, in order, on a second thread while the next block is read (a streaming hash beside the read); every
    call has returned when this function returns or raises. Raises as :func:`open_regular`,
    :class:`UnsafeFileError` when the file grows past its size or ``max_bytes`` while it is read, and what
    ``on_block`` raised."""
    path = Path(path)
    with open_regular(path, max_bytes=max_bytes, within=within, what=what) as handle:
        size = os.fstat(handle.fileno()).st_size
        if len(buffer) < size:
            try:
                buffer.extend(bytes(size - len(buffer)))
            except BufferError:  # a view of it is still held: read into a new one
                buffer = bytearray(size)
        view = memoryview(buffer)[:size]
        pipe = _BlockPipe(on_block) if on_block is not None else None
        try:
            done, block = 0, READ_BLOCK_BYTES if pipe is not None else size
            while done < size and (n := handle.readinto(view[done:done + block])):
                if pipe is not None:
                    if pipe.failed:
                        break  # close() raises the handler's error
                    pipe.hand(view[done:done + n])
                done += n
            grew = done != size or handle.read(1)
        except BaseException:
            if pipe is not None:
                pipe.close(reraise=False)  # the read's own error is the one raised
            raise
        if pipe is not None:
            pipe.close()
        if grew:
            raise UnsafeFileError(errno.EFBIG, f"{what} {path} is refused: it changed size while it was read")
    return view


def sha256_regular(path: str | Path, *, max_bytes: int | None = None, within: str | Path | None = None,
                   what: str = "file") -> str:
    """SHA-256 hex digest of the regular file at ``path``, streamed in 1 MiB blocks (checked as
    :func:`open_regular`). Raises as :func:`read_regular`."""
    path = Path(path)
    digest = hashlib.sha256()
    with open_regular(path, max_bytes=max_bytes, within=within, what=what) as handle:
        for block in _blocks(handle, max_bytes, path, what):
            digest.update(block)
    return digest.hexdigest()
