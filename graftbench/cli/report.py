"""``graftbench report``: compare runs from their manifests (no model, no torch) and write a report folder."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .common import console, fail, name_list
from .options import AllowUnanchoredArg
from ..util.display_text import console_markup


RESAMPLES = 2000  # graftbench.results.metrics.RESAMPLES, kept here so that the CLI starts without importing numpy


class ReportFormat(str, Enum):
    """What ``--format`` writes besides the tables: markdown and plots, or those and lm-eval files."""

    markdown = "markdown"
    lm_eval = "lm-eval"


def report(
    paths: list[Path] = typer.Argument(..., help="run folders (runs/NAME) or run manifests (a manifest.json, or a "
                                       "committed manifest such as manifests/<kind>/*.json) to compare"),
    out: Optional[Path] = typer.Option(None, "--out", help="folder to write report.md, summary.json and the plots "
                                       "into [default: reports/<--name>, or reports/<UTC timestamp>]"),
    name: Optional[str] = typer.Option(None, "--name", help="report name: the folder under reports/ when --out is "
                                       "not given"),
    rounds: bool = typer.Option(False, "--rounds", help="the runs, in the order given, are successive flywheel "
                                "rounds (otherwise a manifest's settings.round is used when recorded)"),
    output_format: ReportFormat = typer.Option(ReportFormat.markdown, "--format", help="markdown: tables and plots; "
                                               "lm-eval: also each run as lm-evaluation-harness results_*.json and "
                                               "samples_*.jsonl under lm-eval/<run>/"),
    seed: int = typer.Option(0, "--seed", min=0, help="seed of the bootstrap intervals (numpy PCG64)"),
    resamples: int = typer.Option(RESAMPLES, "--resamples", min=100, max=1_000_000,
                                  help="bootstrap resamples over problems"),
    families: Optional[str] = typer.Option(None, "--families", help="families pooled into one more paired "
                                           "comparison, comma-separated (a pre-registered subset); each family's "
                                           "own comparison is always shown"),
    allow_unanchored: AllowUnanchoredArg = False,
) -> None:
    """Compare runs from their manifests: accuracy with 95% intervals, pass@k, maj@N, tokens, energy, copy controls; writes markdown and plots."""
    from ..report.compare import UnanchoredRun, build_report, check_out_dir, default_out_dir
    from ..report.compare import fallback_lines
    from ..results.check import EXIT_UNANCHORED
    from ..report.write import write_report
    from .tables import report_tables

    try:
        built = build_report(paths, seed=seed, resamples=resamples, rounds=rounds,
                             families=tuple(name_list(families)), allow_unanchored=allow_unanchored)
        out_dir = out if out is not None else default_out_dir(name)
        check_out_dir(out_dir)
    except UnanchoredRun as exc:  # exit 3; another ReportError exits 2 (graftbench.cli.errors)
        fail(str(exc), EXIT_UNANCHORED)
    for run in built.runs:
        for what in run.unverified:
            console.print(f"{console_markup(run.label)}: verified, except: {console_markup(what)}")
        for line in fallback_lines(run):
            console.print(console_markup(line))
    for table in report_tables(built):
        console.print(table)
    try:
        written = write_report(built, out_dir, lm_eval=output_format is ReportFormat.lm_eval)
    except OSError as exc:
        fail(f"cannot write the report into '{out_dir}': {exc}")
    console.print(f"report: {console_markup(out_dir / 'report.md')} ({len(written)} files written)")
