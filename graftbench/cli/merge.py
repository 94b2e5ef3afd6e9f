"""``graftbench merge``: shard runs into one run and one manifest (:mod:`graftbench.scale.merge`); parses and prints."""

from __future__ import annotations

import typer
from rich.box import SIMPLE_HEAD
from rich.table import Table

from ..settings import DEFAULT_RUNS_DIR
from .common import console, fail
from ..util.display_text import console_markup, console_text
from .options import RunsDirArg


def merge(
    shards: list[str] = typer.Argument(..., help="the shard runs: run names under --runs-dir, run folders or "
                                                 "manifest files (each of 0/N … N-1/N once)"),
    out: str = typer.Option(..., "--out", help="name of the merged run (a new folder under --runs-dir)"),
    runs_dir: RunsDirArg = DEFAULT_RUNS_DIR,
) -> None:
    """Merge the shards of one run (--shard i/N) into one run whose manifest equals a single-process run's."""
    from ..scale.merge import MergeError, merge_runs
    from ..results.runs import RunError

    try:
        result = merge_runs(shards, out, runs_dir)
    except (MergeError, RunError, OSError) as exc:
        fail(str(exc))
    table = Table(title=console_text(f"merged into {result.run.path}"), box=SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)  # fits 80 columns
    for name in ("shard", "run", "problems", "samples", "correct", "manifest"):
        table.add_column(name, justify="right" if name in ("problems", "samples", "correct") else "left",
                         overflow="fold", no_wrap=name == "manifest")
    for shard in result.shards:
        m = shard.manifest
        table.add_row(str(shard.shard), console_text(shard.name), str(len(m["problems"])), str(len(m["samples"])),
                      str(sum(bool(s.get("correct")) for s in m["samples"])), console_text(m["manifest_sha256"][:16]))
    merged = result.manifest
    table.add_row("all", console_text(out), str(len(merged["problems"])), str(len(merged["samples"])),
                  str(sum(bool(s.get("correct")) for s in merged["samples"])), merged["manifest_sha256"][:16],
                  style="bold")
    console.print(table)
    console.print(f"manifest: {console_markup(result.run.manifest_path)} (verified)")
