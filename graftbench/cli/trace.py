"""``graftbench trace-pair`` and ``graftbench trace-compare``: a per-op trace of one exactness pair written to a file,
and the first op in which two traces (two machines, two pins) differ (:mod:`graftbench.eval.layer_trace`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..engine.registry import DEFAULT_ENGINE
from ..settings import DEFAULT_CHUNK_SIZE, DEFAULT_MODEL, ModelOptions
from .common import apply_isa, console, fail, load_problem_set, open_model
from .options import ChunkSizeArg, DtypeArg, ModelArg
from ..problems.sources import MissingDataFile, data_file


def trace_pair(
    out: Path = typer.Option(..., "--out", help="write the trace (JSON) to this file"),
    expect: Optional[Path] = typer.Option(None, "--expect", help="trace a pair of this torch expectation under its "
                                          "pin (model, dtype, chunk size, threads, --isa, problem set)"),
    pair: int = typer.Option(0, "--pair", min=0, help="the pair's index (0-based, as check-exact numbers them)"),
    model: ModelArg = DEFAULT_MODEL, dtype: DtypeArg = "auto", chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE,
    isa: Optional[str] = typer.Option(None, "--isa", help="instruction-set pin: native, avx2 or portable; with "
                                      "--expect the expectation's [default: native]"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch intra-op threads (pinned)"),
    problems: str = typer.Option("../shared/data/aime2024.jsonl", "--problems", "-p",
                                 help="problems with solutions the pairs are built from (without --expect)"),
) -> None:
    """Trace one check-exact pair on the torch engine: the SHA-256 of every module's output, of each layer's K and V after the artifact, and of the query's logits."""
    from ..eval.layer_trace import trace_session_pair, write_trace

    expected = None
    if expect is not None:
        from ..results.exact_manifest import load_expectation
        from ..results.manifest import ManifestError

        try:
            expected = load_expectation(expect)
        except ManifestError as exc:  # it names the path
            fail(str(exc))
        pin = expected["config"]
        if pin.get("engine"):
            fail(f"{expect}: trace-pair traces torch expectations; a llama.cpp pin has no per-op trace yet")
        model, dtype, chunk_size, threads = pin["model"], pin["dtype"], pin["chunk_size"], pin["threads"]
        isa, problems = pin.get("isa", "native"), expected["problem_set"]["source"]
    apply_isa(isa)  # before torch is imported
    try:  # a ../shared/data/ default is also found beside the checkout, so it works from any folder
        problems = data_file(problems)
    except MissingDataFile as exc:
        fail(str(exc))
    problem_list = load_problem_set(problems, None, "id", "problem", "answer", "solution")
    session = open_model(ModelOptions(engine=DEFAULT_ENGINE, model=model, dtype=dtype, chunk_size=chunk_size,
                                      threads=threads, isa=isa), architecture_only=True)
    try:
        document = trace_session_pair(session, problem_list, pair, expected)
    except ValueError as exc:
        fail(f"{expect or problems}: {exc}")
    write_trace(out, document)
    last = document["steps"][-1]
    console.print(f"{len(document['steps'])} steps of {document['pair']['id']} written to {out}; query logits "
                  f"{last['output_sha256'][:16]}", markup=False, highlight=False)


def trace_compare(
    first: Path = typer.Argument(..., help="a trace written by trace-pair"),
    second: Path = typer.Argument(..., help="another trace of the same pair (another machine or pin)"),
) -> None:
    """Compare two traces of one pair: name the first op whose output bytes differ (exit 1), or say every step is equal."""
    from ..eval.layer_trace import TraceError, first_difference, read_trace
    from ..util.isa import describe_cpu

    try:
        a, b = read_trace(first), read_trace(second)
    except TraceError as exc:
        fail(str(exc))
    for label, doc in (("first", a), ("second", b)):
        console.print(f"{label}: {doc.get('pair', {}).get('id', '?')} on {describe_cpu(doc.get('environment', {}))}, "
                      f"--isa {doc.get('pin', {}).get('isa', '?')}, {len(a['steps'] if label == 'first' else b['steps'])}"
                      " steps", markup=False, highlight=False)
    if a.get("pair", {}).get("tokens_sha256") != b.get("pair", {}).get("tokens_sha256"):
        fail("the traces are of other pairs (their token ids' SHA-256 differ)")
    found = first_difference(a, b)
    if found is None:
        console.print(f"equal: all {len(a['steps'])} steps hash the same")
        return
    fail(found.detail, 1)
