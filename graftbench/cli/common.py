"""What every ``graftbench`` command shares: the console and small parse-and-print helpers (errors, the
instruction-set pin, opening a model from its :class:`graftbench.settings.ModelOptions`, loading a problem set,
progress bars). The shared options themselves are in :mod:`graftbench.cli.options`; this module keeps no state
between invocations.

Imports no torch: a command applies its instruction-set pin (:func:`apply_isa`) before anything imports torch.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..util.display_text import console_markup, console_text, visible
from ..settings import BenchSettings, EvalSettings, FlywheelSettings, ModelOptions

if TYPE_CHECKING:
    from ..programs.sandbox import Sandbox

EVAL, BENCH, FLYWHEEL = EvalSettings(), BenchSettings(), FlywheelSettings()
# The benchmark commands' default --out: a scratch folder git ignores. A result to commit goes to
# results/<kind of machine>/bench/ (graftbench.results.layout; `make bench CPU=<kind>` writes there).
BENCH_OUT = Path("bench-results")

# Width: the terminal's, else $COLUMNS, else 80 (rich's own rule); the tables are sized to fit 80 columns. No
# emoji codes: a ``:name:`` in untrusted text is shown as written.
console = Console(soft_wrap=True, emoji=False)


def engine_factory(name: str):
    """The engine ``name`` from :mod:`graftbench.engine.registry`. Raises
    :class:`graftbench.engine.registry.UnknownEngineError` naming it when it is unknown and
    :class:`graftbench.engine.base.EngineOpenError` when it cannot be imported (a missing extra)."""
    from ..engine.registry import get

    return get(name)


def require_capability(capability: str, what: str, name: str) -> None:
    """Raise :class:`graftbench.engine.base.CapabilityError` naming the engine and the capability when the engine
    ``name`` lacks ``capability`` (:func:`graftbench.engine.base.require`); call it before any model loads."""
    from ..engine.base import require

    require(engine_factory(name), capability, what)


def refuse_options_not_taken(engine: str) -> None:
    """Exit 2 when the running command was given an option the engine ``engine`` does not take
    (:func:`graftbench.cli.invocation.options_refusal` says which, and which it takes); call it before the model
    loads."""
    from .invocation import options_refusal

    refusal = options_refusal(engine)
    if refusal is not None:
        fail(refusal)


def fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` (the message shown as text: it may quote untrusted input, see
    :func:`graftbench.util.display_text.console_markup`) and exit with ``code``."""
    console.print(f"[red]error:[/red] {console_markup(message)}")
    raise typer.Exit(code)


def os_error_text(exc: BaseException, what: str | None = None) -> str:
    """``exc`` as one error line (:func:`graftbench.eval.errors.error_text`)."""
    from ..eval.errors import error_text

    return error_text(exc, what)


def announce_sandbox(mode: str) -> Sandbox | None:
    """In program mode, open the sandbox before the model loads, print how programs will be contained and return it
    (:class:`graftbench.programs.sandbox.Sandbox`, for the run to pass to what runs programs; ``None`` in another
    mode). Exit 2 for an unknown mode; raises :class:`graftbench.programs.sandbox.SandboxError`, one line naming
    what is missing and how to get it, when the sandbox cannot be built (programs never run uncontained)."""
    from ..settings import MODES

    if mode not in MODES:
        fail(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if mode != "program":
        return None
    from ..programs.sandbox import open_sandbox

    sandbox = open_sandbox()  # SandboxError: what is missing and how to get it
    console.print(f"program sandbox: [green]{sandbox.isolation.description}[/green]", markup=True, highlight=False)
    return sandbox


def quiet_transformers() -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def apply_isa(isa: str | None) -> None:
    """Apply the instruction-set pin ``isa`` (``None``: ``$GRAFTBENCH_ISA``, else ``native``) before torch is
    imported; raises :class:`graftbench.util.isa.IsaError` for one this CPU or process cannot take."""
    from ..util.isa import ENV_VAR, apply

    apply(isa or os.environ.get(ENV_VAR) or "native")


def check_hub_model(model: str) -> None:
    """When ``model`` is a hub id, check before torch is imported that it can be loaded, exiting 2 with one line
    that says how to run offline when it cannot (:func:`graftbench.util.hub_access.hub_model_refusal`): an unreachable
    hub fails in a second, not after half a minute of retries."""
    from ..util.hub_access import hub_model_refusal, looks_like_hub_id

    refusal = hub_model_refusal(model) if looks_like_hub_id(model) else None
    if refusal is not None:
        fail(refusal)


def refuse_random(model: str) -> None:
    """Exit 2 when ``model`` is a random-weights model (``random:``): no accuracy is ever reported for one."""
    from ..results.model_names import LABEL, is_random

    if is_random(model):
        fail(f"model '{model}' has {LABEL}: no accuracy is reported for one; use check-exact or bench with it")


def open_model(options: ModelOptions, *, architecture_only: bool = False, pinned: dict | None = None):
    """Load ``options.model`` on the engine ``options.engine`` (:mod:`graftbench.engine.registry`) with the device,
    kernels, KV cache type and flash attention ``options`` gives, in its dtype (``auto``:
    :func:`graftbench.scale.eval_job.run_dtype`), and
    pin the config; ``pinned``: other :class:`graftbench.engine.base.EngineOptions` fields that replace those of
    ``options`` (a replay's recorded pin). An engine that takes ``--isa`` runs under this process's instruction-set
    pin ``options.isa``, applied first (before torch is imported), and may load a hub id (checked first:
    :func:`check_hub_model`). Fails with one line when the engine does not take ``--isa`` and it was given, or the
    model cannot be loaded. A random-weights model (``random:``) is refused unless ``architecture_only`` (the
    commands that report no accuracy: ``check-exact``, ``bench``)."""
    from ..engine.base import EngineOpenError, EngineOptions
    from ..engine.device import DeviceError
    from ..engine.models import ModelError
    from ..scale.eval_job import run_dtype

    if not architecture_only:
        refuse_random(options.model)
    factory = engine_factory(options.engine)
    refuse_options_not_taken(factory.name)  # an option the engine would ignore, before anything loads
    takes_isa = "isa" in factory.options
    if options.isa is not None and not takes_isa:
        fail(f"--isa applies to engines run under this process's instruction-set pin; --engine {factory.name} "
             "runs as its build was compiled (its pin records the build's CPU features)")
    if takes_isa:
        check_hub_model(options.model)
        apply_isa(options.isa)  # before torch is imported
        quiet_transformers()
    try:
        dtype = options.dtype if factory.pinned_dtype else run_dtype(options)
        engine_options = EngineOptions(**{**options.engine_fields(), "dtype": dtype, **(pinned or {})})
        with console.status(console_text(factory.loading_text(engine_options))):  # names the model: data
            session = factory.open(engine_options)
    except (ModelError, DeviceError, EngineOpenError, ValueError) as exc:
        fail(str(exc))
    console.print(visible(session.describe(options.model)), markup=False, highlight=False)
    return session


def load_problem_set(source: str, limit, id_field, problem_field, answer_field, solution_field):
    """The problems of ``source`` (:func:`graftbench.problems.loading.load_problems`); raises
    :class:`graftbench.problems.types.ProblemSetError` naming the source and what is wrong."""
    from ..problems.loading import load_problems

    return load_problems(source, id_field=id_field, problem_field=problem_field, answer_field=answer_field,
                         solution_field=solution_field, limit=limit)


def progress_columns():
    """The columns of a progress line: the stage (markup: the command's own words), the bar, the count, the time,
    and the last item's label (:func:`describe`), shown as text, never as markup."""
    return (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[last]}", markup=False))


def describe(sample_or_item) -> str:
    """The progress line's tail: a sample's own label, a deposit item's problem id, or a given text, with its
    controls made visible (:func:`graftbench.util.display_text.visible`: a problem id is untrusted text, and the
    column shows it without parsing markup)."""
    from ..results.samples import Sample

    if isinstance(sample_or_item, Sample):
        return visible(sample_or_item.progress_label)
    if isinstance(sample_or_item, str):
        return visible(sample_or_item)
    return visible(sample_or_item.problem.id)


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
