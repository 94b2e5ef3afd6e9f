"""What every ``graftbench`` command shares: the console, the common options, and small parse-and-print helpers
(errors, the instruction-set pin, loading a model or a problem set, progress bars).

Imports no torch: a command applies its instruction-set pin (:func:`apply_isa`) before anything imports torch.
"""

from __future__ import annotations

import errno
import os
import re
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..util.display_text import console_markup
from ..engine.registry import DEFAULT_ENGINE
from ..settings import (CERTIFIED_KERNELS, KERNEL_CONFIGS, DEFAULT_CHUNK_SIZE, DEFAULT_DTYPE, DEFAULT_MODEL, DEFAULT_RUNS_DIR, DEFAULT_STORE, DTYPE_NAMES,
                        SAMPLED_TEMPERATURE, SAMPLED_TOP_P, BenchSettings, EvalSettings, FlywheelSettings)

EVAL, BENCH, FLYWHEEL = EvalSettings(), BenchSettings(), FlywheelSettings()
# The benchmark commands' default --out: a scratch folder git ignores. A result to commit goes to
# results/<kind of machine>/bench/ (graftbench.results.layout; `make bench CPU=<kind>` writes there).
BENCH_OUT = Path("bench-results")

# Width: the terminal's, else $COLUMNS, else 80 (rich's own rule); the tables are sized to fit 80 columns. No
# emoji codes: a ``:name:`` in untrusted text is shown as written.
console = Console(soft_wrap=True, emoji=False)

ModelOpt = typer.Option(DEFAULT_MODEL, "--model", "-m", help="alias (smollm2-135m, gemma3-270m; after make models "
                        "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b), hub id, folder or .gguf")
ProblemsOpt = typer.Option("builtin", "--problems", "-p", help="'builtin', a local jsonl/json/parquet/csv, or a hub id")
DtypeOpt = typer.Option("auto", "--dtype", help="auto (float32 on the CPU, bfloat16 on CUDA), "
                        + " or ".join(DTYPE_NAMES) + "; part of the pinned config")
ChunkOpt = typer.Option(DEFAULT_CHUNK_SIZE, "--chunk-size", min=1, help="prefill chunk size in tokens (part of the pinned config)")
IsaOpt = typer.Option(None, "--isa", help="instruction-set pin: native (fastest), avx2 (the same bytes on AVX-512 and "
                      "AVX2 CPUs of one vendor) or portable (avx2 with MKL's COMPATIBLE branch: the candidate across "
                      "vendors); part of the pinned config [default: native, or $GRAFTBENCH_ISA]")
_DEVICE = {"name": "auto"}  # the --device of this invocation (set by the option's callback, read by open_model)


def _remember_device(value: str) -> str:
    from ..engine.device import DeviceError, check_name

    try:
        _DEVICE["name"] = check_name(value)
    except DeviceError as exc:
        raise typer.BadParameter(str(exc)) from exc
    return value


def device_option() -> str:
    """This invocation's ``--device`` as given (``auto``, ``cpu``, ``cuda`` or ``cuda:N``; not resolved)."""
    return _DEVICE["name"]


_KERNELS = {"name": CERTIFIED_KERNELS}  # this invocation's --kernels (as --device: set by the option's callback)


def remember_kernels(value: str) -> str:
    """The ``--kernels`` callback (:data:`graftbench.cli.options.KernelsOpt`): check ``value`` and keep it for
    :func:`open_model`; the app's callback sets ``certified`` before every command, so a command without the option
    runs certified."""
    if value not in KERNEL_CONFIGS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(KERNEL_CONFIGS)}")
    _KERNELS["name"] = value
    return value


def kernels_option() -> str:
    """This invocation's ``--kernels`` (``certified`` when the command takes no such option)."""
    return _KERNELS["name"]


DeviceOpt = typer.Option("auto", "--device", envvar="GRAFTBENCH_DEVICE", callback=_remember_device,
                         help="auto (CUDA when torch sees a GPU, else the CPU), cpu, cuda or cuda:N; on CUDA the "
                              "CUDA pin is set and recorded (docs/gpu.md)")
_ENGINE = {"name": None, "kv_type": "f16", "flash_attn": None}  # this invocation's engine options (as --device)


def _remember(key: str, check=None):
    def callback(value):
        if check is not None and value is not None:
            check(value)
        _ENGINE[key] = value
        return value
    return callback


def _check_engine(value: str) -> None:
    from ..engine.registry import engine_names

    if value not in engine_names():
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(engine_names())}")


def _check_kv_type(value: str) -> None:
    if value not in ("f16", "q8_0", "q4_0"):
        raise typer.BadParameter(f"{value!r} is not one of f16, q8_0, q4_0")


EngineOpt = typer.Option(DEFAULT_ENGINE, "--engine", callback=_remember("name", _check_engine), help=(
    "torch, or llama.cpp (the GGUF file run by llama.cpp with its weights as stored: needs the llama extra; "
    "docs/llama-cpp.md), or an engine registered from outside; an option the engine does not take (--dtype, "
    "--device, --kernels or --isa on llama.cpp, --kv-type or --flash-attn on torch) is refused (docs/engines.md)"))
KvTypeOpt = typer.Option("f16", "--kv-type", callback=_remember("kv_type", _check_kv_type),
                         help="llama.cpp KV cache type: f16, q8_0 or q4_0 (pinned)")
FlashAttnOpt = typer.Option(None, "--flash-attn/--no-flash-attn", callback=_remember("flash_attn"),
                            help="llama.cpp flash attention (pinned) [default: on for a quantized KV cache, else off]")


def engine_name() -> str:
    """The ``--engine`` of this invocation (the default engine when the command has no such option)."""
    return _ENGINE["name"] or DEFAULT_ENGINE


def engine_factory(name: str | None = None):
    """The engine ``name`` (default: this invocation's ``--engine``) from :mod:`graftbench.engine.registry`; fails
    with one line naming it when it is unknown or cannot be imported (a missing extra)."""
    from ..engine.base import EngineOpenError
    from ..engine.registry import UnknownEngineError, get

    try:
        return get(name or engine_name())
    except (UnknownEngineError, EngineOpenError) as exc:
        fail(str(exc))


def require_capability(capability: str, what: str, name: str | None = None) -> None:
    """Exit 2 naming the engine and the capability when the engine ``name`` (default: this invocation's) lacks
    ``capability`` (:func:`graftbench.engine.base.require`), before any model loads."""
    from ..engine.base import CapabilityError, require

    try:
        require(engine_factory(name), capability, what)
    except CapabilityError as exc:
        fail(str(exc))


def refuse_options_not_taken(engine: str) -> None:
    """Exit 2 when the running command was given an option the engine ``engine`` does not take
    (:func:`graftbench.cli.invocation.options_refusal` says which, and which it takes); call it before the model
    loads."""
    from .invocation import options_refusal

    refusal = options_refusal(engine)
    if refusal is not None:
        fail(refusal)


RunsOpt = typer.Option(DEFAULT_RUNS_DIR, "--runs-dir", envvar="GRAFTBENCH_RUNS_DIR", help="folder holding one folder per run")
StoreOpt = typer.Option(DEFAULT_STORE, "--store", envvar="GRAFTBENCH_STORE",
                        help="artifact store: a folder, or a URL (s3://bucket/prefix, file:///path, memory://name)")
LimitOpt = typer.Option(None, "--limit", min=1, help="use only the first N problems")
# What verify-manifest (and report, for the problem set) may be told to accept as not checked; without it, a
# manifest whose problem set could not be anchored exits 3, one whose artifact payloads were not checked exits 4.
AllowUnanchoredOpt = typer.Option(False, "--allow-unanchored", help="accept a run whose problem set could not be "
                                  "anchored (a source graftbench cannot rebuild): say so and go on, instead of exit 3")
AllowUncheckedPayloadsOpt = typer.Option(False, "--allow-unchecked-payloads", help="accept artifact payloads that "
                                         "were not checked (no --store, or absent from it): say so and exit 0 "
                                         "instead of 4")
SamplesOpt = typer.Option(EVAL.samples, "--samples", min=1, max=1024,
                          help="samples per problem, decoded as one batch after one prefill or graft (N > 1 needs "
                               "--temperature above 0)")
TemperatureOpt = typer.Option(EVAL.temperature, "--temperature", min=0.0, max=10.0,
                              help=f"0 decodes greedily; above 0 samples (e.g. {SAMPLED_TEMPERATURE})")
TopPOpt = typer.Option(EVAL.top_p, "--top-p", min=0.01, max=1.0,
                       help=f"nucleus: sample among the most likely tokens holding this much probability (e.g. {SAMPLED_TOP_P})")
SeedOpt = typer.Option(EVAL.seed, "--seed", min=0, max=2**31 - 1,
                       help="run seed; each sample's seed derives from (run seed, problem id, sample index)")
LayoutOpt = typer.Option(EVAL.layout, "--layout", help="query layout after a graft: answer (the answer cue), solve "
                         "(a full solution), or auto (answer on exact routes, solve on similar ones)")
GraftFromOpt = typer.Option(EVAL.graft_from, "--graft-from", help="nearest (the router's choice), other-family "
                            "(the control: the nearest deposit of another family, no similarity gate) or top-ranked "
                            "(the gate off: the top-ranked deposit of the whole library for every problem)")
ExampleAsOpt = typer.Option(EVAL.example_as, "--example-as", help="with --graft: graft (the routed example's KV "
                            "restored) or prompt (the control: the same example's tokens prefilled as plain prompt "
                            "text, then the same query; its first logits equal the graft's)")
ShardOpt = typer.Option(None, "--shard", help="run only shard i of N (i/N, from 0): a problem's shard is SHA-256 "
                        "of its id mod N, whatever the file's order; merge the shards with graftbench merge")
ModeOpt = typer.Option(EVAL.mode, "--mode", help="text (the model's own final answer is judged) or program (the model "
                       "writes a Python program, run in the sandbox; the last line it prints is judged)")
IdFieldOpt = typer.Option("id", "--id-field", help="problem set column holding each problem's id")
ProblemFieldOpt = typer.Option("problem", "--problem-field", help="problem set column holding the problem text")
AnswerFieldOpt = typer.Option("answer", "--answer-field", help="problem set column holding the answer key")
SolutionFieldOpt = typer.Option("solution", "--solution-field",
                                help="problem set column holding a worked solution (optional)")


def fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` (the message shown as text: it may quote untrusted input, see
    :func:`graftbench.util.display_text.console_markup`) and exit with ``code``."""
    console.print(f"[red]error:[/red] {console_markup(message)}")
    raise typer.Exit(code)


def os_error_text(exc: BaseException, what: str | None = None) -> str:
    """``exc`` as an error line: graftbench's own errors as they are (a failed write without its ``[Errno N]``
    prefix); a bare ``OSError`` (``[Errno 30] ...``) as
    what could not be done to which file, and, for a file system that refuses writes, that ``what`` (e.g. ``the
    store gs``) cannot be written and nothing in it was changed."""
    from ..util.durable import StorageError
    from ..store.index import StoreError

    if isinstance(exc, StorageError):
        return exc.strerror or str(exc)  # its own message, without the "[Errno 28]" prefix
    if not isinstance(exc, OSError) or isinstance(exc, StoreError) or exc.errno is None:
        return str(exc)
    target = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (f"{what or 'a file'} cannot be written: {exc.strerror}{target}; nothing was written. Pass a place "
                "this process can write (a store or runs folder elsewhere), or make it writable")
    return f"{exc.strerror}{target}"


def announce_sandbox(mode: str) -> None:
    """In program mode, check the sandbox before the model loads and print how programs will be contained; exit 2
    for an unknown mode or, with one line naming what is missing and how to get it, when the sandbox cannot be
    built (programs never run uncontained)."""
    from ..settings import MODES

    if mode not in MODES:
        fail(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if mode != "program":
        return
    from ..programs.sandbox import SandboxError, isolation

    try:
        found = isolation()
    except SandboxError as exc:
        fail(str(exc))
    console.print(f"program sandbox: [green]{found.description}[/green]", markup=True, highlight=False)


def quiet_transformers() -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def apply_isa(isa: str | None) -> None:
    from ..util.isa import ENV_VAR, IsaError, apply

    try:
        apply(isa or os.environ.get(ENV_VAR) or "native")
    except IsaError as exc:
        fail(str(exc))


_HUB_CHECKED: set[str] = set()  # hub ids this process has found loadable (reachable, or in the cache)


def check_hub_model(model: str) -> None:
    """When ``model`` is a hub id, check before torch is imported that it can be loaded, exiting 2 with one line
    that says how to run offline when it cannot (:func:`graftbench.util.hub_access.hub_model_refusal`): an unreachable
    hub fails in a second, not after half a minute of retries. Asked once per hub id."""
    from ..util.hub_access import hub_model_refusal, looks_like_hub_id

    if model in _HUB_CHECKED or not looks_like_hub_id(model):
        return
    refusal = hub_model_refusal(model)
    if refusal is not None:
        fail(refusal)
    _HUB_CHECKED.add(model)


def refuse_random(model: str) -> None:
    """Exit 2 when ``model`` is a random-weights model (``random:``): no accuracy is ever reported for one."""
    from ..results.model_names import LABEL, is_random

    if is_random(model):
        fail(f"model '{model}' has {LABEL}: no accuracy is reported for one; use check-exact or bench with it")


def run_dtype(dtype: str, isa: str | None = None) -> str:
    """``--dtype`` as this invocation runs it: ``auto`` is float32 on the CPU and bfloat16 on CUDA for this
    invocation's ``--device`` (:func:`graftbench.engine.device.dtype_for`); another name is returned as given.
    ``--device auto`` asks torch whether it sees a GPU, so the instruction-set pin ``isa`` is applied first. On an
    engine whose runs all pin one dtype (llama.cpp: ``gguf``, the weights as the file stores them) it is that one.
    Exits 2 for a device that cannot be resolved."""
    from ..engine.device import AUTO_DTYPE, DeviceError, dtype_for

    pinned = engine_factory().pinned_dtype
    if pinned:
        return pinned
    if dtype == AUTO_DTYPE and _DEVICE["name"] == "auto":
        apply_isa(isa)  # before torch is imported
    try:
        return dtype_for(dtype, _DEVICE["name"])
    except DeviceError as exc:
        fail(str(exc))


def worker_dtype(dtype: str) -> str:
    """``--dtype`` for workers on other machines (``--executor ray``): resolved as :func:`run_dtype` when
    ``--device`` names a kind (``cpu``, ``cuda``), else ``auto``, which each worker resolves on its own machine.
    Imports no torch."""
    from ..engine.device import dtype_for

    return dtype if _DEVICE["name"] == "auto" else dtype_for(dtype, _DEVICE["name"])


def open_model(model: str, dtype: str, chunk_size: int, threads: int | None = None, isa: str | None = None,
               architecture_only: bool = False, engine: str | None = None, **pinned):
    """Load ``model`` on the engine ``engine`` (default: this invocation's ``--engine``, from
    :mod:`graftbench.engine.registry`) with this invocation's ``--device``, ``--kernels``, ``--kv-type`` and
    ``--flash-attn``, in ``dtype`` (``auto``: :func:`run_dtype`), and pin the config; ``pinned``: other
    :class:`graftbench.engine.base.EngineOptions` fields that replace the invocation's (a replay's recorded pin).
    An engine that takes ``--isa`` runs under this process's instruction-set pin, applied first (before torch is
    imported), and may load a hub id (checked first: :func:`check_hub_model`). Fails with one line when the engine
    does not take ``--isa`` and it was given, or the model cannot be loaded. A random-weights model (``random:``) is
    refused unless ``architecture_only`` (the commands that report no accuracy: ``check-exact``, ``bench``)."""
    from ..engine.base import EngineOpenError, EngineOptions
    from ..engine.device import DeviceError
    from ..engine.models import ModelError

    if not architecture_only:
        refuse_random(model)
    factory = engine_factory(engine)
    refuse_options_not_taken(factory.name)  # an option the engine would ignore, before anything loads
    takes_isa = "isa" in factory.options
    if isa is not None and not takes_isa:
        fail(f"--isa applies to engines run under this process's instruction-set pin; --engine {factory.name} "
             "runs as its build was compiled (its pin records the build's CPU features)")
    if takes_isa:
        check_hub_model(model)
        apply_isa(isa)  # before torch is imported
        quiet_transformers()
    try:
        options = EngineOptions(model=model, dtype=dtype if factory.pinned_dtype else run_dtype(dtype, isa),
                                chunk_size=chunk_size, threads=threads, device=_DEVICE["name"],
                                kernels=kernels_option(), kv_type=_ENGINE["kv_type"],
                                flash_attn=_ENGINE["flash_attn"])
        options = replace(options, **pinned) if pinned else options
        with console.status(factory.loading_text(options)):
            session = factory.open(options)
    except (ModelError, DeviceError, EngineOpenError, ValueError) as exc:
        fail(str(exc))
    console.print(session.describe(model), markup=False, highlight=False)
    return session


def load_problem_set(source: str, limit, id_field, problem_field, answer_field, solution_field):
    from ..problems.loading import load_problems
    from ..problems.types import ProblemSetError

    try:
        return load_problems(source, id_field=id_field, problem_field=problem_field, answer_field=answer_field,
                             solution_field=solution_field, limit=limit)
    except ProblemSetError as exc:
        fail(str(exc))


def progress_columns():
    return (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"))


def describe(sample_or_item) -> str:
    """The progress line's tail: a sample's own label, a deposit item's problem id, or a given text."""
    from ..results.samples import Sample

    if isinstance(sample_or_item, Sample):
        return sample_or_item.progress_label
    if isinstance(sample_or_item, str):
        return sample_or_item
    return sample_or_item.problem.id


@contextmanager
def progress(label: str, total: int, completed: int = 0):
    """A progress bar of ``total`` items starting at ``completed`` (a resumed run's recorded samples); yields the
    callback that advances it by one item and shows the item's label."""
    with Progress(*progress_columns(), console=console) as bar:
        task = bar.add_task(label, total=total, completed=completed, last="resumed" if completed else "")
        yield lambda item: bar.update(task, advance=1, last=describe(item))


@contextmanager
def stage_progress(n_problems: int | None = None):
    """A progress bar per flywheel stage, of ``total`` items when the stage gives one; otherwise deposit counts
    offered solutions (no total) and the others ``n_problems``."""
    with Progress(*progress_columns(), console=console) as bar:
        current = {}

        def on_stage(name: str, total: int | None = None) -> None:
            if total is None and name != "deposit":
                total = n_problems
            current["task"] = bar.add_task(name, total=total, last="")

        yield (lambda item: bar.update(current["task"], advance=1, last=describe(item))), on_stage


def model_label(model: str) -> str:
    """``model`` as a file or folder name part: an alias as it is (``qwen2.5-coder-0.5b`` keeps its dots), a hub
    id's or a folder's last part, a GGUF file's name without ``.gguf``; other characters become ``_``."""
    name = Path(model).name
    return re.sub(r"[^A-Za-z0-9._-]", "_", name[: -len(".gguf")] if name.endswith(".gguf") else name)


def name_list(text: str | None) -> list[str]:
    """The names of a comma-separated option, stripped, empty ones left out (``None``: none)."""
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def int_list(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"{name} must be comma-separated positive integers, got {text!r}")
    if not values or min(values) < 1:
        fail(f"{name} must be comma-separated positive integers, got {text!r}")
    return values


@contextmanager
def progress_bar(description: str, total: int):
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


def shard_problems(problems: list, spec: str | None) -> list:
    """The problems of shard ``spec`` (``i/N``; all when ``None``), in their order; a malformed spec exits 2."""
    from ..problems.shards import parse_shard, select

    try:
        shard = parse_shard(spec)
    except ValueError as exc:
        fail(str(exc))
    return [p for _, p in select(problems, shard)]
