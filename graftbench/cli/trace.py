"""``graftbench trace-pair`` and ``graftbench trace-compare``: a per-op trace of one exactness pair written to a file,
and the first op in which two traces (two machines, two pins) differ (:mod:`graftbench.eval.layer_trace`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from ..engine.registry import DEFAULT_ENGINE
from ..settings import DEFAULT_CHUNK_SIZE, DEFAULT_MODEL, ModelOptions
from .common import console, engine_factory, fail, load_problem_set, open_model, require_capability
from .options import ChunkSizeArg, DtypeArg, EngineArg, FlashAttnArg, KvTypeArg, ModelArg
from ..problems.sources import data_file


def trace_pair(
    out: Path = typer.Option(..., "--out", help="write the trace (JSON) to this file"),
    expect: Optional[Path] = typer.Option(None, "--expect", help="trace a pair of this expectation under its pin "
                                          "(engine, model, chunk size, threads, problem set; torch's dtype and "
                                          "--isa, llama.cpp's build and cache options)"),
    pair: int = typer.Option(0, "--pair", min=0, help="the pair's index (0-based, as check-exact numbers them)"),
    model: ModelArg = DEFAULT_MODEL, dtype: DtypeArg = "auto", chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE,
    isa: Optional[str] = typer.Option(None, "--isa", help="torch's instruction-set pin: native, avx2 or portable; "
                                      "with --expect the expectation's [default: native]"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="threads (pinned)"),
    problems: str = typer.Option("../shared/data/aime2024.jsonl", "--problems", "-p",
                                 help="problems with solutions the pairs are built from (without --expect)"),
    engine: EngineArg = DEFAULT_ENGINE, kv_type: KvTypeArg = "f16", flash_attn: FlashAttnArg = None,
) -> None:
    """Trace one check-exact pair: the SHA-256 of every op's output (a torch module's, a llama.cpp ggml op's), of each layer's K and V after the artifact, and of the query's logits."""
    from ..engine.base import LAYER_TRACE
    from ..eval.layer_trace import trace_session_pair, write_trace

    options = ModelOptions(engine=engine, model=model, dtype=dtype, chunk_size=chunk_size, threads=threads, isa=isa,
                           kv_type=kv_type, flash_attn=flash_attn)
    expected, pinned = None, None
    if expect is not None:
        expected, options, pinned = _adopt_expectation(expect, options)
        problems = expected["problem_set"]["source"]
    require_capability(LAYER_TRACE, "trace-pair", options.engine)
    problems = data_file(problems)  # a ../shared/data/ default is also found beside the checkout: any folder works
    problem_list = load_problem_set(problems, None, "id", "problem", "answer", "solution")
    session = open_model(options, architecture_only=True, pinned=pinned)
    try:
        document = trace_session_pair(session, problem_list, pair, expected)
    except ValueError as exc:
        fail(f"{expect or problems}: {exc}")
    write_trace(out, document)
    last = document["steps"][-1]
    console.print(f"{len(document['steps'])} steps of {document['pair']['id']} written to {out}; query logits "
                  f"{last['output_sha256'][:16]}", markup=False, highlight=False)


def _adopt_expectation(expect: Path, given: ModelOptions) -> tuple[dict, ModelOptions, dict]:
    """The expectation at ``expect``, the options that reopen its engine under its pin (an engine that takes
    ``--isa`` adopts the recorded one unless ``--isa`` is given; another adopts what its pin fixes, e.g. a llama.cpp
    build), and the engine option fields its pin records (:meth:`graftbench.engine.base.EngineFactory.replay_options`).
    Fails with one line for an unreadable expectation, an engine this graftbench does not run or a pin it cannot
    adopt."""
    from ..engine.base import EngineOpenError
    from ..engine.pin_terms import engine_of
    from ..engine.registry import engine_names
    from ..results.exact_manifest import load_expectation

    expected = load_expectation(expect)  # a ManifestError names the path
    pin = expected["config"]
    name = engine_of(pin)
    if name not in engine_names():
        fail(f"{expect}: engine {name!r} is not one this graftbench runs")
    factory = engine_factory(name)
    isa = (given.isa or pin.get("isa", "native")) if "isa" in factory.options else None
    try:
        factory.adopt_pin(pin)
    except EngineOpenError as exc:
        fail(f"{expect}: {exc}")
    recorded = factory.replay_options(pin)
    options = replace(given, engine=name, isa=isa, model=recorded.pop("model"), dtype=recorded.pop("dtype", "auto"),
                      chunk_size=recorded.pop("chunk_size"), threads=recorded.pop("threads", None))
    return expected, options, recorded


def trace_compare(
    first: Path = typer.Argument(..., help="a trace written by trace-pair"),
    second: Path = typer.Argument(..., help="another trace of the same pair (another machine or pin)"),
) -> None:
    """Compare two traces of one pair: name the first op whose output bytes differ (exit 1), or say every step is equal."""
    from ..eval.layer_trace import first_difference, read_trace
    from ..util.display_text import visible
    from ..util.isa import describe_cpu

    a, b = read_trace(first), read_trace(second)  # a TraceError names the file
    for label, doc in (("first", a), ("second", b)):
        line = (f"{label}: {doc.get('pair', {}).get('id', '?')} on {describe_cpu(doc.get('environment', {}))}, "
                f"--isa {doc.get('pin', {}).get('isa', '?')}, {len(a['steps'] if label == 'first' else b['steps'])} steps")
        console.print(visible(line), markup=False, highlight=False)  # a trace file's fields are data
    if a.get("pair", {}).get("tokens_sha256") != b.get("pair", {}).get("tokens_sha256"):
        fail("the traces are of other pairs (their token ids' SHA-256 differ)")
    found = first_difference(a, b)
    if found is None:
        console.print(f"equal: all {len(a['steps'])} steps hash the same")
        return
    fail(found.detail, 1)
