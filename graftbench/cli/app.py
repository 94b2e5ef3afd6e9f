"""The ``graftbench`` command line: parses arguments and prints; the logic lives in the stage modules
(:mod:`graftbench.eval.eval_run` and the modules it calls). Shared options and helpers are in :mod:`graftbench.cli.common`; ``check-exact`` and the
benchmark commands in :mod:`graftbench.cli.exact` and :mod:`graftbench.cli.bench`.

Heavy imports (torch, transformers) happen inside the commands that need a model, so ``verify-manifest`` runs on
a machine without them.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from . import bench, exact, flywheel, report, trace
from . import merge, programs, route, view
from ..engine.registry import DEFAULT_ENGINE
from ..eval.errors import NotVerified
from ..scale.eval_job import EvalRequest, cluster_options
from ..settings import (CERTIFIED_KERNELS, DEFAULT_CHUNK_SIZE, DEFAULT_MODEL, DEFAULT_RUNS_DIR, DEFAULT_STORE,
                        EvalSettings, ModelOptions)
from ..util.display_text import console_markup
from .common import (FLYWHEEL, announce_sandbox, console, fail, load_problem_set, model_label, open_model,
                     os_error_text, progress, refuse_options_not_taken, shard_problems, stage_progress)
from .invocation import command_options
from .options import (CLUSTER, EVAL, AddressArg, AllowUncheckedPayloadsArg, AllowUnanchoredArg, AnswerFieldArg,
                      ChunkSizeArg, DeviceArg, DtypeArg, EngineArg, ExampleAsArg, ExecutorArg, FlashAttnArg,
                      GraftFromArg, IdFieldArg, IsaArg, KernelsArg, KvTypeArg, LayoutArg, LimitArg, MaxNewTokensArg,
                      MinSimilarityArg, ModeArg, ModelArg, ProblemFieldArg, ProblemsArg, ProblemTimeoutArg, RunArg,
                      RunPrefixArg, RunsDirArg, SamplesArg, SeedArg, ShardArg, SolutionFieldArg, StoreArg,
                      TemperatureArg, TokenBudgetArg, TopPArg, WorkersArg, WorkerThreadsArg)
from .errors import map_errors
from .panels import place_options

if TYPE_CHECKING:
    from ..programs.sandbox import Sandbox

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Verified-knowledge experiments: solve, deposit KV artifacts, graft them back, verify.")


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("graftbench")
        except PackageNotFoundError:
            number = "unknown (not installed as a package)"
        console.print(f"graftbench {number}")
        raise typer.Exit()


@app.callback()
def _main(show_version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                            help="print graftbench's version and exit")) -> None:
    """Verified-knowledge experiments: solve, deposit KV artifacts, graft them back, verify."""


def _print_cleaned(cleaned) -> None:
    if cleaned:
        console.print(f"removed {len(cleaned)} temporary file(s) left by killed writers: "
                      + console_markup(", ".join(str(path) for path in cleaned)))


def _print_summary(name: str, manifest: dict) -> None:
    """A run's summary table and what it checked (certificates, fallbacks with their reasons, wall time with the
    certification), from its manifest."""
    from ..results.metrics import run_checks
    from .tables import checks_lines, summary_table

    checks = run_checks(manifest["samples"])
    console.print(summary_table([(name, manifest["totals"])], manifest["energy"]["method"], checks={name: checks}))
    for line in checks_lines(checks):
        console.print(console_markup(line))


def _print_run(result, energy_method: str) -> None:
    from .tables import FULL_FIGURES_NOTE, samples_table

    _print_cleaned(result.cleaned)
    console.print(samples_table(result.samples))
    _print_summary(result.run.name, result.manifest)
    console.print(FULL_FIGURES_NOTE)
    console.print(f"manifest: {result.run.manifest_path} (sha256 {result.manifest['manifest_sha256'][:16]})")


def _eval_command(request: EvalRequest, limit: int | None, fields: tuple[str, str, str, str]) -> None:
    """``solve`` or ``eval``: load the problems, run the job (:func:`graftbench.scale.eval_job.run_job`: the
    pre-flight, the executor, the run) and print what it did, or the finished run it found."""
    from ..scale.eval_job import JobHooks, run_job

    problem_list = load_problem_set(request.source, limit, *fields)
    hooks = JobHooks(open_session=open_model, on_note=_print_note, progress=progress,
                     on_event=lambda line: console.print(console_markup(line)))  # store text is data
    result = run_job(request, problem_list, hooks)
    if not hasattr(result, "run"):  # a finished run, verified: nothing was run or written
        return _print_finished(request.run, result)
    _print_run(result, result.manifest["energy"]["method"])
    _print_graft_use(result.manifest)
    if result.certificate_mismatches:
        raise NotVerified("certificate mismatch (graft logits differ from a fresh recompute): "
                          f"{result.certificate_mismatches}")


def _print_note(note: str) -> None:
    console.print(f"[yellow]note[/yellow]: {console_markup(note)}")


def _print_graft_use(manifest: dict) -> None:
    """After a graft run: say so when it grafted no artifact at all (its manifest's ``graft_use``)."""
    from ..results.manifest import graft_use_note

    note = graft_use_note(manifest)
    if note:
        console.print(f"[yellow]note[/yellow]: {console_markup(note)}")


def _print_finished(name: str, done) -> None:
    """A finished run found in place of work (:func:`graftbench.scale.eval_job.finished`): its notes, its summary,
    and that nothing was run or written."""
    for note in done.notes:
        console.print(console_markup(note))
    _print_summary(name, done.manifest)
    console.print(f"run '{console_markup(name)}' is already complete: every sample is recorded and its manifest "
                  f"{done.path} verifies (sha256 {done.manifest['manifest_sha256'][:16]}); nothing was run or written "
                  "(pass another --run name to run it again)")


def default_run_name(command: str, model: str, problems: str, graft: bool) -> str:
    """The run name when ``--run`` is not given: ``COMMAND-MODEL-PROBLEMS[-graft]`` from the model's label and the
    problem set's stem, as a plain folder name (other characters become ``_``, at most 128)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{command}-{model_label(model)}-{Path(problems).stem}"
                                           f"{'-graft' if graft else ''}")
    return name.replace("..", "_")[:128]


def _refuse_uncertified(kernels: str, what: str) -> None:
    """Exit 2 with the reason when ``what`` (a byte-exactness claim) is asked for under uncertified ``kernels``."""
    from ..settings import require_certified_kernels

    try:
        require_certified_kernels(kernels, what)
    except ValueError as exc:
        fail(str(exc))


def _settings(**values) -> EvalSettings:
    try:
        return EvalSettings(**values)
    except ValueError as exc:
        fail(str(exc))


def _in_mode(settings: EvalSettings, mode: str) -> tuple[EvalSettings, Sandbox | None]:
    """``settings`` in ``mode``, and in program mode the sandbox, opened and described before the model loads
    (``None`` in another mode). An unknown mode, or no sandbox at all, exits 2."""
    sandbox = announce_sandbox(mode)
    return replace(settings, mode=mode), sandbox


@app.command()
def solve(
    model: ModelArg = DEFAULT_MODEL, problems: ProblemsArg = "builtin", dtype: DtypeArg = "auto",
    chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE, isa: IsaArg = None, device: DeviceArg = "auto",
    kernels: KernelsArg = CERTIFIED_KERNELS, engine: EngineArg = DEFAULT_ENGINE, kv_type: KvTypeArg = "f16",
    flash_attn: FlashAttnArg = None, runs_dir: RunsDirArg = DEFAULT_RUNS_DIR, run: RunArg = None,
    limit: LimitArg = None, max_new_tokens: MaxNewTokensArg = EVAL.max_new_tokens,
    token_budget: TokenBudgetArg = None, samples: SamplesArg = EVAL.samples,
    temperature: TemperatureArg = EVAL.temperature, top_p: TopPArg = EVAL.top_p, seed: SeedArg = EVAL.seed,
    shard: ShardArg = None, executor: ExecutorArg = "process", workers: WorkersArg = CLUSTER.workers,
    worker_threads: WorkerThreadsArg = CLUSTER.threads, address: AddressArg = CLUSTER.address,
    problem_timeout: ProblemTimeoutArg = CLUSTER.problem_timeout_s, id_field: IdFieldArg = "id",
    problem_field: ProblemFieldArg = "problem", answer_field: AnswerFieldArg = "answer",
    solution_field: SolutionFieldArg = "solution", mode: ModeArg = EVAL.mode,
) -> None:
    """Decode every problem under the budget (greedy, or N samples) and verify each answer (the baseline)."""
    options = ModelOptions(engine=engine, model=model, dtype=dtype, chunk_size=chunk_size, isa=isa, device=device,
                           kernels=kernels, kv_type=kv_type, flash_attn=flash_attn)
    refuse_options_not_taken(engine)  # first: a finished run or Ray workers would pass it by
    settings, sandbox = _in_mode(_settings(max_new_tokens=max_new_tokens, token_budget=token_budget,
                                           samples=samples, temperature=temperature, top_p=top_p, seed=seed,
                                           shard=shard), mode)
    cluster = cluster_options(engine, executor, workers, worker_threads, address, problem_timeout)
    request = EvalRequest("solve", options, problems, run or default_run_name("solve", model, problems, False),
                          runs_dir, settings, cluster=cluster, command_options=command_options(), sandbox=sandbox)
    _eval_command(request, limit, (id_field, problem_field, answer_field, solution_field))


@app.command(name="eval")
def eval_(
    model: ModelArg = DEFAULT_MODEL, problems: ProblemsArg = "builtin", dtype: DtypeArg = "auto",
    chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE, isa: IsaArg = None, device: DeviceArg = "auto",
    kernels: KernelsArg = CERTIFIED_KERNELS, engine: EngineArg = DEFAULT_ENGINE, kv_type: KvTypeArg = "f16",
    flash_attn: FlashAttnArg = None, runs_dir: RunsDirArg = DEFAULT_RUNS_DIR, run: RunArg = None,
    limit: LimitArg = None, max_new_tokens: MaxNewTokensArg = EVAL.max_new_tokens,
    token_budget: TokenBudgetArg = None,
    graft: bool = typer.Option(False, "--graft", help="route each problem to an artifact and graft it"),
    store: StoreArg = DEFAULT_STORE,
    new_store: bool = typer.Option(False, "--new-store", help="with --graft: create the store if it does not exist "
                                   "(an empty store: every problem then runs as the baseline)"),
    certify: bool = typer.Option(False, "--certify", help="also hash a fresh chunked recompute; must be equal"),
    strict: bool = typer.Option(False, "--strict", help="a refused artifact is an error, not a fallback"),
    assume_kind: bool = typer.Option(False, "--assume-kind", help="graft artifacts that record no kind of CPU "
                                     "(deposited before graftbench kept writer records) as if this machine had "
                                     "written them"),
    min_similarity: MinSimilarityArg = EVAL.min_similarity,
    layout: LayoutArg = EVAL.layout, graft_from: GraftFromArg = EVAL.graft_from,
    example_as: ExampleAsArg = EVAL.example_as, samples: SamplesArg = EVAL.samples,
    temperature: TemperatureArg = EVAL.temperature, top_p: TopPArg = EVAL.top_p, seed: SeedArg = EVAL.seed,
    shard: ShardArg = None, executor: ExecutorArg = "process", workers: WorkersArg = CLUSTER.workers,
    worker_threads: WorkerThreadsArg = CLUSTER.threads, address: AddressArg = CLUSTER.address,
    problem_timeout: ProblemTimeoutArg = CLUSTER.problem_timeout_s, id_field: IdFieldArg = "id",
    problem_field: ProblemFieldArg = "problem", answer_field: AnswerFieldArg = "answer",
    solution_field: SolutionFieldArg = "solution", mode: ModeArg = EVAL.mode,
) -> None:
    """Evaluate: the baseline, or with --graft an artifact restored at its own positions before the query."""
    options = ModelOptions(engine=engine, model=model, dtype=dtype, chunk_size=chunk_size, isa=isa, device=device,
                           kernels=kernels, kv_type=kv_type, flash_attn=flash_attn)
    refuse_options_not_taken(engine)  # first: a finished run or Ray workers would pass it by
    if certify:
        _refuse_uncertified(kernels, "eval --certify")
    settings, sandbox = _in_mode(_settings(max_new_tokens=max_new_tokens, token_budget=token_budget,
                                           samples=samples, temperature=temperature, top_p=top_p, seed=seed,
                                           shard=shard, graft=graft, certify=certify, strict=strict,
                                           assume_kind=assume_kind, min_similarity=min_similarity, layout=layout,
                                           graft_from=graft_from, example_as=example_as), mode)
    cluster = cluster_options(engine, executor, workers, worker_threads, address, problem_timeout)
    request = EvalRequest("eval", options, problems, run or default_run_name("eval", model, problems, graft),
                          runs_dir, settings, store if graft else None, new_store, cluster, command_options(),
                          sandbox)
    _eval_command(request, limit, (id_field, problem_field, answer_field, solution_field))


@app.command()
def deposit(
    model: ModelArg = DEFAULT_MODEL, problems: ProblemsArg = "builtin", dtype: DtypeArg = "auto",
    chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE, isa: IsaArg = None, device: DeviceArg = "auto",
    kernels: KernelsArg = CERTIFIED_KERNELS, engine: EngineArg = DEFAULT_ENGINE, kv_type: KvTypeArg = "f16",
    flash_attn: FlashAttnArg = None, store: StoreArg = DEFAULT_STORE, runs_dir: RunsDirArg = DEFAULT_RUNS_DIR,
    limit: LimitArg = None,
    from_run: Optional[str] = typer.Option(None, "--from-run", help="deposit this solve run's verified samples"),
    from_manifest: Optional[Path] = typer.Option(None, "--from-manifest", help="deposit the verified samples "
                                                 "recorded in this solve run's manifest (e.g. a committed one), "
                                                 "once it verifies"),
    references: bool = typer.Option(True, "--references/--no-references",
                                    help="deposit the problem set's solution field"),
    shard: ShardArg = None,
    id_field: IdFieldArg = "id", problem_field: ProblemFieldArg = "problem", answer_field: AnswerFieldArg = "answer",
    solution_field: SolutionFieldArg = "solution", mode: ModeArg = EVAL.mode,
    recompute: bool = typer.Option(False, "--recompute", help="prefill every solution, even one whose artifact "
                                   "the store already holds intact (equal bytes keep the one copy)"),
) -> None:
    """Re-verify solutions against their keys and deposit the verified ones as KV artifacts (a solution already
    stored under the same pin is reused without a prefill)."""
    from ..eval.deposit_plan import deposit_job, deposit_plan, empty_plan_reasons
    from .tables import deposit_table
    from ..results.runs import RunDir, RunError
    from ..programs.sandbox import SandboxError
    from ..store.folder import check_store_target

    sandbox = announce_sandbox(mode)

    problem_list = shard_problems(load_problem_set(problems, limit, id_field, problem_field, answer_field,
                                                   solution_field), shard)
    source_run = RunDir(runs_dir, from_run) if from_run else None
    if source_run is not None and not source_run.samples_path.exists():
        fail(f"run '{from_run}' has no samples at {source_run.samples_path}")
    try:
        items = deposit_plan(problem_list, references=references, from_run=source_run, from_manifest=from_manifest)
    except (RunError, ValueError) as exc:  # ValueError includes ManifestError
        fail(str(exc))
    check_store_target(store)
    if not items:
        reasons = empty_plan_reasons(problem_list, references=references, from_run=source_run,
                                     from_manifest=from_manifest)
        fail(f"nothing to deposit from problem set '{problems}' (solution field '{solution_field}'"
             f"{f', shard {shard}' if shard else ''}): "
             + ("; ".join(reasons) or "--no-references without --from-run or --from-manifest"))
    session = open_model(ModelOptions(engine=engine, model=model, dtype=dtype, chunk_size=chunk_size, isa=isa,
                                      device=device, kernels=kernels, kv_type=kv_type, flash_attn=flash_attn))
    try:
        with progress("deposit", len(items)) as advance:
            report = deposit_job(session, store, problem_list, references=references, items=items, on_item=advance,
                                 mode=mode, recompute=recompute, sandbox=sandbox)
    except (RunError, OSError, SandboxError) as exc:  # OSError includes StorageError (disk full) and StoreError
        fail(os_error_text(exc, f"the store {store}"))
    except KeyboardInterrupt:
        fail(f"interrupted: the artifacts deposited so far are kept in {store}; the same command reuses them "
             "without a prefill", 130)
    _print_cleaned(report.cleaned)
    console.print(deposit_table(report, store))
    for pid, reason in report.refused:
        console.print(f"[yellow]refused[/yellow] {console_markup(f'{pid}: {reason}')}")
    console.print(f"{len(report.deposited)} deposited ({len(report.reused)} reused without a prefill), "
                  f"{len(report.refused)} refused")
    for fingerprint, held in sorted(report.other_pins.items(), key=lambda item: str(item[0])):
        other = console_markup(str(fingerprint)[:12])  # read from the store's index: data, of any SQLite type
        console.print(f"[yellow]note[/yellow]: {held} of the {len(set(report.prefilled_keys))} problems prefilled "
                      f"were already stored under another pin, config {other} (this one is "
                      f"{session.config.fingerprint[:12]}); a deposit reuses only artifacts of its own pin: "
                      "the same weights, dtype, chunk size, thread count, --isa and layout")


@app.command(name="verify-manifest")
def verify_manifest_cmd(
    path: Path = typer.Argument(..., help="manifest.json (run or exactness manifest), or a run folder (runs/NAME), "
                                "to re-check"),
    store: Optional[str] = typer.Option(None, "--store", help=escape(
        "store to check artifact payloads against (the store a manifest records is never read) [default: none, "
        "payloads not checked: exit 4 unless --allow-unchecked-payloads]")),
    require_artifacts: bool = typer.Option(False, "--require-artifacts",
                                           help="an artifact the store does not hold is a mismatch, not 'not checked'"),
    allow_unanchored: AllowUnanchoredArg = False,
    allow_unchecked_payloads: AllowUncheckedPayloadsArg = False,
    rescore: bool = typer.Option(False, "--rescore", help="also re-score every sample under the current verifier, "
                                 "as a separate report (a changed verdict there is a re-score, not a mismatch)"),
    problems: Optional[str] = typer.Option(None, "--problems", "-p", help=escape(
        "problem set to anchor the run to: its SHA-256, every key, every problem sampled as often as the settings "
        "say ('builtin[:A-B]' or a local file) [default: the set the manifest records, when it is generated or a "
        "file of its name is under ../shared/data/]")),
) -> None:
    """Re-check a manifest without a model: hashes, every verdict, totals, artifact payloads, the problem set. Exit 0 ("ok") only if everything was checked and holds: 1 a mismatch, 2 not a manifest, 3 problem set not anchored, 4 artifact payloads not checked."""
    from ..api import verify_manifest
    from ..results.manifest import ManifestRefused, store_unreadable
    from ..results.check import EXIT_MISMATCH, EXIT_OK, EXIT_UNANCHORED, manifest_file

    if store and Path(store).is_file():
        fail(f"--store {store} is not a store: it is a file, not a folder; no artifact could be checked")
    if store and (why := store_unreadable(store)) is not None:
        fail(f"--store {store} cannot be read ({why}); no artifact payload could be checked")
    try:
        checked = verify_manifest(path, store=store, require_artifacts=require_artifacts, problems=problems)
    except ManifestRefused as exc:  # not shaped as its schema says: exit 1; another ManifestError exits 2
        fail(str(exc), EXIT_MISMATCH)
    for note in checked.notes:
        console.print(console_markup(note))
    if rescore:
        _print_rescore(manifest_file(path))
    shown = console_markup(path)
    if checked.mismatches:
        for line in checked.mismatches:
            console.print(f"[red]mismatch[/red] {console_markup(line)}")
        fail(f"{path}: {len(checked.mismatches)} mismatch(es)", EXIT_MISMATCH)
    code = checked.exit_code(allow_unanchored, allow_unchecked_payloads)
    if code != EXIT_OK:
        gap = checked.unverified(allow_unanchored, allow_unchecked_payloads)[0]
        remedy = ("name its problem set with --problems, or pass --allow-unanchored to accept that"
                  if code == EXIT_UNANCHORED else
                  "give their store with --store, or pass --allow-unchecked-payloads to accept that")
        console.print(f"[yellow]not checked[/yellow] {shown}: {console_markup(gap)}; {remedy} (exit {code})")
        raise typer.Exit(code)
    accepted = checked.unverified()
    if accepted:
        console.print(f"[yellow]verified, except[/yellow] {shown}: {console_markup('; '.join(accepted))}")
    else:
        console.print(f"[green]ok[/green] {shown}")


def _print_rescore(path: Path) -> None:
    from ..results.manifest import ManifestError, load_manifest
    from ..results.rescore import rescore_manifest
    from .tables import rescore_table

    try:
        report = rescore_manifest(load_manifest(path))
    except (ManifestError, ValueError) as exc:
        console.print(f"[yellow]re-score not made[/yellow]: {console_markup(exc)}")
        return
    console.print(rescore_table(report))


store_app = typer.Typer(help="Inspect, check, clean and reindex an artifact store.", no_args_is_help=True)
app.add_typer(store_app, name="store")


def _open_readonly(store: str):
    from ..store.open import open_store

    return open_store(store, readonly=True)


@store_app.command("ls")
def store_ls(store: StoreArg = DEFAULT_STORE) -> None:
    """List the indexed artifacts: id, problem id, model, dtype and pin, answer key, tokens, source (and the parent
    a chained artifact continues), with their count and size, and the kinds of CPU that wrote them; read-only."""
    from ..store.coverage import pins_held
    from ..store.writers import kind_lines
    from .tables import store_table

    opened = _open_readonly(store)
    pins, rows, kinds = pins_held(opened), opened.rows(), opened.kinds_by_id()
    console.print(store_table(rows, store, {h.fingerprint: h for h in pins}))
    for line in kind_lines(rows, kinds):
        console.print(console_markup(line))


@store_app.command("verify")
def store_verify(store: StoreArg = DEFAULT_STORE) -> None:
    """Re-check every indexed artifact with SHA-256 (file against id, payload against header) and its indexed
    XXH3-128; exit 1 on any failure (read-only)."""
    opened = _open_readonly(store)
    problems = opened.verify()
    for line in problems:
        console.print(f"[red]refused[/red] {console_markup(line)}")
    temporaries = opened.temporaries()
    if temporaries:
        console.print(f"{len(temporaries)} temporary file(s) (writes in flight, or left by killed writers: "
                      f"`graftbench store clean` removes the latter): {console_markup(', '.join(temporaries))}")
    if problems:
        fail(f"{len(problems)} artifact(s) in {store} failed verification", 1)
    console.print(f"[green]ok[/green] every artifact in {console_markup(store)} verifies")


@store_app.command("reindex")
def store_reindex(store: StoreArg = DEFAULT_STORE) -> None:
    """Rebuild the store's index from its artifact files (each checked: SHA-256 = its id, header parses); bad
    files are named and left in place."""
    from ..store.open import reindex_store

    try:
        report, cleaned = reindex_store(store)
    except OSError as exc:  # StoreError, or the new index could not be written
        fail(str(exc))
    _print_cleaned(cleaned)
    for name, reason in report.skipped:
        console.print(f"[yellow]skipped[/yellow] {console_markup(name)}: {console_markup(reason)}")
    if report.temporaries:
        console.print(f"not indexed: {len(report.temporaries)} temporary file(s) of writes in flight")
    console.print(f"reindexed {console_markup(store)}: {len(report.indexed)} artifact(s) indexed, "
                  f"{len(report.skipped)} file(s) skipped")


@store_app.command("clean")
def store_clean(store: StoreArg = DEFAULT_STORE) -> None:
    """Remove the temporary files of writers killed before their rename (never one a live process is writing)."""
    from ..store.open import clean_store

    cleaned = clean_store(store)
    _print_cleaned(cleaned)
    console.print(f"{console_markup(store)}: {len(cleaned)} temporary file(s) removed")


@app.command()
def run(
    model: ModelArg = DEFAULT_MODEL, dtype: DtypeArg = "auto", chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE,
    isa: IsaArg = None, device: DeviceArg = "auto", engine: EngineArg = DEFAULT_ENGINE, kv_type: KvTypeArg = "f16",
    flash_attn: FlashAttnArg = None, runs_dir: RunsDirArg = DEFAULT_RUNS_DIR, store: StoreArg = DEFAULT_STORE,
    n_per_family: int = typer.Option(FLYWHEEL.per_family, "--per-family", min=1, help="built-in problems per family"),
    max_new_tokens: MaxNewTokensArg = FLYWHEEL.max_new_tokens, prefix: RunPrefixArg = FLYWHEEL.prefix,
) -> None:
    """The whole flywheel on the built-in set: solve, deposit, eval with graft, verify manifests, one table."""
    from ..eval.one_round import flywheel
    from ..problems.builtin import MAX_PER_FAMILY, builtin_problems
    from .tables import checks_lines, summary_table

    if n_per_family > MAX_PER_FAMILY:
        fail(f"--per-family {n_per_family}: the built-in families hold {MAX_PER_FAMILY} distinct problems each")
    problem_list = builtin_problems(n_per_family=n_per_family)
    session = open_model(ModelOptions(engine=engine, model=model, dtype=dtype, chunk_size=chunk_size, isa=isa,
                                      device=device, kv_type=kv_type, flash_attn=flash_attn))
    from ..results.runs import RunError

    try:
        with stage_progress(len(problem_list)) as (advance, on_stage):
            result = flywheel(session, problem_list, "builtin", prefix=prefix, max_new_tokens=max_new_tokens,
                              runs_root=runs_dir, store_root=store, on_sample=advance, on_item=advance,
                              on_stage=on_stage)
    except (RunError, OSError) as exc:  # OSError includes StorageError (disk full)
        fail(str(exc))
    checks = result.checks()
    console.print(summary_table(result.rows(), result.grafted.manifest["energy"]["method"],
                                title=f"flywheel on {len(problem_list)} built-in problems ({model})", checks=checks))
    for label, part in checks.items():
        for line in checks_lines(part):
            console.print(console_markup(f"{label}: {line}"))
    console.print(f"deposited {len(result.deposit.deposited)}, refused {len(result.deposit.refused)}")
    failed = False
    for name, mismatches in result.manifest_checks.items():
        console.print(f"verify-manifest {console_markup(name)}: "
                      + ("[green]ok[/green]" if not mismatches else f"[red]{console_markup(mismatches)}[/red]"))
        failed |= bool(mismatches)
    if result.grafted.certificate_mismatches:
        console.print(f"[red]certificate mismatches[/red]: {console_markup(result.grafted.certificate_mismatches)}")
        failed = True
    if failed:
        raise typer.Exit(1)


app.command(name="check-exact")(exact.check_exact)
app.command(name="bench")(bench.bench)
app.command(name="bench-isa")(bench.bench_isa)
app.command(name="bench-portable")(bench.bench_portable)
app.command(name="bench-llama")(bench.bench_llama)
app.command(name="bench-long-context")(bench.bench_long_context)
app.command(name="report")(report.report)
app.command(name="route-quality")(route.route_quality)
app.command(name="flywheel")(flywheel.flywheel)
app.command(name="trace-pair")(trace.trace_pair)
app.command(name="trace-compare")(trace.trace_compare)
app.command(name="merge")(merge.merge)
app.command(name="view")(view.view)
app.command(name="replay-programs")(programs.replay_programs)
place_options(app)  # after every command is registered: each option's help panel
map_errors(app)  # every command's errors through one mapping to exit statuses and messages


if __name__ == "__main__":
    app()
