"""Earlier benchmark results are kept, never overwritten: before a run writes ``{stem}.json`` and ``{stem}.md``, the
ones already there move to ``runs/{stem}-{date}.json`` and ``.md``, ``date`` being the earlier run's start time.

The fixed names always hold the latest run (docs/performance.md's plots and the make targets read them); ``runs/`` holds every
run before it, so a figure quoted from an earlier run can still be re-checked from its JSON."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from ..util.durable import write_atomic

RUNS = "runs"


def run_date(json_path: Path) -> str:
    """The start time of the run that wrote ``json_path``, as ``YYYY-MM-DDTHHMMSSZ`` (a file-name-safe ISO 8601):
    its ``environment.date`` when the file holds one, else the file's modification time (UTC)."""
    try:
        date = json.loads(json_path.read_text())["environment"]["date"]
        stamp = datetime.strptime(date, "%Y-%m-%dT%H:%M:%SZ")
    except (OSError, ValueError, KeyError, TypeError):
        stamp = datetime.fromtimestamp(json_path.stat().st_mtime, timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H%M%SZ")


def _free_stem(runs: Path, stem: str) -> str:
    """``stem``, or ``stem-2``, ``stem-3``, ... : the first with neither a ``.json`` nor a ``.md`` in ``runs``."""
    candidate, n = stem, 1
    while (runs / f"{candidate}.json").exists() or (runs / f"{candidate}.md").exists():
        n += 1
        candidate = f"{stem}-{n}"
    return candidate


def keep_earlier(out_dir: Path, stem: str) -> list[Path]:
    """Move an earlier ``{stem}.json`` (and its ``{stem}.md``, if any) from ``out_dir`` into ``out_dir/runs/``, named
    ``{stem}-{date}`` (:func:`run_date`); a name already taken gets ``-2``, ``-3``, ... Returns the moved files' new
    paths (empty when there was no earlier JSON: a lone ``.md`` is left for the new run to replace).

    Raises OSError when ``runs/`` cannot be created or a file cannot be moved; nothing is overwritten either way."""
    json_path = out_dir / f"{stem}.json"
    if not json_path.is_file():
        return []
    runs = out_dir / RUNS
    runs.mkdir(exist_ok=True)
    target = _free_stem(runs, f"{stem}-{run_date(json_path)}")
    moved = []
    for suffix in (".json", ".md"):  # the JSON first: it is the record, the markdown is printed from it
        source = out_dir / f"{stem}{suffix}"
        if source.is_file():
            destination = runs / f"{target}{suffix}"
            os.replace(source, destination)
            moved.append(destination)
    return moved


def write_json_and_markdown(result: dict, text: str, out_dir: Path, stem: str) -> list[Path]:
    """Write ``result`` as ``{stem}.json`` (sorted keys) and ``text`` as ``{stem}.md`` under ``out_dir`` (created if
    needed), each atomically, after moving an earlier run's pair into ``runs/`` (:func:`keep_earlier`); returns the
    two new paths. Raises OSError when a file cannot be moved or written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    keep_earlier(out_dir, stem)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    write_atomic(json_path, json.dumps(result, indent=1, sort_keys=True) + "\n")
    write_atomic(md_path, text)
    return [json_path, md_path]
