"""Run folders: a durable, resumable ``samples.jsonl`` and the run's ``manifest.json``.

Each sample is one JSON line, written with unbuffered writes then ``fsync`` before the next problem starts, so a
run killed at any point loses at most the problem in flight. On reopen, a torn last line (no newline) is cut off,
and problems already recorded are skipped. A write that fails (disk full) is cut back and raised as
:class:`StorageError`, leaving the file as it was.

This module also holds the durable-write helpers shared with the store and manifests, and the fault-injection hook
(:func:`crash_point`) that the crash tests and ``benchmarks/faults.py`` use.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
FAULT_ENV = "GRAFTBENCH_FAULT"


class RunError(ValueError):
    """A run name or run folder that cannot be used; the message names it and what is wrong."""


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
    ``sample-before-append``, ``sample-torn`` (:meth:`RunDir.append`, the latter after writing half the line).
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


def check_run_name(name: str) -> str:
    """Return ``name`` if it is a plain folder name (letters, digits, ``._-``, at most 128 characters).

    Raises :class:`RunError` for names that could leave ``runs/`` (``../x``, ``/abs``, NUL bytes, ``..``).
    """
    if not isinstance(name, str) or not _RUN_NAME.fullmatch(name) or ".." in name:
        raise RunError(f"run name {name!r} is not a plain folder name (letters, digits, '.', '_', '-')")
    return name


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


class RunDir:
    """One run's folder under ``runs_root``: ``samples.jsonl``, ``manifest.json``, ``run.json`` (its settings)."""

    def __init__(self, runs_root: str | Path, name: str):
        self.name = check_run_name(name)
        self.path = Path(runs_root) / self.name
        self.samples_path = self.path / "samples.jsonl"
        self.manifest_path = self.path / "manifest.json"
        self.settings_path = self.path / "run.json"

    def open(self, settings: dict) -> list[dict]:
        """Create the folder or resume it; returns the samples already recorded.

        Raises :class:`RunError` if the folder holds a run with other settings (model, config, problems,
        budget): resuming it would mix incomparable samples.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        if self.settings_path.exists():
            try:
                previous = json.loads(self.settings_path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise RunError(f"{self.settings_path} is not valid JSON ({exc}); delete the run folder or pass "
                               "another --run name") from exc
            changed = sorted(k for k in set(previous) | set(settings) if previous.get(k) != settings.get(k))
            if changed:
                raise RunError(
                    f"run '{self.name}' exists with other settings ({', '.join(changed)}); "
                    "pass another --run name or delete the folder"
                )
        else:
            write_atomic(self.settings_path, json.dumps(settings, indent=1, sort_keys=True))
        return self.read_samples(repair=True)

    def read_samples(self, repair: bool = False) -> list[dict]:
        """Samples recorded so far. With ``repair``, a torn last line is cut off the file."""
        if not self.samples_path.exists():
            return []
        data = self.samples_path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if repair and len(complete) != len(data):
            with open(self.samples_path, "r+b") as handle:
                handle.truncate(len(complete))
                os.fsync(handle.fileno())
        return [self._parse_line(number, line) for number, line in enumerate(complete.split(b"\n"), 1)
                if line.strip()]

    def _parse_line(self, number: int, line: bytes) -> dict:
        try:
            sample = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            sample = exc
        if not isinstance(sample, dict) or not isinstance(sample.get("problem_id"), str):
            raise RunError(f"{self.samples_path}: line {number} is not a sample ({str(sample)[:80]}); the file was "
                           "edited or damaged: delete that line to re-run its problem")
        return sample

    def append(self, sample: dict) -> None:
        """Append one sample durably (unbuffered writes, then fsync). Raises :class:`StorageError` (e.g. disk
        full) naming the file; the failed write is cut back first, so the file stays as it was."""
        line = (json.dumps(sample, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
        crash_point("sample-before-append")
        try:
            fd = os.open(self.samples_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise storage_error(exc, f"{self.samples_path}") from exc
        try:
            size = os.fstat(fd).st_size
            crash_point("sample-torn", lambda: write_all(fd, line[: len(line) // 2]))
            write_all(fd, line)
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, size)
            raise storage_error(exc, f"sample {sample.get('problem_id')!r} to {self.samples_path}") from exc
        finally:
            os.close(fd)
