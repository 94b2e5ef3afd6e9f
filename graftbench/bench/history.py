"""Earlier benchmark results are kept, never overwritten: before a run writes ``{stem}.json`` and ``{stem}.md``, the
ones already there move to ``runs/{stem}-{date}.json`` and ``.md``, ``date`` being the earlier run's start time.

The fixed names always hold the latest run (docs/performance.md's plots and the make targets read them); ``runs/`` holds every
run before it, so a figure quoted from an earlier run can still be re-checked from its JSON. Every JSON written here
carries its ``provenance`` (date, code version, machine: :func:`graftbench.util.provenance.provenance`) and its
markdown a line naming them under the title; files written before that hold none, and readers take both."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from ..util.durable import write_atomic
from ..util.provenance import provenance, provenance_line

RUNS = "runs"


def _recorded_date(json_path: Path) -> datetime:
    """The start time a benchmark JSON records: its ``environment.date`` (the run's start), else its
    ``provenance.created_utc`` (when it was written). Raises OSError, ValueError, KeyError or TypeError when the
    file holds neither in ``%Y-%m-%dT%H:%M:%SZ`` form."""
    document = json.loads(json_path.read_text())
    environment, block = document.get("environment"), document.get("provenance")
    date = environment.get("date") if isinstance(environment, dict) else None
    if date is None and isinstance(block, dict):
        date = block.get("created_utc")
    return datetime.strptime(date, "%Y-%m-%dT%H:%M:%SZ")


def run_date(json_path: Path) -> str:
    """The start time of the run that wrote ``json_path``, as ``YYYY-MM-DDTHHMMSSZ`` (a file-name-safe ISO 8601):
    its ``environment.date`` when the file holds one, else its ``provenance.created_utc``, else the file's
    modification time (UTC)."""
    try:
        stamp = _recorded_date(json_path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
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


def result_gpu(result: dict) -> str | None:
    """The GPU a benchmark result was measured on, as its environment's CUDA pin names it
    (``environment.accelerator.gpu``); ``None`` for a CPU result."""
    environment = result.get("environment")
    accelerator = environment.get("accelerator") if isinstance(environment, dict) else None
    gpu = accelerator.get("gpu") if isinstance(accelerator, dict) else None
    return gpu if isinstance(gpu, str) and gpu else None


def with_provenance_line(text: str, block: dict) -> str:
    """``text`` (a benchmark's markdown) with :func:`graftbench.util.provenance.provenance_line` of ``block`` as
    its own paragraph under the title (the first line, when it is a ``# `` heading), else at the top."""
    line = provenance_line(block)
    title, _, rest = text.partition("\n")
    if not title.startswith("# "):
        return f"{line}\n\n{text}"
    rest = rest.lstrip("\n")
    return f"{title}\n\n{line}\n" + (f"\n{rest}" if rest else "")


def write_json_and_markdown(result: dict, text: str, out_dir: Path, stem: str,
                            code: dict | None = None) -> list[Path]:
    """Write ``result`` as ``{stem}.json`` (sorted keys) and ``text`` as ``{stem}.md`` under ``out_dir`` (created if
    needed), each atomically, after moving an earlier run's pair into ``runs/`` (:func:`keep_earlier`); returns the
    two new paths. The JSON gains ``provenance`` (:func:`graftbench.util.provenance.provenance`: now, the code
    version ``code`` read when the benchmark started (``None`` reads it now), this machine and the GPU of
    :func:`result_gpu`; ``result`` itself is not changed) and the markdown its line under the title
    (:func:`with_provenance_line`). Raises OSError when a file cannot be moved or written."""
    block = provenance(gpu=result_gpu(result), code=code)
    out_dir.mkdir(parents=True, exist_ok=True)
    keep_earlier(out_dir, stem)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    write_atomic(json_path, json.dumps({**result, "provenance": block}, indent=1, sort_keys=True) + "\n")
    write_atomic(md_path, with_provenance_line(text, block))
    return [json_path, md_path]
