"""``graftbench route-quality``: the router's retrieval quality on the built-in families, old ranker against new,
without a model (:mod:`graftbench.route_quality`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from .cli_common import EVAL, console, fail


def route_quality(
    library_per_family: int = typer.Option(2, "--library-per-family", min=1, max=200,
                                           help="built-in problems of each family planted in the store (the first N)"),
    held_out_per_family: int = typer.Option(10, "--held-out-per-family", min=1, max=200,
                                            help="built-in problems of each family routed against it (the next N)"),
    min_similarity: float = typer.Option(EVAL.min_similarity, "--min-similarity", min=0.0, max=1.0,
                                         help="the router's confidence gate: difflib ratio of the top candidate (0-1)"),
    seed: int = typer.Option(0, "--seed", min=0, max=2**31 - 1, help="seed of the built-in problem set"),
    out: Path = typer.Option(Path("benchmarks/results"), "--out",
                             help="folder for route-quality.json and route-quality.md"),
) -> None:
    """Route held-out built-in problems against a library of others, with the difflib and the BM25 ranker, and
    count how often the routed example is of the problem's own family (no model)."""
    from .route_quality import measure_route_quality, table_header, table_rows, write_results

    try:
        result = measure_route_quality(library_per_family, held_out_per_family, min_similarity, seed)
    except ValueError as exc:
        fail(str(exc))
    table = Table(title=f"router retrieval quality: library {library_per_family}/family, held out "
                        f"{held_out_per_family}/family, gate {min_similarity}, seed {seed}")
    for i, name in enumerate(table_header(result)):
        table.add_column(name, justify="left" if i == 0 else "right")
    rows = table_rows(result)
    for i, cells in enumerate(rows):
        table.add_row(*cells, end_section=i == len(rows) - 2)
    console.print(table)
    try:
        paths = write_results(result, out)
    except OSError as exc:
        fail(f"cannot write the results to {out}: {exc}")
    console.print("wrote " + ", ".join(str(p) for p in paths))
