"""``graftbench replay-programs``: the recorded programs of program-mode manifests re-run in today's sandbox
(:func:`graftbench.api.replay_programs`); parses and prints."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..util.display_text import console_markup
from .common import console, fail


def _print_record(record: dict) -> None:
    """One manifest's line, then a line for each difference and each starved first run (all shown as text)."""
    console.print(f"{console_markup(record['manifest'])}: {record['same_verdict']} of {record['programs']} same "
                  f"verdict, {record['same_stopped']} same stop reason ({record['ran']} run)")
    for difference in record["differences"]:
        console.print(f"  differs: {console_markup(str(difference))}")
    for again in record["starved"]:
        console.print(f"  starved on the wall clock, run again with more wall time: {console_markup(str(again))}")


def replay_programs(
    manifests: list[Path] = typer.Argument(..., help="program-mode manifests (e.g. manifests/*/*program*.json)"),
    log: Optional[Path] = typer.Option(None, "--log", help="append one JSON line per manifest to this file "
                                       "(make replay-programs: manifests/program-replays.jsonl)"),
) -> None:
    """Re-run the recorded programs of program-mode manifests in today's sandbox, each distinct program once, and
    compare verdicts and stop reasons with the records (no model). Every manifest is checked first; exit 1 when any
    program's verdict or stop reason differs, 2 when a manifest is refused or the log cannot be written."""
    from ..api import replay_programs as replay
    from ..results.manifest import ManifestError

    try:
        records = replay(manifests, log=log, on_record=_print_record)
    except (ManifestError, ValueError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{log}: cannot append to the log: {exc.strerror or exc}")
    if any(record["differences"] for record in records):
        raise typer.Exit(1)
