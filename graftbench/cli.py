"""The ``graftbench`` command line: parses arguments and prints; the logic lives in :mod:`graftbench.jobs`.

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

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Verified-knowledge experiments: solve, deposit KV artifacts, graft them back, verify.")
# Outside a terminal (CI logs, pipes) rich would assume 80 columns and squash the tables.
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)

ModelOpt = typer.Option("smollm2-135m", "--model", "-m", help="alias (smollm2-135m, gemma3-270m), hub id, folder or .gguf")
ProblemsOpt = typer.Option("builtin", "--problems", "-p", help="'builtin', a local jsonl/json/parquet/csv, or a hub id")
DtypeOpt = typer.Option("float32", "--dtype", help="float32 or bfloat16")
ChunkOpt = typer.Option(256, "--chunk-size", help="prefill chunk size in tokens (part of the pinned config)")
IsaOpt = typer.Option(None, "--isa", help="instruction-set pin: native (fastest) or avx2 (the portable pin: the same "
                      "bytes on AVX-512 and AVX2 CPUs); part of the pinned config [default: native, or $GRAFTBENCH_ISA]")
RunsOpt = typer.Option("runs", "--runs-dir", envvar="GRAFTBENCH_RUNS_DIR", help="folder holding one folder per run")
StoreOpt = typer.Option("store", "--store", envvar="GRAFTBENCH_STORE", help="artifact store folder")
LimitOpt = typer.Option(None, "--limit", help="use only the first N problems")
IdFieldOpt = typer.Option("id", "--id-field")
ProblemFieldOpt = typer.Option("problem", "--problem-field")
AnswerFieldOpt = typer.Option("answer", "--answer-field")
SolutionFieldOpt = typer.Option("solution", "--solution-field")


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
    from .problems import ProblemSetError, load_problems

    try:
        return load_problems(source, id_field=id_field, problem_field=problem_field, answer_field=answer_field,
                             solution_field=solution_field, limit=limit)
    except ProblemSetError as exc:
        _fail(str(exc))


def _progress_columns():
    return (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"))


def _describe(sample_or_item) -> str:
    """The progress line's tail: a sample's id, verdict and decode tokens, or a deposit item's problem id."""
    if isinstance(sample_or_item, dict):
        mark = "✓" if sample_or_item["correct"] else "✗"
        return f"{sample_or_item['problem_id']} {mark} {sample_or_item['decode_tokens']} tok"
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
    from .report import samples_table, summary_table

    console.print(samples_table(result.samples))
    console.print(summary_table([(result.run.name, result.manifest["totals"])], energy_method))
    console.print(f"manifest: {result.run.manifest_path} (sha256 {result.manifest['manifest_sha256'][:16]})")


def _eval_command(command: str, model, problems, dtype, chunk_size, runs_dir, run, limit, max_new_tokens,
                  token_budget, graft, store, certify, strict, min_similarity, fields, isa) -> None:
    from .evaluate import EvalSettings, StrictFallbackError
    from .jobs import run_eval
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
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens", help="decode budget per problem (tokens)"),
    token_budget: Optional[int] = typer.Option(None, "--token-budget", help="decode budget for the whole run (tokens)"),
    id_field: str = IdFieldOpt, problem_field: str = ProblemFieldOpt, answer_field: str = AnswerFieldOpt,
    solution_field: str = SolutionFieldOpt,
) -> None:
    """Greedy-decode every problem under the budget and verify each answer (the baseline)."""
    _eval_command("solve", model, problems, dtype, chunk_size, runs_dir, run, limit, max_new_tokens, token_budget,
                  False, None, False, False, 0.6, (id_field, problem_field, answer_field, solution_field), isa)


@app.command(name="eval")
def eval_(
    model: str = ModelOpt, problems: str = ProblemsOpt, dtype: str = DtypeOpt, chunk_size: int = ChunkOpt,
    isa: Optional[str] = IsaOpt,
    runs_dir: str = RunsOpt, run: Optional[str] = typer.Option(None, "--run", help="run name (resumes if it exists)"),
    limit: Optional[int] = LimitOpt,
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens", help="decode budget per problem (tokens)"),
    token_budget: Optional[int] = typer.Option(None, "--token-budget", help="decode budget for the whole run (tokens)"),
    graft: bool = typer.Option(False, "--graft", help="route each problem to an artifact and graft it"),
    store: str = StoreOpt,
    certify: bool = typer.Option(False, "--certify", help="also hash a fresh chunked recompute; must be equal"),
    strict: bool = typer.Option(False, "--strict", help="a refused artifact is an error, not a fallback"),
    min_similarity: float = typer.Option(0.6, "--min-similarity", help="confidence gate for non-exact routes (0-1)"),
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
    from rich.table import Table

    from .jobs import deposit_job
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
    total += len(source_run.read_samples()) if source_run else 0
    try:
        with _progress("deposit", total) as advance:
            report = deposit_job(session, store, problem_list, references=references, from_run=source_run,
                                 on_item=advance)
    except (RunError, OSError) as exc:  # OSError includes StorageError (disk full)
        _fail(str(exc))
    table = Table(title=f"deposited into {store}")
    for name in ("problem", "artifact id", "tokens", "new"):
        table.add_column(name)
    for pid, aid, tokens, new in report.deposited:
        table.add_row(pid, aid[:16], str(tokens), "yes" if new else "already stored")
    console.print(table)
    for pid, reason in report.refused:
        console.print(f"[yellow]refused[/yellow] {pid}: {reason}")
    console.print(f"{len(report.deposited)} deposited, {len(report.refused)} refused")


def _exactness_tables(manifest: dict):
    from rich.table import Table

    totals = manifest["totals"]
    pairs = Table(title=f"graft vs fresh chunked recompute ({manifest['config']['model']}, {manifest['config']['dtype']})")
    for name in ("kind", "pairs", "byte-exact", "max |Δlogit|", "KL max", "argmax agree", "artifact tokens"):
        pairs.add_column(name, justify="right")
    for kind in totals["kinds"]:
        rows = [r for r in manifest["pairs"] if r["kind"] == kind]
        pairs.add_row(kind, str(len(rows)), str(sum(r["equal"] for r in rows)),
                      f"{max(r['max_abs_delta'] for r in rows):.3g}", f"{max(r['kl_max'] for r in rows):.3g}",
                      f"{min(r['argmax_agreement'] for r in rows):.1%}",
                      f"{min(r['artifact_tokens'] for r in rows)}–{max(r['artifact_tokens'] for r in rows)}")
    tables = [pairs]
    if totals["controls"]:
        ctl = Table(title="negative controls (must differ)")
        for name in ("control", "pairs", "byte-exact", "max |Δlogit|", "mean KL", "p99 KL", "argmax agree"):
            ctl.add_column(name, justify="right")
        for name, row in totals["controls"].items():
            ctl.add_row(name, str(row["pairs"]), str(row["exact_pairs"]), f"{row['max_abs_delta']:.3g}",
                        f"{row['kl_mean']:.3g}", f"{row['kl_p99']:.3g}", f"{row['argmax_agreement']:.2%}")
        tables.append(ctl)
    return tables


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
                                   on_pair=lambda r: advance({"problem_id": r["id"], "correct": r["equal"],
                                                              "decode_tokens": r["artifact_tokens"]}))
    for table in _exactness_tables(manifest):
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
    from .exact_manifest import append_replay_log, load_expectation, replay_record
    from .exactness import replay
    from .manifest import ManifestError

    try:
        expected = load_expectation(expect)
    except ManifestError as exc:
        _fail(str(exc))
    pin = expected["config"]
    _apply_isa(isa or pin.get("isa", "native"))
    problem_list = _problems(expected["problem_set"]["source"], None, "id", "problem", "answer", "solution")
    session = _session(pin["model"], pin["dtype"], pin["chunk_size"], pin["threads"])
    total = min(limit or len(expected["pairs"]), len(expected["pairs"]))
    with _progress("replay", total) as advance:
        result = replay(session, expected, problem_list, limit,
                        on_pair=lambda r: advance({"problem_id": r["id"], "correct": True, "decode_tokens": 0}))
    record = replay_record(expected, compared=result.compared, equal=result.equal,
                           first_difference=result.first_difference, pin_differences_found=result.pin_differences)
    console.print(f"recorded on {record['recorded_on']['cpu_model'] or '?'} ({record['recorded_on']['cpu_capability_native'] or '?'}), "
                  f"replayed on {record['replayed_on']['cpu_model']} ({record['replayed_on']['cpu_capability_native']}) "
                  f"under --isa {session.config.isa}")
    if log is not None:
        append_replay_log(log, record)
    if result.pin_differences:
        _fail(f"not comparable: this machine's pin differs from {expect} in {', '.join(result.pin_differences)}", 1)
    console.print(f"{result.compared} compared, {result.equal} equal")
    if not result.passed:
        _fail(f"replay of {expect} failed at {result.first_difference}", 1)


def _schema_of(path: Path) -> str | None:
    import json

    try:
        return json.loads(Path(path).read_text(encoding="utf-8")).get("schema")
    except (OSError, ValueError, AttributeError):
        return None


@app.command(name="verify-manifest")
def verify_manifest_cmd(
    path: Path = typer.Argument(..., help="manifest.json to re-check"),
    store: Optional[str] = typer.Option(None, "--store", help="store to check artifact payloads against "
                                        "[default: the store the manifest records]"),
    require_artifacts: bool = typer.Option(False, "--require-artifacts",
                                           help="an artifact the store does not hold is a mismatch, not 'not checked'"),
) -> None:
    """Re-check a manifest without a model: hashes, every verdict, totals, artifact payloads. Exit 0 only if all hold."""
    from .exact_manifest import SCHEMA as EXACT_SCHEMA
    from .exact_manifest import load_expectation, verify_exactness_manifest
    from .manifest import ManifestError, verify_manifest

    try:
        if _schema_of(path) == EXACT_SCHEMA:
            mismatches, notes = verify_exactness_manifest(load_expectation(path)), ["exactness manifest re-checked"]
        else:
            mismatches, notes = verify_manifest(path, store, require_artifacts)
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
    sizes: str = typer.Option("512,2048,4096,8192", "--sizes", help="artifact sizes in tokens, comma-separated"),
    repeats: int = typer.Option(3, "--repeats", help="timed repetitions of each prefill (medians reported)"),
    graft_repeats: int = typer.Option(5, "--graft-repeats", help="timed repetitions of each graft"),
    decode_tokens: int = typer.Option(128, "--decode-tokens", help="greedy tokens in the decode comparison"),
    store_sizes: str = typer.Option("10,1000,100000", "--store-sizes", help="artifact counts for the store scale test"),
    cold_load: bool = typer.Option(True, "--cold-load/--no-cold-load", help="also time a cold (de-quantizing) load"),
    peer_python: Optional[Path] = typer.Option(Path(".venv-peer/bin/python"), "--peer-python",
                                               help="a Python with llama-cpp-python for the peer row (make bench-peer-env)"),
    out: Path = typer.Option(Path("benchmarks/results"), "--out", help="folder for the JSON, markdown and PNG"),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch intra-op threads (default: torch's)"),
    smoke: bool = typer.Option(False, "--smoke", help="tiny sizes, one repetition, no cold load or peer: checks it runs"),
) -> None:
    """Measure graft against prefill (TTFT), restore throughput, decode, model load, store scale and llama.cpp."""
    _apply_isa(isa)  # before the imports below bring in torch
    from .bench.report import markdown, write_outputs
    from .bench.run import BenchSettings, run_bench

    settings = BenchSettings(sizes=sorted(_int_list(sizes, "--sizes")), repeats=repeats, graft_repeats=graft_repeats,
                             decode_tokens=decode_tokens, store_sizes=_int_list(store_sizes, "--store-sizes"),
                             cold_load=cold_load, peer_python=peer_python)
    if smoke:
        settings = BenchSettings(sizes=[64, 160], repeats=1, graft_repeats=2, decode_tokens=8, decode_repeats=1,
                                 store_sizes=[10, 100], cold_load=False, peer_python=None, bit_flips=8, smoke=True)
    problem_list = _problems(problems, None, "id", "problem", "answer", "solution")
    session = _session(model, dtype, chunk_size, threads, isa)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            result = run_bench(session, model, problem_list, problems, settings, progress)
    except ValueError as exc:
        _fail(str(exc))
    stem = f"bench-{Path(model).stem}" + ("" if dtype == "float32" else f"-{dtype}") + ("-smoke" if smoke else "")
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
    if not names or any(d not in ("float32", "bfloat16") for d in names):
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
    n_per_family: int = typer.Option(2, "--per-family", help="built-in problems per family"),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help="decode budget per problem (tokens)"),
    prefix: str = typer.Option("flywheel", "--prefix", help="run name prefix"),
) -> None:
    """The whole flywheel on the built-in set: solve, deposit, eval with graft, verify manifests, one table."""
    from .jobs import flywheel
    from .problems import builtin_problems
    from .report import summary_table

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
