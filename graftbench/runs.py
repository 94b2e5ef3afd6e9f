"""Run folders: a durable, resumable ``samples.jsonl`` and the run's ``manifest.json``.

Each sample is one JSON line, written with a single ``write`` then ``fsync`` before the next problem starts, so a
run killed at any point loses at most the problem in flight. On reopen, a torn last line (no newline) is cut off,
and problems already recorded are skipped.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class RunError(ValueError):
    """A run name or run folder that cannot be used; the message names it and what is wrong."""


def check_run_name(name: str) -> str:
    """Return ``name`` if it is a plain folder name (letters, digits, ``._-``, at most 128 characters).

    Raises :class:`RunError` for names that could leave ``runs/`` (``../x``, ``/abs``, NUL bytes, ``..``).
    """
    if not _RUN_NAME.match(name or "") or ".." in name:
        raise RunError(f"run name {name!r} is not a plain folder name (letters, digits, '.', '_', '-')")
    return name


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, fsync and rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
            previous = json.loads(self.settings_path.read_text(encoding="utf-8"))
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
        return [json.loads(line) for line in complete.decode("utf-8").splitlines() if line.strip()]

    def append(self, sample: dict) -> None:
        """Append one sample durably (one write, then fsync). Raises ``OSError`` (e.g. disk full); a failed write
        is cut back so the file stays as it was."""
        line = (json.dumps(sample, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
        with open(self.samples_path, "ab") as handle:
            size = handle.tell()
            try:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
            except OSError:
                handle.truncate(size)
                raise
