"""``graftbench trace-pair`` and ``graftbench trace-compare``: a per-op trace of one exactness pair written to a file,
and the first op in which two traces (two machines, two pins) differ (:mod:`graftbench.eval.layer_trace`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..engine.registry import DEFAULT_ENGINE
from ..settings import DEFAULT_CHUNK_SIZE, DEFAULT_MODEL, ModelOptions
from .common import console, fail, load_problem_set, open_model, require_capability
from .invocation import given_options
from .options import ChunkSizeArg, DtypeArg, EngineArg, ExpectArg, FlashAttnArg, IsaArg, KvTypeArg, ModelArg, ThreadsArg
from ..problems.sources import data_file


def trace_pair(
    out: Path = typer.Option(..., "--out", help="write the trace (JSON) to this file"),
    expect: ExpectArg = None,
    pair: int = typer.Option(0, "--pair", min=0, help="the pair's index (0-based, as check-exact numbers them)"),
    model: ModelArg = DEFAULT_MODEL, dtype: DtypeArg = "auto", chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE,
    isa: IsaArg = None, threads: ThreadsArg = None,
    problems: str = typer.Option("../shared/data/aime2024.jsonl", "--problems", "-p",
                                 help="problems with solutions the pairs are built from (with --expect: the "
                                 "recorded set is found by name; give this for one recorded from a file of your own)"),
    engine: EngineArg = DEFAULT_ENGINE, kv_type: KvTypeArg = "f16", flash_attn: FlashAttnArg = None,
) -> None:
    """Trace one check-exact pair: the SHA-256 of every op's output (a torch module's, a llama.cpp ggml op's), of each layer's K and V after the artifact, and of the query's logits."""
    from ..engine.base import LAYER_TRACE
    from ..eval.expectation_pin import adopt_expectation, expectation_problems
    from ..eval.layer_trace import trace_session_pair, write_trace
    from ..util.display_text import visible
    from ..util.provenance import code_version

    code = code_version()  # the code that starts the trace is what its provenance names
    options = ModelOptions(engine=engine, model=model, dtype=dtype, chunk_size=chunk_size, threads=threads, isa=isa,
                           kv_type=kv_type, flash_attn=flash_attn)
    expected, pinned = None, None
    if expect is not None:  # its pin adopted (the --isa pin applied before torch is imported)
        named_model = model if "model" in given_options() else None  # else the recorded one, when it is a name
        adopted = adopt_expectation(expect, options, named_model=named_model)
        expected, options, pinned = adopted.expected, adopted.options, adopted.recorded
    require_capability(LAYER_TRACE, "trace-pair", options.engine)
    if expected is not None:  # the problems --problems names, else the expectation's own, found by name
        named = data_file(problems) if "problems" in given_options() else None
        problem_list = expectation_problems(expect, expected, named)
    else:
        problems = data_file(problems)  # a ../shared/data/ default is also found beside the checkout
        problem_list = load_problem_set(problems, None, "id", "problem", "answer", "solution")
    session = open_model(options, architecture_only=True, pinned=pinned)
    try:
        document = trace_session_pair(session, problem_list, pair, expected, code)
    except ValueError as exc:
        fail(f"{expect or problems}: {exc}")
    write_trace(out, document)
    last = document["steps"][-1]
    console.print(visible(f"{len(document['steps'])} steps of {document['pair']['id']} written to {out}; query "
                          f"logits {last['output_sha256'][:16]}"), markup=False, highlight=False)  # the id is data


def trace_compare(
    first: Path = typer.Argument(..., help="a trace written by trace-pair"),
    second: Path = typer.Argument(..., help="another trace of the same pair (another machine or pin)"),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="also write the comparison (markdown) to this file"),
) -> None:
    """Compare two traces of one pair: name the first op whose output bytes differ (exit 1), or say every step is equal."""
    from ..eval.layer_trace import comparison_markdown, first_difference, read_trace
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
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(comparison_markdown(a, b))
        console.print(visible(f"comparison written to {markdown}"), markup=False, highlight=False)
    if found is None:
        console.print(f"equal: all {len(a['steps'])} steps hash the same")
        return
    fail(found.detail, 1)
