"""``graftbench view``: write one self-contained HTML page of runs' samples (:mod:`graftbench.report.view`); parses
and prints. No model, no torch."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from .common import console, fail
from ..util.display_text import console_markup


def view(
    paths: list[Path] = typer.Argument(..., help="run folders (runs/NAME: its manifest.json, or only samples.jsonl "
                                       "while the run is unsealed) or run manifests, shown side by side"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help=escape("HTML file to write [default: "
                                       "views/<first run's name>.html]")),
    problems: Optional[str] = typer.Option(None, "--problems", "-p", help=escape(
        "problem set whose texts the page shows (a local file, 'builtin[:A-B]'); manifests hold only each "
        "problem's SHA-256 [default: no problem text]")),
    store: Optional[str] = typer.Option(None, "--store", help="store to read the grafted examples' headers from "
                                        "(read only) [default: none]"),
) -> None:
    """Write one self-contained HTML page of runs side by side (no server, no network): headers, a problem table, each problem's outputs."""
    from ..report.view import write_view
    from .common import load_problem_set

    loaded = load_problem_set(problems, None, "id", "problem", "answer", "solution") if problems else None
    try:
        written, runs = write_view(paths, out, loaded, store)
    except OSError as exc:
        fail(f"cannot write the page: {exc}")
    for run in runs:
        if run.status != "verified":
            what = "; ".join(run.mismatches[:3]) or "; ".join(run.notes[:1])
            console.print(f"[yellow]{console_markup(run.label)}: {run.status}[/yellow]: {console_markup(what)}")
    console.print(f"view: {console_markup(written)}")
