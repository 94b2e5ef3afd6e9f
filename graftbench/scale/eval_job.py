"""One ``solve`` or ``eval`` job from its request, as the command line runs it: the pre-flight before any model loads
(the hub, the store, the run name, a resume with other settings, a finished run verified and left as it is), the
executor (this process loads the model, or Ray workers each load it: :mod:`graftbench.scale.ray_executor`), the
store-pin check once the pin is known (:func:`graftbench.eval.preflight.preflight`), then the run
(:func:`graftbench.eval.eval_run.run_eval`).

Every refusal is a typed error of :mod:`graftbench.eval.errors` (or a library error the caller maps the same way:
a store, run folder, problem set or device that cannot be used), raised before anything is written where it can be
known then. The caller only parses and prints: it gives the request and its :class:`JobHooks` (how to open a model,
where notes and progress go). It lives beside the Ray executor because choosing it is part of the job; imports
neither torch nor Ray.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Callable

from ..engine.base import RAY
from ..eval.errors import Interrupted, NotVerified, Refused, WriteFailed, error_text
from ..programs.sandbox import Sandbox
from ..settings import CERTIFIED_KERNELS, EvalSettings, ModelOptions
from .dispatch import EXECUTORS, RAY_EXTRA, ClusterOptions, DispatchError


@dataclass(frozen=True)
class EvalRequest:
    """What one ``solve`` or ``eval`` asks for: ``command`` (``solve`` or ``eval``), the ``model`` and how it is
    opened, the problem ``source`` (as ``--problems`` names it), the ``run`` name under ``runs_dir``, the decoding
    and graft ``settings``, the ``store`` to graft from (``None`` for the baseline; ``new_store`` creates an empty
    one), the Ray ``cluster`` (``None``: this process runs it), the ``command_options`` the manifest records, and
    in program mode the ``sandbox`` its programs run in when this process runs it (``None``: the run opens one,
    :func:`graftbench.programs.sandbox.open_sandbox`; each Ray worker opens its own)."""

    command: str
    model: ModelOptions
    source: str
    run: str
    runs_dir: str
    settings: EvalSettings
    store: str | None = None
    new_store: bool = False
    cluster: ClusterOptions | None = None
    command_options: dict = field(default_factory=dict)
    sandbox: Sandbox | None = None


@dataclass(frozen=True)
class JobHooks:
    """How the caller takes part: ``open_session(options)`` loads the model (and may print that it does);
    ``on_note(text)`` shows a note (untrusted text: data); ``progress(label, total, completed)`` is a context
    manager yielding the per-sample callback; ``on_event(line)`` shows a Ray driver's line."""

    open_session: Callable[[ModelOptions], object]
    on_note: Callable[[str], None]
    progress: Callable[[str, int, int], AbstractContextManager]
    on_event: Callable[[str], None]


def cluster_options(engine: str, executor: str, workers: int | None, threads: int, address: str | None,
                    problem_timeout: float) -> ClusterOptions | None:
    """The Ray options of ``--executor ray`` on the engine ``engine`` (``None`` for ``process``). Raises
    :class:`Refused` for an unknown executor, Ray options without ``--executor ray``, or Ray not installed, and
    :class:`graftbench.engine.base.CapabilityError` for an engine that does not run on Ray workers."""
    from importlib.util import find_spec

    from ..engine.base import require
    from ..engine.registry import get

    if executor not in EXECUTORS:
        raise Refused(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    default = ClusterOptions()
    if executor == "process":
        if workers is not None or address is not None or problem_timeout != default.problem_timeout_s:
            raise Refused("--workers, --address and --problem-timeout apply to --executor ray")
        return None
    require(get(engine), RAY, "--executor ray")
    if find_spec("ray") is None:
        raise Refused(f"--executor ray needs Ray, which is not installed here: {RAY_EXTRA}")
    return ClusterOptions(workers=workers, threads=threads, address=address, problem_timeout_s=problem_timeout)


def run_dtype(options: ModelOptions) -> str:
    """``options.dtype`` as a run in this process uses it: ``auto`` is float32 on the CPU and bfloat16 on CUDA for
    ``options.device`` (:func:`graftbench.engine.device.dtype_for`; ``--device auto`` asks torch, so the
    instruction-set pin is applied first); on an engine whose runs all pin one dtype, that one. Raises
    :class:`graftbench.engine.device.DeviceError` for a device that cannot be resolved and
    :class:`graftbench.util.isa.IsaError` for a pin this CPU cannot run."""
    from ..engine.device import AUTO_DTYPE, dtype_for
    from ..engine.registry import get
    from ..util.isa import ENV_VAR, apply

    pinned = get(options.engine).pinned_dtype
    if pinned:
        return pinned
    if options.dtype == AUTO_DTYPE and options.device == "auto":
        apply(options.isa or os.environ.get(ENV_VAR) or "native")  # before torch is imported
    return dtype_for(options.dtype, options.device)


def worker_dtype(options: ModelOptions) -> str:
    """``options.dtype`` for workers on other machines: resolved as :func:`run_dtype` when ``options.device``
    names a kind (``cpu``, ``cuda``), else ``auto``, which each worker resolves on its own machine. No torch."""
    from ..engine.device import dtype_for

    return options.dtype if options.device == "auto" else dtype_for(options.dtype, options.device)


def refuse_random(model: str) -> None:
    """Raise :class:`Refused` when ``model`` is a random-weights model (``random:``): no accuracy is ever reported
    for one."""
    from ..results.model_names import LABEL, is_random

    if is_random(model):
        raise Refused(f"model '{model}' has {LABEL}: no accuracy is reported for one; use check-exact or bench with "
                      "it")


def refuse_unloadable_hub(model: str) -> None:
    """Raise :class:`Refused` when ``model`` is a hub id this machine cannot load (the hub unreachable and the model
    not in the hub cache); the message says how to run offline. Imports no torch."""
    from ..util.hub_access import hub_model_refusal, looks_like_hub_id

    refusal = hub_model_refusal(model) if looks_like_hub_id(model) else None
    if refusal is not None:
        raise Refused(refusal)


def finished(request: EvalRequest, problems: list):
    """When ``request.run`` is a finished run of this request (:mod:`graftbench.results.finished`), its
    :class:`graftbench.results.finished.FinishedRun`, verified, without loading a model or writing anything;
    ``None`` when there is work to do. Raises :class:`NotVerified` when it is complete but does not verify."""
    from ..engine.registry import get
    from ..results.finished import Request, finished_run
    from ..util.isa import ENV_VAR

    options = request.model
    fixed = get(options.engine).fixed_pin()  # what every run of the engine pins (llama.cpp: its dtype and build)
    dtype, isa = fixed.get("dtype", options.dtype), fixed.get("isa", options.isa)
    asked = Request(request.command, options.model, dtype, options.chunk_size,
                    isa or os.environ.get(ENV_VAR) or "native", request.settings)
    done = finished_run(request.runs_dir, request.run, asked, problems, request.store if request.settings.graft else None)
    if done is not None and done.mismatches:
        raise NotVerified(f"run '{request.run}' is complete, but its manifest {done.path} does not verify "
                          f"({len(done.mismatches)} mismatches; the first: {done.mismatches[0]}); nothing was run or "
                          f"written: `graftbench verify-manifest {done.path}` lists them")
    return done


def before_load(request: EvalRequest, problems: list) -> EvalRequest:
    """The pre-flight of ``request`` before any model loads; returns it with its dtype resolved (per device, or left
    to Ray workers). Raises :class:`Refused` for a model this run cannot report on or load, a ``--kernels`` Ray workers do
    not load, a graft store that does not exist (without ``new_store``), and
    :class:`graftbench.results.runs.RunError` for a run name that is not a plain folder name or a run folder
    holding other settings."""
    from ..eval.run_identity import check_resume_before_load

    refuse_random(request.model.model)  # Ray workers load the model themselves: refused here too
    if request.cluster is None:
        refuse_unloadable_hub(request.model.model)  # first: what follows imports torch
    elif request.model.kernels != CERTIFIED_KERNELS:
        raise Refused(f"--kernels {request.model.kernels} runs with --executor process only (Ray workers load the "
                      "certified kernels)")
    dtype = run_dtype(request.model) if request.cluster is None else worker_dtype(request.model)
    request = replace(request, model=replace(request.model, dtype=dtype))
    if request.settings.graft and not request.new_store:
        _require_store(request.store)  # before the model loads: a mistyped --store fails at once
    check_resume_before_load(request.runs_dir, request.run, request.command, request.model.model, problems,
                             request.settings)  # checks the name too
    return request


def _require_store(store: str) -> None:
    from ..store.index import StoreError
    from ..store.open import require_store

    try:
        require_store(store)
    except StoreError as exc:
        raise Refused(str(exc) + (" or pass --new-store to start an empty one" if exc.missing else "")) from exc


def run_job(request: EvalRequest, problems: list, hooks: JobHooks):
    """Run ``request`` on ``problems``: :func:`before_load`, then a finished run verified and returned as it is
    (a :class:`graftbench.results.finished.FinishedRun`), else :func:`execute` (a
    :class:`graftbench.eval.eval_run.RunResult`). Raises what they raise."""
    request = before_load(request, problems)
    done = finished(request, problems)
    return done if done is not None else execute(request, problems, hooks)


def execute(request: EvalRequest, problems: list, hooks: JobHooks):
    """Load the model (this process) or start the workers (Ray), check the store's pins for a graft run, and run
    ``request``'s decoding ``request.settings`` over ``problems`` with progress. Raises :class:`Refused` (a store, run
    folder, sandbox or strict graft that cannot go on; nothing more is run), :class:`WriteFailed` (a full or
    read-only runs folder: the samples so far are kept) and :class:`Interrupted`; :class:`NotVerified` is the
    caller's to raise from the result's ``certificate_mismatches`` once it has shown them. The code version is read
    before the model loads and recorded as the manifest's ``environment.code``."""
    from ..eval.evaluate import StrictFallbackError
    from ..eval.run_identity import samples_recorded, shard_size
    from ..programs.sandbox import SandboxError
    from ..results.runs import RunError
    from ..store.index import StoreError
    from ..util.durable import StorageError
    from ..util.provenance import code_version

    code = code_version()  # before the model loads: the code that starts the run is what its manifest names
    run_eval = _executor(request, hooks)  # loads the model here, or leaves it to workers
    settings, folder = request.settings, Path(request.runs_dir) / request.run
    if settings.graft and request.cluster is None:  # over Ray: the driver's pre-flight
        _check_store_pins(request, run_eval.args[0].config, hooks)
    try:
        with hooks.progress(request.command, shard_size(problems, settings) * settings.samples,
                            samples_recorded(request.runs_dir, request.run, problems, settings)) as advance:
            return run_eval(problems, request.source, request.run, settings, command=request.command,
                            runs_root=request.runs_dir, store_root=request.store if settings.graft else None,
                            on_sample=advance, new_store=request.new_store, command_options=request.command_options,
                            code=code)
    except StoreError as exc:
        raise Refused(str(exc) + (" or pass --new-store to start an empty one" if exc.missing else "")) from exc
    except DispatchError as exc:
        raise Refused(str(exc)) from exc
    except StorageError as exc:  # a full or read-only runs folder: the samples appended before it stay
        raise WriteFailed(f"{error_text(exc)}; the samples finished so far are kept in {folder} and the same "
                          "command resumes the run") from exc
    except (RunError, StrictFallbackError, OSError, SandboxError) as exc:  # a graft opens its store read-only
        raise Refused(error_text(exc, f"the run folder {folder}")) from exc
    except KeyboardInterrupt as exc:
        raise Interrupted(f"interrupted: the samples finished so far are kept in {folder}; the same command "
                          "resumes the run") from exc


def _executor(request: EvalRequest, hooks: JobHooks):
    """What runs the job: :func:`graftbench.eval.eval_run.run_eval` with the model loaded in this process, or with
    a cluster :func:`graftbench.scale.ray_executor.run_eval_ray` (each worker loads the model; this process does
    not). Raises :class:`Refused` for an instruction-set pin or a device Ray workers cannot take."""
    from ..util.isa import ENV_VAR, IsaError, check_name

    options = request.model
    if request.cluster is None:
        from ..eval.eval_run import run_eval

        return partial(run_eval, hooks.open_session(options), sandbox=request.sandbox)
    from .ray_executor import WorkerPin, run_eval_ray, worker_gpus

    try:
        isa = check_name(options.isa or os.environ.get(ENV_VAR) or "native")
        worker_gpus(options.device)  # cuda:N is refused before Ray starts
    except (IsaError, DispatchError) as exc:
        raise Refused(str(exc)) from exc
    pin = WorkerPin(options.model, options.dtype, options.chunk_size, isa, request.cluster.threads, options.device,
                    options.engine)
    return partial(run_eval_ray, pin=pin, options=request.cluster, on_event=hooks.on_event)


def _check_store_pins(request: EvalRequest, config, hooks: JobHooks) -> None:
    """Before a graft run in this process starts: when the store holds nothing it can graft (no artifact under its
    pin, or none written on this kind of CPU), each note to ``hooks.on_note``; under ``--strict`` a
    :class:`graftbench.eval.preflight.PreflightError` (a :class:`Refused`)."""
    for note in store_pin_notes(request.store, config, request.settings):
        hooks.on_note(note)


def store_pin_notes(store: str, config, settings: EvalSettings) -> list[str]:
    """:func:`graftbench.eval.preflight.preflight` for a session's pinned ``config`` on this kind of CPU. Raises
    :class:`graftbench.eval.preflight.PreflightError` under ``settings.strict`` when there is a note, and
    :class:`graftbench.store.index.StoreError` for a damaged store."""
    from ..eval.preflight import preflight
    from ..store.writers import this_kind

    return preflight(store, config.to_dict(), config.fingerprint, this_kind(), settings)
