"""``graftbench replay-programs``: the recorded programs of program-mode manifests re-run in today's sandbox
(:mod:`graftbench.programs.replay`); parses and prints."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional

import typer

from ..util.display_text import console_markup
from .common import console, fail


def _loaded(paths: list[Path]) -> Iterator[tuple[Path, dict, str]]:
    """Each manifest of ``paths`` loaded and sealed-checked as it is reached, with its recorded verifier version."""
    from ..results.manifest import load_manifest, recorded_verifier_version

    for path in paths:
        manifest = load_manifest(path)
        yield path, manifest, recorded_verifier_version(manifest)


def replay_programs(
    manifests: list[Path] = typer.Argument(..., help="program-mode manifests (e.g. manifests/*/*program*.json)"),
    log: Optional[Path] = typer.Option(None, "--log", help="append one JSON line per manifest to this file "
                                       "(make replay-programs: manifests/program-replays.jsonl)"),
) -> None:
    """Re-run the recorded programs of program-mode manifests in today's sandbox, each distinct program once, and
    compare verdicts and stop reasons with the records (no model). Exit 1 when any differs."""
    from ..programs.replay import replay_manifests
    from ..results.manifest import ManifestError

    try:
        records = replay_manifests(_loaded(manifests), log)
    except (ManifestError, ValueError, OSError) as exc:
        fail(str(exc))
    for record in records:
        console.print(f"{console_markup(record['manifest'])}: {record['same_verdict']} of {record['programs']} same "
                      f"verdict, {record['same_stopped']} same stop reason ({record['ran']} run)")
        for difference in record["differences"]:
            console.print(f"  differs: {console_markup(str(difference))}")
        for again in record["starved"]:
            console.print(f"  starved on the wall clock, run again with more wall time: {console_markup(str(again))}")
    if any(record["differences"] for record in records):
        raise typer.Exit(1)
