"""Run folders: a durable, resumable ``samples.jsonl`` and the run's ``manifest.json``.

Each sample is one JSON line, written with unbuffered writes then ``fsync`` before the next problem starts, so a
run killed at any point loses at most the problem in flight. On reopen, a torn last line (no newline) is cut off,
and problems already recorded are skipped. A write that fails (disk full) is cut back and raised as
:class:`graftbench.util.durable.StorageError`, leaving the file as it was.

A run folder is locked while a process evaluates into it (:meth:`RunDir.open` to :meth:`RunDir.close`): an
``flock`` on ``run.lock`` (through ``filelock``), with the holder's pid, host and start time written next to it in
``run.lock.json``. A second process resuming the same run is refused with a :class:`RunError` that names the
holder; the kernel drops the lock when the holder exits or is killed, so a lock left by a dead process never
blocks. Opening a run also removes the ``.tmp-*`` files that writers killed before their rename left in it
(``cleaned``).

Each process that opens a run to append to it with its code version (:meth:`RunDir.open`'s ``code``) first adds a
line to ``appended_by.jsonl``: that code version and how many records the journal held then. Records of a resumed
run may come from earlier processes at other code versions; :attr:`RunDir.earlier_code` lists them, for the
manifest's ``environment.code_resumed_from``. ``samples.jsonl`` itself is never changed by this, so a journal
written before keeps resuming, and an older graftbench ignores the extra file.

A run's files are its own: a ``samples.jsonl``, ``appended_by.jsonl`` or ``run.json`` that is a symlink leaving the
run's folder, a FIFO or a device is refused (:class:`RunError`) before it is read, cut or appended to
(:meth:`RunDir.check_own_files`), so a run folder prepared by someone else cannot make a resume truncate or write a
file elsewhere.

The durable-write helpers and the fault-injection hook live in :mod:`graftbench.util.durable`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from pathlib import Path

from filelock import FileLock, Timeout

from ..util.durable import append_json_line, clean_temporaries, write_atomic
from ..util.safe_files import UnsafeFileError, regular_file_size
from ..util.strict_json import load_strict, loads_strict

_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LOCK_NAME = "run.lock"
OWNER_NAME = "run.lock.json"  # who holds the lock: pid, host, started
APPENDERS_NAME = "appended_by.jsonl"  # one line per process that opened the run to append: its code, records before
# The code version of journal records appended by a process that recorded none (before appended_by.jsonl existed).
UNRECORDED_CODE = {"version": None, "commit": None, "dirty": None,
                   "reason": "appended before run folders recorded the code version of each process appending"}


class RunError(ValueError):
    """A run name or run folder that cannot be used; the message names it and what is wrong."""


# The key of run.json that records the run's pin beside its fingerprint: never compared itself (a run.json written
# before it was recorded has none), it names the fields of a fingerprint that differs.
PIN_RECORD = "config"


def _pin_change(previous: dict, settings: dict) -> str:
    """``config_fingerprint`` with the pin fields that differ between the recorded run and this one, where both
    record their pin: ``config_fingerprint: threads 2 (this run 1)``."""
    old, new = previous.get(PIN_RECORD), settings.get(PIN_RECORD)
    if not isinstance(old, dict) or not isinstance(new, dict):
        return "config_fingerprint"
    fields = sorted(k for k in set(old) | set(new) if k != "model" and old.get(k) != new.get(k))
    shown = lambda value: str(value)[:40]  # noqa: E731
    return "config_fingerprint: " + (", ".join(f"{k} {shown(old.get(k))} (this run {shown(new.get(k))})"
                                             for k in fields) or "the pin")


def check_run_name(name: str) -> str:
    """Return ``name`` if it is a plain folder name (letters, digits, ``._-``, at most 128 characters).

    Raises :class:`RunError` for names that could leave ``runs/`` (``../x``, ``/abs``, NUL bytes, ``..``).
    """
    if not isinstance(name, str) or not _RUN_NAME.fullmatch(name) or ".." in name:
        raise RunError(f"run name {name!r} is not a plain folder name (letters, digits, '.', '_', '-')")
    return name


class RunDir:
    """One run's folder under ``runs_root``: ``samples.jsonl``, ``manifest.json``, ``run.json`` (its settings),
    and while it is open ``run.lock`` with its holder in ``run.lock.json``. Usable as a context manager
    (``with run: run.open(...)`` closes it)."""

    def __init__(self, runs_root: str | Path, name: str, key: str = "problem_id"):
        self.name = check_run_name(name)
        self.key = key  # the field every line of samples.jsonl names its item by
        self.path = Path(runs_root) / self.name
        self.samples_path = self.path / "samples.jsonl"
        self.manifest_path = self.path / "manifest.json"
        self.settings_path = self.path / "run.json"
        self.lock_path = self.path / LOCK_NAME
        self.owner_path = self.path / OWNER_NAME
        self.appenders_path = self.path / APPENDERS_NAME
        self.cleaned: list[Path] = []
        self.earlier_code: list[dict] = []  # code versions of earlier processes whose records the journal holds
        self._lock: FileLock | None = None

    def open(self, settings: dict, code: dict | None = None) -> list[dict]:
        """Create the folder or resume it, holding its lock until :meth:`close` (or this process's exit); returns
        the samples already recorded. Removes the temporary files of killed writers first (``cleaned``).

        ``code``: this process's code version (:func:`graftbench.util.provenance.code_version`, read when its work
        started). When given, the distinct code versions of the earlier processes whose records the journal holds
        become :attr:`earlier_code` (:data:`UNRECORDED_CODE` for records appended by a process that recorded none),
        and this process's line is added to ``appended_by.jsonl``. Raises
        :class:`~graftbench.util.durable.StorageError` when that line cannot be written.

        Raises :class:`RunError` if another process holds the run (the message names its pid, host and start
        time), if the folder holds a run with other settings (model, config, problems, budget): resuming it
        would mix incomparable samples, or if one of its files is not its own (:meth:`check_own_files`). The lock is
        released when it raises.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock()
        try:
            self.check_own_files()
            self.cleaned = clean_temporaries(self.path)
            samples = self._resume(settings)
            if code is not None:
                self.earlier_code = self._add_appender(code, len(samples))
            return samples
        except BaseException:
            self.close()
            raise

    def check_own_files(self) -> None:
        """Raise :class:`RunError` naming the run and the file when ``samples.jsonl``, ``appended_by.jsonl``,
        ``run.json`` or ``manifest.json``, where it exists, is not a regular file inside the run's folder: a symlink
        that leaves it, a FIFO, a device or a folder. Nothing is read, cut or written before this holds (a resume
        cuts a torn last line and appends; a finished run is recognised from its manifest)."""
        for path in (self.settings_path, self.samples_path, self.appenders_path, self.manifest_path):
            if not os.path.lexists(path):
                continue
            try:
                regular_file_size(path, within=self.path, what=f"run '{self.name}':")
            except OSError as exc:  # UnsafeFileError names the run and the file; another (a dangling link) is named
                shown = exc.strerror if isinstance(exc, UnsafeFileError) else \
                    f"run '{self.name}': {path} cannot be read ({exc.strerror or exc})"
                raise RunError(f"{shown}; a run's files are never followed out of its folder: replace it with the "
                               "run's own file, or pass another --run") from None

    def lock(self) -> None:
        """Take the run's lock without waiting (a second call on the same object does nothing) and write who
        holds it; creates the run's folder if needed. Raises :class:`RunError` naming the holder when another
        process (or another open :class:`RunDir` of this run) has it."""
        if self._lock is not None:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.lock_path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise RunError(f"run '{self.name}' is in use by {self.holder()}; wait for it or stop it") from None
        self._lock = lock
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv)[:200]}
        try:
            write_atomic(self.owner_path, json.dumps(owner, sort_keys=True))
        except BaseException:
            self.close()
            raise

    def holder(self) -> str:
        """Who holds the run's lock, as written in ``run.lock.json``: ``pid 1234 on host (started ...)``, or
        ``another process`` when that file cannot be read."""
        try:
            owner = json.loads(self.owner_path.read_text(encoding="utf-8"))
            return f"pid {int(owner['pid'])} on {owner['host']} (started {owner['started']})"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process"

    def close(self) -> None:
        """Release the run's lock (if held) and remove ``run.lock.json``; the folder and its files stay."""
        if self._lock is None:
            return
        lock, self._lock = self._lock, None
        try:
            self.owner_path.unlink(missing_ok=True)
        finally:
            lock.release()

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_resumable(self, settings: dict, partial: bool = False) -> None:
        """Raise :class:`RunError` when the folder records a run (``run.json``) whose settings differ from
        ``settings``, or whose ``run.json`` does not parse; nothing when there is none. With ``partial``, only the
        keys ``settings`` holds are compared: what a command can check before its model loads (the pin's
        fingerprint is then left to :meth:`open`). Reads only; takes no lock."""
        if not self.settings_path.exists():
            return
        try:
            previous = load_strict(self.settings_path)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RunError(f"{self.settings_path} is not valid JSON ({exc}); delete the run folder or pass "
                           "another --run name") from exc
        keys = (set(settings) if partial else set(previous) | set(settings)) - {PIN_RECORD}
        changed = sorted(k for k in keys if previous.get(k) != settings.get(k))
        if changed:
            named = [_pin_change(previous, settings) if k == "config_fingerprint" else k for k in changed]
            raise RunError(f"run '{self.name}' exists with other settings ({', '.join(named)}); "
                           "pass another --run name or delete the folder")

    def _resume(self, settings: dict) -> list[dict]:
        if self.settings_path.exists():
            self.check_resumable(settings)
        else:
            write_atomic(self.settings_path, json.dumps(settings, indent=1, sort_keys=True))
        return self.read_samples(repair=True)

    def _add_appender(self, code: dict, records: int) -> list[dict]:
        """Add this process's line (``code``, ``records`` already in the journal) to ``appended_by.jsonl`` (a torn
        last line cut off first) and return the distinct code versions of the earlier processes that appended the
        journal's first ``records`` records (:func:`contributors`)."""
        entries = []
        if self.appenders_path.exists():
            data = self.appenders_path.read_bytes()
            complete = data[: data.rfind(b"\n") + 1]
            if len(complete) != len(data):
                with open(self.appenders_path, "r+b") as handle:
                    handle.truncate(len(complete))
                    os.fsync(handle.fileno())
            entries = [_appender(line) for line in complete.split(b"\n") if line.strip()]
        append_json_line(self.appenders_path, {"code": code, "records_before": records},
                         f"the code version appending to run '{self.name}'")
        return contributors(entries, records)

    def read_samples(self, repair: bool = False) -> list[dict]:
        """Samples recorded so far. With ``repair``, a torn last line is cut off the file. Raises :class:`RunError`
        when a run file is not the run's own (:meth:`check_own_files`)."""
        if not self.samples_path.exists():
            return []
        self.check_own_files()
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
            sample = loads_strict(line, source=f"{self.samples_path} line {number}")
        except (ValueError, UnicodeDecodeError) as exc:
            sample = exc
        if not isinstance(sample, dict) or not isinstance(sample.get(self.key), str):
            raise RunError(f"{self.samples_path}: line {number} is not a sample ({str(sample)[:80]}); the file was "
                           "edited or damaged: delete that line to re-run its problem")
        return sample

    def append(self, sample: dict) -> None:
        """Append one sample durably (unbuffered writes, then fsync). Raises
        :class:`~graftbench.util.durable.StorageError` (e.g. disk full) naming the file; the failed write is cut back
        first, so the file stays as it was."""
        append_json_line(self.samples_path, sample, f"sample {sample.get(self.key)!r}", crash="sample")


def _appender(line: bytes) -> dict | None:
    """One line of ``appended_by.jsonl`` as ``{"code": dict, "records_before": int}``, or ``None`` when it is not
    one (an edited or damaged line: its records count as appended by code that recorded none)."""
    try:
        entry = loads_strict(line, source=APPENDERS_NAME)
    except (ValueError, UnicodeDecodeError):
        return None
    ok = (isinstance(entry, dict) and isinstance(entry.get("code"), dict)
          and isinstance(entry.get("records_before"), int) and not isinstance(entry["records_before"], bool))
    return entry if ok else None


def contributors(entries: list[dict | None], records: int) -> list[dict]:
    """The distinct code versions (in the order they first appended) of the processes that appended a journal's
    first ``records`` records, from the ``appended_by.jsonl`` lines ``entries`` (in file order; ``None`` for a line
    that could not be read): the process of line *i* appended the records from its ``records_before`` up to the next
    line's (or ``records``). Records that no readable line accounts for count as :data:`UNRECORDED_CODE`: those
    before the first line (appended before the file existed) and, when a line cannot be read, those from the
    readable line before it up to the readable line after it. Empty when ``records`` is 0."""
    found: list[dict] = []
    start, code = 0, UNRECORDED_CODE  # records from ``start`` on were appended by ``code``
    for entry in [*entries, {"code": None, "records_before": records}]:
        end = min(entry["records_before"], records) if entry is not None else start
        if end > start and code not in found:
            found.append(dict(code))  # a copy: a manifest that holds it never shares UNRECORDED_CODE itself
        start, code = max(start, end), (entry["code"] if entry is not None else UNRECORDED_CODE)
    return found
