"""``graftbench route-quality``: the router's retrieval quality on the built-in families, old ranker against new,
without a model (:mod:`graftbench.bench.route_quality`)."""

from __future__ import annotations

import typer
from rich.box import SIMPLE_HEAD
from rich.table import Table

from .common import BENCH_OUT, EVAL, console, fail
from .options import BenchOutArg, MinSimilarityArg


def route_quality(
    library_per_family: int = typer.Option(2, "--library-per-family", min=1, max=200,
                                           help="built-in problems of each family planted in the store (the first N)"),
    held_out_per_family: int = typer.Option(10, "--held-out-per-family", min=1, max=200,
                                            help="built-in problems of each family routed against it (the next N)"),
    min_similarity: MinSimilarityArg = EVAL.min_similarity,
    seed: int = typer.Option(0, "--seed", min=0, max=2**31 - 1, help="seed of the built-in problem set"),
    out: BenchOutArg = BENCH_OUT,
) -> None:
    """Route held-out built-in problems against a library of others, with the difflib and the BM25 ranker, and
    count how often the routed example is of the problem's own family (no model). Writes route-quality.json and
    .md into --out."""
    from ..bench.route_quality import measure_route_quality, table_header, table_rows, write_results
    from ..util.provenance import code_version

    code = code_version()  # the code that starts the measurement is what its result names
    try:
        result = measure_route_quality(library_per_family, held_out_per_family, min_similarity, seed)
    except ValueError as exc:
        fail(str(exc))
    console.print(f"router retrieval quality: library {library_per_family}/family, held out "
                  f"{held_out_per_family}/family, gate {min_similarity}, seed {seed}")
    for table in _ranker_tables(table_header(result), table_rows(result), result["rankers"]):
        console.print(table)
    try:
        paths = write_results(result, out, code=code)
    except OSError as exc:
        fail(f"cannot write the results to {out}: {exc}")
    console.print("wrote " + ", ".join(str(p) for p in paths))


def _ranker_tables(header: list[str], rows: list[list[str]], rankers: list[str]) -> list[Table]:
    """One table per ranker (the first three columns, then that ranker's), so that each fits 80 columns; the
    markdown file holds them side by side."""
    per = (len(header) - 3) // len(rankers)
    tables = []
    for i, ranker in enumerate(rankers):
        keep = [0, 1, 2, *range(3 + i * per, 3 + (i + 1) * per)]
        table = Table(title=ranker, box=SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for j in keep:
            table.add_column(header[j].removeprefix(f"{ranker}: "), justify="left" if j == 0 else "right")
        for n, cells in enumerate(rows):
            table.add_row(*[cells[j] for j in keep], end_section=n == len(rows) - 2)
        tables.append(table)
    return tables
