"""The ``graftbench`` command line: parses arguments and prints; the logic lives in :mod:`graftbench.workflows`.

Heavy imports (torch, transformers) happen inside the commands that need a model, so ``verify-manifest`` runs on
a machine without them.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .settings import (DEFAULT_CHUNK_SIZE, DEFAULT_DTYPE, DEFAULT_MODEL, DEFAULT_RUNS_DIR, DEFAULT_STORE, DTYPE_NAMES,
                       BenchSettings, EvalSettings, FlywheelSettings)

EVAL, BENCH, FLYWHEEL = EvalSettings(), BenchSettings(), FlywheelSettings()

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Verified-knowledge experiments: solve, deposit KV artifacts, graft them back, verify.")
# Outside a terminal (CI logs, pipes) rich would assume 80 columns and squash the tables.
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)

ModelOpt = typer.Option(DEFAULT_MODEL, "--model", "-m", help="alias (smollm2-135m, gemma3-270m), hub id, folder or .gguf")
ProblemsOpt = typer.Option("builtin", "--problems", "-p", help="'builtin', a local jsonl/json/parquet/csv, or a hub id")
DtypeOpt = typer.Option(DEFAULT_DTYPE, "--dtype", help=" or ".join(DTYPE_NAMES))
ChunkOpt = typer.Option(DEFAULT_CHUNK_SIZE, "--chunk-size", help="prefill chunk size in tokens (part of the pinned config)")
IsaOpt = typer.Option(None, "--isa", help="instruction-set pin: native (fastest) or avx2 (the portable pin: the same "
                      "bytes on AVX-512 and AVX2 CPUs); part of the pinned config [default: native, or $GRAFTBENCH_ISA]")
RunsOpt = typer.Option(DEFAULT_RUNS_DIR, "--runs-dir", envvar="GRAFTBENCH_RUNS_DIR", help="folder holding one folder per run")
StoreOpt = typer.Option(DEFAULT_STORE, "--store", envvar="GRAFTBENCH_STORE", help="artifact store folder")
LimitOpt = typer.Option(None, "--limit", help="use only the first N problems")
IdFieldOpt = typer.Option("id", "--id-field", help="problem set column holding each problem's id")
ProblemFieldOpt = typer.Option("problem", "--problem-field", help="problem set column holding the problem text")
AnswerFieldOpt = typer.Option("answer", "--answer-field", help="problem set column holding the answer key")
SolutionFieldOpt = typer.Option("solution", "--solution-field",
                                help="problem set column holding a worked solution (optional)")


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def _quiet_transformers() -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _apply_isa(isa: str | None) -> None:
    from .isa import IsaError, apply

    try:
        apply(isa or os.environ.get("GRAFTBENCH_ISA") or "native")
    except IsaError as exc:
        _fail(str(exc))


def _session(model: str, dtype: str, chunk_size: int, threads: int | None = None, isa: str | None = None):
    _apply_isa(isa)  # before torch is imported
    from .models import ModelError
    from .session import open_session

    _quiet_transformers()
    try:
        with console.status(f"loading {model} ({dtype})"):
            session = open_session(model, dtype=dtype, chunk_size=chunk_size, threads=threads)
    except (ModelError, ValueError) as exc:
        _fail(str(exc))
    loaded = session.loaded
    console.print(f"model {model}: {'cached weights' if loaded.from_cache else 'de-quantized GGUF'} in "
                  f"{loaded.load_s:.2f} s · isa {session.config.isa} ({session.config.cpu_capability}) · "
                  f"config {session.config.fingerprint[:12]}")
    return session


def _problems(source: str, limit, id_field, problem_field, answer_field, solution_field):
    from .problem_loading import load_problems
    from .problem_types import ProblemSetError

    try:
        return load_problems(source, id_field=id_field, problem_field=problem_field, answer_field=answer_field,
                             solution_field=solution_field, limit=limit)
    except ProblemSetError as exc:
        _fail(str(exc))


def _progress_columns():
    return (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"))


def _describe(sample_or_item) -> str:
    """The progress line's tail: a sample's own label, a deposit item's problem id, or a given text."""
    from .sample import Sample

    if isinstance(sample_or_item, Sample):
        return sample_or_item.progress_label
    if isinstance(sample_or_item, str):
        return sample_or_item
    return sample_or_item.problem.id


@contextmanager
def _progress(label: str, total: int):
    with Progress(*_progress_columns(), console=console) as progress:
        task = progress.add_task(label, total=total, last="")
        yield lambda item: progress.update(task, advance=1, last=_describe(item))


@contextmanager
def _stage_progress(n_problems: int):
    """A progress bar per flywheel stage; deposit counts offered solutions, the others problems."""
    with Progress(*_progress_columns(), console=console) as progress:
        current = {}

        def on_stage(name: str) -> None:
            current["task"] = progress.add_task(name, total=None if name == "deposit" else n_problems, last="")

        yield (lambda item: progress.update(current["task"], advance=1, last=_describe(item))), on_stage


def _print_run(result, energy_method: str) -> None:
    from .tables import samples_table, summary_table

    console.print(samples_table(result.samples))
    console.print(summary_table([(result.run.name, result.manifest["totals"])], energy_method))
    console.print(f"manifest: {result.run.manifest_path} (sha256 {result.manifest['manifest_sha256'][:16]})")


def _eval_command(command: str, model, problems, dtype, chunk_size, runs_dir, run, limit, max_new_tokens,
                  token_budget, graft, store, certify, strict, min_similarity, fields, isa) -> None:
    from .evaluate import StrictFallbackError
    from .workflows import run_eval
    from .runs import RunError

    problem_list = _problems(problems, limit, *fields)
    session = _session(model, dtype, chunk_size, isa=isa)
    settings = EvalSettings(max_new_tokens=max_new_tokens, token_budget=token_budget, graft=graft, certify=certify,
                            strict=strict, min_similarity=min_similarity)
    name = run or f"{command}-{model.replace('/', '_')}-{Path(problems).stem}{'-graft' if graft else ''}"
    try:
        with _progress(command, len(problem_list)) as advance:
            result = run_eval(session, problem_list, problems, name, settings, command=command, runs_root=runs_dir,
                              store_root=store if graft else None, on_sample=advance)
    except (RunError, StrictFallbackError, OSError) as exc:  # OSError includes StorageError (disk full)
        _fail(str(exc))
    _print_run(result, result.manifest["energy"]["method"])
    if result.certificate_mismatches:
        _fail(f"certificate mismatch (graft logits differ from a fresh recompute): {result.certificate_mismatches}", 1)


@app.command()
def solve(
    model: str = ModelOpt, problems: str = ProblemsOpt, dtype: str = DtypeOpt, chunk_size: int = ChunkOpt,
    isa: Optional[str] = IsaOpt,
    runs_dir: str = RunsOpt, run: Optional[str] = typer.Option(None, "--run", help="run name (resumes if it exists)"),
    limit: Optional[int] = LimitOpt,
    max_new_tokens: int = typer.Option(EVAL.max_new_tokens, "--max-new-tokens", help="decode budget per problem (tokens)"),
    token_budget: Optional[int] = typer.Option(None, "--token-budget", help="decode budget for the whole run (tokens)"),
    id_field: str = IdFieldOpt, problem_field: str = ProblemFieldOpt, answer_field: str = AnswerFieldOpt,
    solution_field: str = SolutionFieldOpt,
) -> None:
    """Greedy-decode every problem under the budget and verify each answer (the baseline)."""
    _eval_command("solve", model, problems, dtype, chunk_size, runs_dir, run, limit, max_new_tokens, token_budget,
                  False, None, False, False, EVAL.min_similarity, (id_field, problem_field, answer_field, solution_field), isa)


@app.command(name="eval")
def eval_(
    model: str = ModelOpt, problems: str = ProblemsOpt, dtype: str = DtypeOpt, chunk_size: int = ChunkOpt,
    isa: Optional[str] = IsaOpt,
    runs_dir: str = RunsOpt, run: Optional[str] = typer.Option(None, "--run", help="run name (resumes if it exists)"),
    limit: Optional[int] = LimitOpt,
    max_new_tokens: int = typer.Option(EVAL.max_new_tokens, "--max-new-tokens", help="decode budget per problem (tokens)"),
    token_budget: Optional[int] = typer.Option(None, "--token-budget", help="decode budget for the whole run (tokens)"),
    graft: bool = typer.Option(False, "--graft", help="route each problem to an artifact and graft it"),
    store: str = StoreOpt,
    certify: bool = typer.Option(False, "--certify", help="also hash a fresh chunked recompute; must be equal"),
    strict: bool = typer.Option(False, "--strict", help="a refused artifact is an error, not a fallback"),
    min_similarity: float = typer.Option(EVAL.min_similarity, "--min-similarity", help="confidence gate for non-exact routes (0-1)"),
    id_field: str = IdFieldOpt, problem_field: str = ProblemFieldOpt, answer_field: str = AnswerFieldOpt,
    solution_field: str = SolutionFieldOpt,
) -> None:
    """Evaluate: the baseline, or with --graft an artifact restored at its own positions before the query."""
    _eval_command("eval", model, problems, dtype, chunk_size, runs_dir, run, limit, max_new_tokens, token_budget,
                  graft, store, certify, strict, min_similarity, (id_field, problem_field, answer_field, solution_field), isa)


@app.command()
def deposit(
    model: str = ModelOpt, problems: str = ProblemsOpt, dtype: str = DtypeOpt, chunk_size: int = ChunkOpt,
    isa: Optional[str] = IsaOpt,
    store: str = StoreOpt, runs_dir: str = RunsOpt, limit: Optional[int] = LimitOpt,
    from_run: Optional[str] = typer.Option(None, "--from-run", help="deposit this solve run's verified samples"),
    references: bool = typer.Option(True, "--references/--no-references",
                                    help="deposit the problem set's solution field"),
    id_field: str = IdFieldOpt, problem_field: str = ProblemFieldOpt, answer_field: str = AnswerFieldOpt,
    solution_field: str = SolutionFieldOpt,
) -> None:
    """Re-verify solutions against their keys and deposit the verified ones as KV artifacts."""
    from .workflows import deposit_job
    from .tables import deposit_table
    from .runs import RunDir, RunError

    problem_list = _problems(problems, limit, id_field, problem_field, answer_field, solution_field)
    try:
        source_run = RunDir(runs_dir, from_run) if from_run else None
    except RunError as exc:
        _fail(str(exc))
    if source_run is not None and not source_run.samples_path.exists():
        _fail(f"run '{from_run}' has no samples at {source_run.samples_path}")
    session = _session(model, dtype, chunk_size, isa=isa)
    total = len([p for p in problem_list if p.solution]) if references else 0
    total += sum(1 for s in source_run.read_samples() if s.get("correct")) if source_run else 0
    try:
        with _progress("deposit", total) as advance:
            report = deposit_job(session, store, problem_list, references=references, from_run=source_run,
                                 on_item=advance)
    except (RunError, OSError) as exc:  # OSError includes StorageError (disk full)
        _fail(str(exc))
    console.print(deposit_table(report, store))
    for pid, reason in report.refused:
        console.print(f"[yellow]refused[/yellow] {pid}: {reason}")
    console.print(f"{len(report.deposited)} deposited, {len(report.refused)} refused")


@app.command(name="check-exact")
def check_exact(
    model: str = ModelOpt, dtype: str = DtypeOpt, chunk_size: int = ChunkOpt, problems: str = ProblemsOpt,
    isa: Optional[str] = typer.Option(None, "--isa", help="instruction-set pin: native or avx2 (portable); with "
                                      "--expect the expectation's pin is adopted [default: native]"),
    samples: int = typer.Option(50, "--samples", help="number of (artifact, query) pairs"),
    controls: bool = typer.Option(False, "--controls", help="also run the negative controls"),
    control_pairs: int = typer.Option(10, "--control-pairs", help="pairs that run the controls (the first N)"),
    write_expect: Optional[Path] = typer.Option(None, "--write-expect", help="write the manifest here as the expectation"),
    expect: Optional[Path] = typer.Option(None, "--expect", help="replay this expectation instead of measuring"),
    limit: Optional[int] = typer.Option(None, "--limit", help="with --expect: replay only the first N pairs"),
    log: Optional[Path] = typer.Option(None, "--log", help="with --expect: append the outcome and both CPUs to this "
                                       "replay log (JSON lines, e.g. manifests/replays.jsonl)"),
    runs_dir: str = RunsOpt,
    threads: Optional[int] = typer.Option(None, "--threads", help="torch intra-op threads (pinned; default: torch's)"),
) -> None:
    """Prove the graft byte-exact against a fresh chunked recompute, with negative controls, or replay an expectation."""
    if expect is not None:
        return _replay(expect, limit, isa, log)
    _apply_isa(isa)  # before the imports below bring in torch
    from .exactness import run_check_exact
    from .manifest import write_manifest
    from .runs import RunDir

    problem_list = _problems(problems, None, "id", "problem", "answer", "solution")
    session = _session(model, dtype, chunk_size, threads, isa)
    with _progress("check-exact", samples) as advance:
        manifest = run_check_exact(session, problem_list, problems, samples, controls, control_pairs,
                                   on_pair=lambda r: advance(f"{r['id']} {'✓' if r['equal'] else '✗'} "
                                                             f"{r['artifact_tokens']} artifact tokens"))
    from .tables import exactness_tables

    for table in exactness_tables(manifest):
        console.print(table)
    run = RunDir(runs_dir, f"exact-{Path(model).stem}-{dtype}")
    try:
        run.path.mkdir(parents=True, exist_ok=True)
        write_manifest(manifest, run.path / "exactness.json")
        if write_expect:
            write_manifest(manifest, write_expect)
    except OSError as exc:
        _fail(str(exc))
    totals = manifest["totals"]
    console.print(f"{totals['exact_pairs']} of {totals['pairs']} pairs byte-exact · manifest {run.path / 'exactness.json'}"
                  + (f" · expectation {write_expect}" if write_expect else ""))
    if totals["exact_pairs"] != totals["pairs"]:
        _fail("some pairs are not byte-exact", 1)


def _replay(expect: Path, limit, isa: str | None, log: Path | None) -> None:
    from .exact_manifest import load_expectation
    from .manifest import ManifestError

    try:
        expected = load_expectation(expect)
    except ManifestError as exc:
        _fail(str(exc))
    pin = expected["config"]
    _apply_isa(isa or pin.get("isa", "native"))
    from .exactness import replay_and_log

    problem_list = _problems(expected["problem_set"]["source"], None, "id", "problem", "answer", "solution")
    session = _session(pin["model"], pin["dtype"], pin["chunk_size"], pin["threads"])
    total = min(limit or len(expected["pairs"]), len(expected["pairs"]))
    with _progress("replay", total) as advance:
        result, record = replay_and_log(session, expected, problem_list, limit, log,
                                        on_pair=lambda r: advance(f"{r['id']} equal"))
    recorded, here = record["recorded_on"], record["replayed_on"]
    console.print(f"recorded on {recorded['cpu_model'] or '?'} ({recorded['cpu_capability_native'] or '?'}), replayed "
                  f"on {here['cpu_model']} ({here['cpu_capability_native']}) under --isa {session.config.isa}")
    if result.pin_differences:
        _fail(f"not comparable: this machine's pin differs from {expect} in {', '.join(result.pin_differences)}", 1)
    console.print(f"{result.compared} compared, {result.equal} equal")
    if not result.passed:
        _fail(f"replay of {expect} failed at {result.first_difference}", 1)


@app.command(name="verify-manifest")
def verify_manifest_cmd(
    path: Path = typer.Argument(..., help="manifest.json (run or exactness manifest) to re-check"),
    store: Optional[str] = typer.Option(None, "--store", help="store to check artifact payloads against "
                                        "[default: the store the manifest records]"),
    require_artifacts: bool = typer.Option(False, "--require-artifacts",
                                           help="an artifact the store does not hold is a mismatch, not 'not checked'"),
) -> None:
    """Re-check a manifest without a model: hashes, every verdict, totals, artifact payloads. Exit 0 only if all hold."""
    from .manifest import ManifestError
    from .manifest_check import check_manifest

    try:
        mismatches, notes = check_manifest(path, store, require_artifacts)
    except ManifestError as exc:
        _fail(str(exc))
    for note in notes:
        console.print(note)
    if mismatches:
        for line in mismatches:
            console.print(f"[red]mismatch[/red] {line}")
        _fail(f"{path}: {len(mismatches)} mismatch(es)", 1)
    console.print(f"[green]ok[/green] {path}")


store_app = typer.Typer(help="Inspect and check an artifact store.", no_args_is_help=True)
app.add_typer(store_app, name="store")


@store_app.command("ls")
def store_ls(store: str = StoreOpt) -> None:
    """List the indexed artifacts: id, problem, answer, tokens, bytes, parent, source."""
    from rich.table import Table

    from .store import Store

    table = Table(title=f"artifacts in {store}")
    for name in ("id", "problem key", "answer", "tokens", "MB", "parent", "source"):
        table.add_column(name)
    for row in Store(store).rows():
        table.add_row(row["id"][:16], (row["problem_key"] or "")[:12], row["answer"] or "", str(row["n_tokens"]),
                      f"{row['bytes'] / 1e6:.1f}", (row["parent"] or "")[:12], row["source"] or "")
    console.print(table)


@store_app.command("verify")
def store_verify(store: str = StoreOpt) -> None:
    """Re-check every indexed artifact with SHA-256 (file against id, payload against header) and its indexed XXH3-128; exit 1 on any failure."""
    from .store import Store

    problems = Store(store).verify()
    for line in problems:
        console.print(f"[red]refused[/red] {line}")
    if problems:
        _fail(f"{len(problems)} artifact(s) in {store} failed verification", 1)
    console.print(f"[green]ok[/green] every artifact in {store} verifies")


def _int_list(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        _fail(f"{name} must be comma-separated positive integers, got {text!r}")
    if not values or min(values) < 1:
        _fail(f"{name} must be comma-separated positive integers, got {text!r}")
    return values


@app.command()
def bench(
    model: str = ModelOpt, dtype: str = DtypeOpt, chunk_size: int = ChunkOpt, isa: Optional[str] = IsaOpt,
    problems: str = typer.Option("../shared/data/aime2024.jsonl", "--problems", "-p",
                                 help="problems with solutions: the text the artifacts are cut from"),
    sizes: str = typer.Option(",".join(map(str, BENCH.sizes)), "--sizes", help="artifact sizes in tokens, comma-separated"),
    repeats: int = typer.Option(BENCH.repeats, "--repeats", help="timed repetitions of each prefill (medians reported)"),
    graft_repeats: int = typer.Option(BENCH.graft_repeats, "--graft-repeats", help="timed repetitions of each graft"),
    decode_tokens: int = typer.Option(BENCH.decode_tokens, "--decode-tokens", help="greedy tokens in the decode comparison"),
    store_sizes: str = typer.Option(",".join(map(str, BENCH.store_sizes)), "--store-sizes", help="artifact counts for the store scale test"),
    cold_load: bool = typer.Option(True, "--cold-load/--no-cold-load", help="also time a cold (de-quantizing) load"),
    peer_python: Optional[Path] = typer.Option(BENCH.peer_python, "--peer-python",
                                               help="a Python with llama-cpp-python for the peer row (make bench-peer-env)"),
    out: Path = typer.Option(Path("benchmarks/results"), "--out", help="folder for the JSON, markdown and PNG"),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch intra-op threads (default: torch's)"),
    smoke: bool = typer.Option(False, "--smoke", help="tiny sizes, one repetition, no cold load or peer: checks it runs"),
) -> None:
    """Measure graft against prefill (TTFT), restore throughput, decode, model load, store scale and llama.cpp."""
    _apply_isa(isa)  # before the imports below bring in torch
    from .bench.report import markdown, write_outputs
    from .bench.run import run_bench

    settings = BenchSettings(sizes=sorted(_int_list(sizes, "--sizes")), repeats=repeats, graft_repeats=graft_repeats,
                             decode_tokens=decode_tokens, store_sizes=_int_list(store_sizes, "--store-sizes"),
                             cold_load=cold_load, peer_python=peer_python)
    if smoke:
        settings = BenchSettings.smoke_run()
    problem_list = _problems(problems, None, "id", "problem", "answer", "solution")
    session = _session(model, dtype, chunk_size, threads, isa)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            result = run_bench(session, model, problem_list, problems, settings, progress)
    except ValueError as exc:
        _fail(str(exc))
    stem = f"bench-{Path(model).stem}" + ("" if dtype == DEFAULT_DTYPE else f"-{dtype}") + ("-smoke" if smoke else "")
    paths = write_outputs(result, out, stem)
    console.print(markdown(result))
    console.print("wrote " + ", ".join(str(p) for p in paths))


@app.command(name="bench-isa")
def bench_isa(
    model: str = ModelOpt,
    dtypes: str = typer.Option("float32,bfloat16", "--dtypes", help="dtypes to measure, comma-separated"),
    problems: str = typer.Option("../shared/data/aime2024.jsonl", "--problems", "-p",
                                 help="problems with solutions: the prompt text"),
    prompt_tokens: int = typer.Option(512, "--prompt-tokens", min=1, help="tokens prefilled (the prompt)"),
    decode_tokens: int = typer.Option(64, "--decode-tokens", min=2, help="greedy tokens decoded after it"),
    threads: int = typer.Option(1, "--threads", min=1, help="torch intra-op threads in each process"),
    repeats: int = typer.Option(3, "--repeats", min=1, help="fresh processes per (pin, dtype); medians reported"),
    out: Path = typer.Option(Path("benchmarks/results"), "--out", help="folder for the JSON and markdown"),
) -> None:
    """Measure what the portable pin (--isa avx2) costs against native kernels: prefill and decode tokens/s."""
    from .bench.isa_cost import markdown, measure, write_outputs

    names = [d.strip() for d in dtypes.split(",") if d.strip()]
    if not names or any(d not in DTYPE_NAMES for d in names):
        _fail(f"--dtypes must list float32 and/or bfloat16, got {dtypes!r}")
    _problems(problems, None, "id", "problem", "answer", "solution")  # a bad problem file is named before any probe
    try:
        with _progress_bar("fresh processes", 2 * repeats * len(names)) as advance:
            result = measure(model, names, problems, prompt_tokens, decode_tokens, threads, repeats, advance)
    except RuntimeError as exc:
        _fail(str(exc))
    paths = write_outputs(result, out, f"isa-cost-{Path(model).stem}")
    console.print(markdown(result))
    console.print("wrote " + ", ".join(str(p) for p in paths))


@app.command(name="bench-long-context")
def bench_long_context(
    model: str = typer.Option("gemma3-270m", "--model", "-m", help="alias, hub id, folder or .gguf"),
    dtype: str = DtypeOpt, chunk_size: int = ChunkOpt, isa: Optional[str] = IsaOpt,
    problems: list[str] = typer.Option(["../shared/data/aime2024.jsonl", "../shared/data/aime2025.jsonl"], "--problems",
                                       "-p", help="problems with solutions (repeatable): the text the artifacts are cut from"),
    tokens: int = typer.Option(1_000_000, "--tokens", help="tokens of KV state to hold in the store"),
    artifact_tokens: int = typer.Option(4096, "--artifact-tokens", help="tokens per artifact"),
    probes: int = typer.Option(20, "--probes", help="random artifacts reached (each warm and cold)"),
    store: Path = typer.Option(Path("store-long-context"), "--store", help="store folder (resumable; large)"),
    out: Path = typer.Option(Path("benchmarks/results"), "--out", help="folder for the JSON and markdown"),
) -> None:
    """Hold far more KV state than the window in the store and time reaching any artifact (a benchmark run)."""
    _apply_isa(isa)  # before the imports below bring in torch
    from .bench.long_context import measure
    from .bench.report import long_context_markdown, write_long_context
    from .bench.workload import corpus_ids

    problem_list = [p for source in problems for p in _problems(source, None, "id", "problem", "answer", "solution")]
    session = _session(model, dtype, chunk_size, isa=isa)
    try:
        corpus = corpus_ids(session, problem_list)
        query = session.query_ids(problem_list[0].problem)
        with _progress_bar("depositing long-context artifacts", -(-tokens // artifact_tokens)) as advance:
            result = measure(session, model, store, corpus, artifact_tokens, tokens, probes, query, advance)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    result["problems"] = problems
    paths = write_long_context(result, out, f"long-context-{Path(model).stem}")
    console.print(long_context_markdown(result))
    console.print("wrote " + ", ".join(str(p) for p in paths))


@contextmanager
def _progress_bar(description: str, total: int):
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task(description, total=total)
        yield lambda: progress.advance(task)


@app.command()
def run(
    model: str = ModelOpt, dtype: str = DtypeOpt, chunk_size: int = ChunkOpt, isa: Optional[str] = IsaOpt,
    runs_dir: str = RunsOpt,
    store: str = StoreOpt,
    n_per_family: int = typer.Option(FLYWHEEL.per_family, "--per-family", help="built-in problems per family"),
    max_new_tokens: int = typer.Option(FLYWHEEL.max_new_tokens, "--max-new-tokens", help="decode budget per problem (tokens)"),
    prefix: str = typer.Option(FLYWHEEL.prefix, "--prefix", help="run name prefix"),
) -> None:
    """The whole flywheel on the built-in set: solve, deposit, eval with graft, verify manifests, one table."""
    from .workflows import flywheel
    from .builtin_problems import builtin_problems
    from .tables import summary_table

    problem_list = builtin_problems(n_per_family=n_per_family)
    session = _session(model, dtype, chunk_size, isa=isa)
    from .runs import RunError

    try:
        with _stage_progress(len(problem_list)) as (advance, on_stage):
            result = flywheel(session, problem_list, "builtin", prefix=prefix, max_new_tokens=max_new_tokens,
                              runs_root=runs_dir, store_root=store, on_sample=advance, on_item=advance,
                              on_stage=on_stage)
    except (RunError, OSError) as exc:  # OSError includes StorageError (disk full)
        _fail(str(exc))
    console.print(summary_table(result.rows(), result.grafted.manifest["energy"]["method"],
                                title=f"flywheel on {len(problem_list)} built-in problems ({model})"))
    console.print(f"deposited {len(result.deposit.deposited)}, refused {len(result.deposit.refused)}")
    failed = False
    for name, mismatches in result.manifest_checks.items():
        console.print(f"verify-manifest {name}: " + ("[green]ok[/green]" if not mismatches else f"[red]{mismatches}[/red]"))
        failed |= bool(mismatches)
    if result.grafted.certificate_mismatches:
        console.print(f"[red]certificate mismatches[/red]: {result.grafted.certificate_mismatches}")
        failed = True
    if failed:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
