"""``--executor ray``: a solve or eval run over Ray actors, each loading the model once, with the driver writing the
run folder exactly as one process does.

Each worker (:class:`ProblemWorker`, a Ray actor reserving ``threads`` CPUs, and a GPU under ``--device cuda``)
applies the run's instruction-set pin, loads the model with the run's pin (model, dtype, chunk size, threads) on the
run's ``--device`` and opens the run's store read-only (the path or URL the run was given, through
:func:`graftbench.store.open.open_store`), then runs the problems the driver hands it, one at a time, with
:func:`graftbench.eval.evaluate.run_problem`, and returns their samples as JSON.

The driver (:func:`run_eval_ray`) holds the run folder's lock, takes the pin of the first worker (in worker order)
that loads the model as the run's pin, and refuses (stops, and never hands a problem to) any worker whose pin's
fingerprint differs: on a cluster of unlike machines, no sample of another pin enters the run. It appends each
sample durably to ``samples.jsonl`` as it arrives (:meth:`graftbench.results.runs.RunDir.append`), once per (problem,
sample index) (:class:`graftbench.scale.dispatch.Ledger`): a worker that dies or is lost gives its problem back to the
queue, a replacement worker is started, and a sample that arrives for a key already recorded is ignored. A resumed
run skips the problems recorded, as a single-process run does; either executor can resume the other's run (the
executor is not part of ``run.json``). At the end it writes the manifest with
:func:`graftbench.eval.run_manifest.eval_manifest`: problems and samples in the set's order, as one process writes them,
plus an ``executor`` section (workers started, refused and lost, and the workers' environments).

A graft run is held to the single process's pre-flight (:mod:`graftbench.eval.preflight`), in the driver: before any
worker starts, the store's recorded pins against the fields of the workers' pin the driver knows (:func:`known_pin`:
threads, ``--isa``, chunk size, dtype, device); once the first worker has loaded the model, against its whole pin and
its kind of CPU, before any problem is handed out. A store that holds nothing the workers can graft is a note (an
``on_event`` line), or under ``--strict`` a :class:`graftbench.eval.preflight.PreflightError`. Each worker refuses an
artifact written on another kind of CPU than its own (:func:`graftbench.eval.evaluate.check_kind`), as one process
does.

Ray is imported only here and only when a run asks for it (``pip install 'graftbench[ray]'``). Without
``address`` a local cluster is started for the run on the loopback interface (nothing listens on the network) and
shut down at the end; a process already connected to Ray (``ray.is_initialized()``) keeps its connection.
Importing this module imports neither Ray nor torch: a worker applies its pin before torch is first imported.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

from ..engine.registry import DEFAULT_ENGINE
from ..eval.eval_run import DispatchReport
from .dispatch import RAY_EXTRA, ClusterOptions, DispatchError, Ledger
from ..problems.types import Problem
from ..settings import EvalSettings

# Ray makes a single-node cluster listen on the loopback interface only when this is off (it is meant for Windows
# and macOS, where Ray clusters are not supported); read when ray is first imported.
_LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOCAL_OBJECT_STORE_BYTES = 256 << 20  # a local cluster's object store: samples are small


@dataclass(frozen=True)
class WorkerPin:
    """What each worker loads: ``model`` (alias, path or hub id, as for one process), ``dtype`` (``auto``: float32
    on the CPU, bfloat16 on CUDA, resolved by the worker), ``chunk_size`` (tokens), ``isa`` (``native`` or ``avx2``,
    :mod:`graftbench.util.isa`), torch ``threads``, ``device`` (``--device``: ``auto`` resolved on the worker's
    machine; ``cuda`` reserves one GPU per worker, :func:`worker_gpus`) and ``engine`` (a name in
    :mod:`graftbench.engine.registry` whose engine declares :data:`graftbench.engine.base.RAY`). Together with the
    worker's machine and libraries they make its :class:`graftbench.engine.pin.PinnedConfig`."""

    model: str
    dtype: str
    chunk_size: int
    isa: str
    threads: int
    device: str = "auto"
    engine: str = DEFAULT_ENGINE


def known_pin(pin: WorkerPin) -> dict:
    """The fields of the pin (:meth:`graftbench.engine.pin.PinnedConfig.to_dict`) every worker loading ``pin`` will
    have, known before any worker starts: the model, threads, ``isa`` and chunk size, and the dtype and device kind
    where they are not ``auto`` (resolved on the worker's machine)."""
    known = {"model": pin.model, "threads": pin.threads, "isa": pin.isa, "chunk_size": pin.chunk_size}
    if pin.dtype != "auto":
        known["dtype"] = pin.dtype
    if pin.device != "auto":
        known["device"] = pin.device.split(":")[0]
    return known


def worker_gpus(device: str) -> int:
    """GPUs each worker reserves from Ray for ``--device`` ``device``: one for ``cuda`` (Ray hands each worker its
    own GPU, which the worker sees as ``cuda:0``), none for ``cpu`` and ``auto`` (a worker under ``auto`` runs on
    the first GPU its machine shows it, else the CPU). Raises :class:`DispatchError` for ``cuda:N`` with N > 0 (a
    worker sees only the GPU Ray gives it) and :class:`graftbench.engine.device.DeviceError` for a bad name."""
    from ..engine.device import check_name

    check_name(device)
    if device.startswith("cuda:") and device != "cuda:0":
        raise DispatchError(f"--device {device} with --executor ray: Ray gives each worker one GPU, which it sees "
                            "as cuda:0; pass --device cuda")
    return 1 if device.startswith("cuda") else 0


@dataclass(frozen=True)
class WorkerFaults:
    """Test hooks of one worker: ``crash_after`` problems run, the worker's process exits (as a killed worker
    does) when handed the next one; ``hang_after`` problems run, it sleeps ``hang_s`` seconds on the next one (as a
    hung worker does) and then runs it; ``threads`` loads the model with another thread count (another pin)."""

    crash_after: int | None = None
    hang_after: int | None = None
    hang_s: float = 3600.0
    threads: int | None = None


@dataclass(frozen=True)
class DriverHooks:
    """Test hooks of the driver: each problem of ``retry_after_record`` is run once more after its samples were
    recorded, as when Ray reports an error for a task that did run; ``faults`` maps a worker's index to its
    :class:`WorkerFaults`."""

    retry_after_record: frozenset[str] = frozenset()
    faults: dict[int, WorkerFaults] = field(default_factory=dict)


def import_ray(local: bool):
    """Import Ray (with ``local``: a cluster this process starts listens on the loopback interface only). Raises
    :class:`DispatchError` naming ``pip install 'graftbench[ray]'`` when Ray is not installed."""
    import sys

    if local and "ray" not in sys.modules:
        os.environ.setdefault(_LOOPBACK_ONLY, "0")
    try:
        import ray
    except ImportError as exc:
        raise DispatchError(f"--executor ray needs Ray, which is not installed here ({exc}): {RAY_EXTRA}") from None
    return ray


class ProblemWorker:
    """One worker: the model loaded once under ``pin``, the store at ``store_root`` opened read-only when the run
    grafts, and :func:`graftbench.eval.evaluate.run_problem` for each problem handed to it. ``cwd``: the driver's
    working folder, entered when this machine has it (so relative model and store paths mean the same). Raises
    :class:`graftbench.util.isa.IsaError`, :class:`graftbench.engine.device.DeviceError` (a CUDA device the worker's
    machine lacks), :class:`graftbench.engine.base.CapabilityError` (an engine without Ray workers),
    :class:`graftbench.engine.models.ModelError` or
    :class:`graftbench.store.folder.StoreError` when it cannot start (the driver reports it as refused)."""

    def __init__(self, pin: WorkerPin, settings: EvalSettings, store_root: str | None, cwd: str | None,
                 faults: WorkerFaults = WorkerFaults()):
        if cwd and os.path.isdir(cwd):
            os.chdir(cwd)
        from ..util.allocator import set_allocator_for_grafts
        from ..util.isa import apply

        apply(pin.isa)  # before torch is imported in this process
        set_allocator_for_grafts()  # as the command line does in the driver
        from ..util.energy import EnergyMeter
        from ..engine.base import RAY, EngineOptions, require
        from ..engine.device import resolve
        from ..engine.registry import get
        from ..store.open import open_store

        factory = get(pin.engine)
        require(factory, RAY, "a Ray worker")
        device = resolve(pin.device)
        self.session = factory.open(EngineOptions(model=pin.model, dtype=pin.dtype, chunk_size=pin.chunk_size,
                                                  threads=faults.threads or pin.threads, device=device))
        self.settings = settings
        self.store = open_store(store_root, readonly=True) if settings.graft and store_root is not None else None
        self.meter = EnergyMeter(device=device)
        self.faults = faults
        self.runs = 0
        self.sandbox = None  # program mode: this machine's sandbox, opened for the first problem (run)

    def describe(self) -> dict:
        """The worker's pin (``config``, ``config_fingerprint``), energy method and environment (Python, OS,
        CPU: no host name)."""
        from ..results.manifest import environment

        config = self.session.config
        return {"config": config.to_dict(), "config_fingerprint": config.fingerprint,
                "energy": self.meter.describe(), "environment": environment()}

    def run(self, problem: Problem, budget: int) -> list[dict]:
        """Run ``problem`` with a decode budget of ``budget`` tokens per sample; its samples as JSON, in sample
        order. In program mode the programs run in this machine's sandbox, opened on the first call
        (:func:`graftbench.programs.sandbox.open_sandbox`). Raises what :func:`graftbench.eval.evaluate.run_problem`
        raises, and :class:`graftbench.programs.sandbox.SandboxError` when the sandbox cannot be built here."""
        from ..eval.evaluate import run_problem
        from ..programs.sandbox import open_sandbox

        if self.faults.crash_after is not None and self.runs >= self.faults.crash_after:
            os._exit(70)  # the test hook: die as a killed worker does, with a problem in hand
        if self.faults.hang_after is not None and self.runs >= self.faults.hang_after:
            time.sleep(self.faults.hang_s)  # the test hook: hang with a problem in hand (the driver should kill it)
        if self.settings.mode == "program" and self.sandbox is None:
            self.sandbox = open_sandbox()
        samples = run_problem(self.session, problem, self.settings, budget, self.store, self.meter, self.sandbox)
        self.runs += 1
        return [sample.to_json() for sample in samples]


def pin_difference(reference: dict, other: dict) -> str:
    """The pin fields in which ``other`` differs from ``reference`` (``threads 2 against 1``, ...)."""
    from ..results.fingerprint import UNPINNED_FIELDS

    names = sorted(k for k in set(reference) | set(other) if k not in UNPINNED_FIELDS
                   and reference.get(k) != other.get(k))
    return ", ".join(f"{k} {other.get(k)!r} against {reference.get(k)!r}" for k in names) or "fingerprint"


class _Cluster:
    """Ray for one run: joined at ``options.address``, started locally, or the connection this process has."""

    def __init__(self, options: ClusterOptions, on_event: Callable[[str], None]):
        self.options, self.on_event = options, on_event
        self.ray = import_ray(local=options.address is None)
        self.started = False

    def free_cpus(self) -> float:
        """CPUs free for workers: all of a local cluster this run started, else what Ray reports available."""
        if self.started:
            return float(self.options.local_cluster_cpus())
        return self.ray.available_resources().get("CPU", 1.0)

    def __enter__(self):
        ray = self.ray
        if ray.is_initialized():
            return self
        quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        try:
            if self.options.address is not None:
                ray.init(address=self.options.address, **quiet)
                self.on_event(f"ray: joined the cluster at {self.options.address}")
            else:
                cpus = self.options.local_cluster_cpus()
                ray.init(num_cpus=cpus, object_store_memory=LOCAL_OBJECT_STORE_BYTES, **quiet)
                self.on_event(f"ray: started a local cluster with {cpus} CPUs for this run")
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"join the Ray cluster at {self.options.address}" if self.options.address else \
                "start a local Ray cluster"
            raise DispatchError(f"could not {where}: {exc}") from exc
        self.started = True
        return self

    def __exit__(self, *exc) -> None:
        if self.started:
            self.ray.shutdown()


class _Call(NamedTuple):
    """A run() call in flight: the worker's index, the problem's position in the run, and the
    ``time.monotonic()`` second by which it must return (``None``: no limit)."""

    index: int
    position: int
    deadline: float | None


class _Workers:
    """The run's actors by index, the calls in flight, and the report."""

    def __init__(self, ray, pin: WorkerPin, settings: EvalSettings, store_root: str | None, hooks: DriverHooks,
                 report: DispatchReport):
        self.ray, self.pin, self.settings, self.store_root, self.hooks = ray, pin, settings, store_root, hooks
        self.report = report
        self.remote = ray.remote(ProblemWorker)
        self.actors: dict[int, object] = {}
        self.loading: dict[object, int] = {}  # describe() call -> worker index
        self.running: dict[object, _Call] = {}  # run() call -> what it runs and by when

    def dispatch(self, index: int, problem: Problem, position: int, timeout_s: float | None) -> None:
        """Send ``problem`` (at ``position`` in the run) to worker ``index``; it must return within ``timeout_s``
        seconds (``None``: no limit)."""
        ref = self.actors[index].run.remote(problem, self.settings.max_new_tokens)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.running[ref] = _Call(index, position, deadline)

    def overdue(self, now: float) -> list[object]:
        """The run() calls in flight past their deadline at ``now`` (``time.monotonic()`` seconds)."""
        return [ref for ref, call in self.running.items() if call.deadline is not None and call.deadline <= now]

    def wait_s(self, now: float) -> float | None:
        """Seconds until the earliest deadline of a call in flight (``None``: no deadline to wait for)."""
        deadlines = [call.deadline for call in self.running.values() if call.deadline is not None]
        return max(0.0, min(deadlines) - now) if deadlines else None

    def start(self) -> int:
        index = self.report.started
        actor = self.remote.options(num_cpus=self.pin.threads, num_gpus=worker_gpus(self.pin.device), max_restarts=0,
                                    max_concurrency=1).remote(
            self.pin, self.settings, self.store_root, os.getcwd(), self.hooks.faults.get(index, WorkerFaults()))
        self.actors[index] = actor
        self.loading[actor.describe.remote()] = index
        self.report.started += 1
        return index

    def stop(self, index: int) -> None:
        actor = self.actors.pop(index, None)
        if actor is not None:
            self.ray.kill(actor)

    def stop_all(self) -> None:
        for index in list(self.actors):
            self.stop(index)


def _cause(exc: BaseException) -> BaseException:
    """The exception a worker raised, out of Ray's wrapper (``exc`` itself when it wraps none)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def run_eval_ray(problems: list[Problem], source: str, run_name: str, settings: EvalSettings, *, pin: WorkerPin,
                 options: ClusterOptions = ClusterOptions(), command: str = "eval", runs_root: str | Path = "runs",
                 store_root: str | Path | None = None, on_sample: Callable | None = None, new_store: bool = False,
                 on_event: Callable[[str], None] | None = None, hooks: DriverHooks = DriverHooks(),
                 command_options: dict | None = None, code: dict | None = None):
    """:func:`graftbench.eval.eval_run.run_eval` over Ray workers: open (or resume) ``runs/<run_name>`` holding its
    lock, run every problem not yet recorded (of ``settings.shard`` only, when given) on the workers, append each
    sample as it arrives (``on_sample`` is called with each :class:`~graftbench.results.samples.Sample`), write the
    manifest and release the lock; ``on_event`` receives one line per cluster event (started, worker refused or lost);
    ``command_options`` and ``code`` (the code version, read here when ``None``) as
    :func:`~graftbench.eval.eval_run.run_eval` records them.

    Returns a :class:`~graftbench.eval.eval_run.RunResult` whose ``dispatch`` is the
    :class:`~graftbench.eval.eval_run.DispatchReport`. For greedy decoding its samples equal a single-process run's
    under the same pin in every hash, verdict and token count (only the measured seconds and joules differ).

    Raises :class:`DispatchError` when Ray is missing, the cluster cannot be joined or started, no worker loads the
    model within ``options.ready_timeout_s`` seconds or with the run's pin, every worker is lost, a problem loses
    ``options.max_losses`` workers, or ``settings.token_budget`` is set (a run-wide budget is spent in problem
    order, which workers running at once do not have); :class:`graftbench.results.runs.RunError` and
    :class:`graftbench.store.folder.StoreError` as :func:`~graftbench.eval.eval_run.run_eval` does;
    :class:`graftbench.eval.preflight.PreflightError` under ``settings.strict`` when the store holds nothing the
    workers can graft (before any worker starts where the store's writer records tell, else before any problem is
    handed out); and what a worker's :func:`~graftbench.eval.evaluate.run_problem` raises (e.g.
    :class:`~graftbench.eval.evaluate.StrictFallbackError`).
    """
    if settings.token_budget is not None:
        raise DispatchError("a token budget for the whole run is spent in problem order and cannot be split over "
                            "workers: give --max-new-tokens per problem, or run with --executor process")
    from ..results.manifest import write_manifest
    from ..results.runs import RunDir
    from ..results.samples import Sample
    from ..problems.shards import parse_shard, select
    from ..store.open import open_store
    from ..eval.preflight import preflight
    from ..store.writers import kind_of
    from ..eval.eval_run import RunResult
    from ..eval.run_manifest import eval_manifest, options_section
    from ..eval.run_identity import run_record
    from ..util.provenance import code_version

    code = code if code is not None else code_version()  # at the start: the checkout may move during the run
    event = on_event or (lambda _: None)
    run = RunDir(runs_root, run_name)
    chosen = [p for _, p in select(problems, parse_shard(settings.shard))]
    report = DispatchReport()
    with run:
        run.lock()  # first: a run that another process holds is refused before anything else
        store = open_store(store_root, create=new_store) if settings.graft and store_root is not None else None
        noted = preflight(store_root, known_pin(pin), None, None, settings, ray=True) if store is not None else []
        for note in noted:
            event(f"note: {note}")
        with _Cluster(options, event) as cluster:
            workers = _Workers(cluster.ray, pin, settings, _worker_path(store_root) if store is not None else None, hooks, report)
            try:
                count = options.worker_count(cluster.free_cpus())
                for _ in range(count):
                    workers.start()
                first, reference = _first_pin(workers, options, event)
                if store is not None:  # the whole pin and a worker's kind of CPU, before a problem is handed out
                    notes = preflight(store_root, reference["config"], reference["config_fingerprint"],
                                      kind_of(reference["environment"]), settings, ray=True)
                    for note in notes:
                        if note not in noted:  # the first pass's notes were printed before the workers started
                            event(f"note: {note}")
                recorded = run.open(run_record(command, reference["config"], reference["config_fingerprint"],
                                               problems, settings), code)
                ledger = Ledger([p.id for p in chosen], settings.samples, recorded, options.max_losses)
                environments = _dispatch(workers, ledger, chosen, run, settings, reference, first, options,
                                         on_sample, event, count)
            finally:
                workers.stop_all()
        report.ignored = ledger.ignored
        executor = {"kind": "ray", "workers": report.started, "refused": len(report.refused),
                    "lost": len(report.lost), "environments": environments}
        samples = ledger.ordered()
        manifest = eval_manifest(
            run_name=run_name, command=command, config=reference["config"],
            config_fingerprint=reference["config_fingerprint"], settings=settings, source=source, problems=problems,
            samples=samples, energy=reference["energy"], store_root=store_root if store is not None else None,
            extra={"executor": executor, **(options_section(command_options) or {})}, code=code,
            code_resumed_from=run.earlier_code)
        write_manifest(manifest, run.manifest_path)
    return RunResult(run, [Sample.from_json(s) for s in samples], manifest,
                     run.cleaned + (store.cleaned if store is not None else []), dispatch=report)


def _worker_path(store_root: str | Path) -> str:
    """The store as workers open it: a URL as given, a local path made absolute (workers may start elsewhere)."""
    text = str(store_root)
    return text if "://" in text else str(Path(text).resolve())


def _first_pin(workers: _Workers, options: ClusterOptions, event) -> tuple[int, dict]:
    """Wait for the workers to load the model, in worker order; the first that does gives the run's pin (its
    index and :meth:`ProblemWorker.describe`). Raises
    :class:`DispatchError` when none does within ``options.ready_timeout_s``."""
    ray = workers.ray
    deadline = time.monotonic() + options.ready_timeout_s
    for ref, index in sorted(workers.loading.items(), key=lambda item: item[1]):
        try:
            described = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            raise DispatchError(f"no worker loaded the model within {options.ready_timeout_s:.0f} s (does the "
                                f"cluster have {workers.pin.threads} free CPU(s) per worker?)") from None
        except ray.exceptions.RayError as exc:
            reason = _short(_cause(exc))
            workers.report.refused.append((index, f"could not start: {reason}"))
            event(f"ray: worker {index} could not start: {reason}")
            del workers.loading[ref]
            workers.stop(index)
            continue
        del workers.loading[ref]
        return index, described
    reasons = "; ".join(f"worker {i}: {why}" for i, why in workers.report.refused)
    raise DispatchError(f"no worker could start ({reasons})")


def _short(exc: BaseException) -> str:
    """One line of what went wrong: the last ``SomeError: message`` line of a worker's traceback, else the first
    line (at most 240 characters)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return (errors[-1] if errors else lines[0] if lines else type(exc).__name__)[:240]


def _dispatch(workers: _Workers, ledger: Ledger, problems: list[Problem], run, settings: EvalSettings,
              reference: dict, first: int, options: ClusterOptions, on_sample, event, count: int) -> list[dict]:
    """Hand problems to workers until every sample is recorded; returns the distinct environments of the workers
    that ran problems. Raises :class:`DispatchError` as :func:`run_eval_ray` says."""
    from ..results.samples import Sample

    ray, report = workers.ray, workers.report
    idle: list[int] = []
    environments: list[dict] = []
    replacements = count if options.replace_lost else 0
    retried: set[str] = set()

    def accept(index: int, described: dict) -> None:
        if described["config_fingerprint"] != reference["config_fingerprint"]:
            why = f"another pin ({pin_difference(reference['config'], described['config'])})"
            report.refused.append((index, why))
            event(f"ray: worker {index} refused: {why}")
            workers.stop(index)
            return
        if described["environment"] not in environments:
            environments.append(described["environment"])
        idle.append(index)

    def lose(index: int, exc: BaseException) -> None:
        nonlocal replacements
        problem_id = ledger.lose(index)
        report.lost.append((index, problem_id))
        workers.stop(index)
        held = f" (problem {problem_id} queued again)" if problem_id else ""
        event(f"ray: worker {index} lost{held}: {_short(_cause(exc))}")
        if replacements > 0 and not ledger.finished:
            replacements -= 1
            event(f"ray: started worker {workers.start()} in its place")

    accept(first, reference)
    while not ledger.finished:
        while idle and ledger.queued:
            index = idle.pop(0)
            position = ledger.take(index)
            if position is None:
                idle.append(index)
                break
            workers.dispatch(index, problems[position], position, options.problem_timeout_s)
            report.dispatched += 1
        waiting = list(workers.loading) + list(workers.running)
        if not waiting:
            raise DispatchError(f"no worker is left to run the {ledger.queued} problem(s) still queued ("
                                f"{len(report.refused)} refused, {len(report.lost)} lost): see the lines above")
        done, _ = ray.wait(waiting, num_returns=1, timeout=workers.wait_s(time.monotonic()))
        if not done:
            for ref in workers.overdue(time.monotonic()):
                hung = TimeoutError(f"hung: no result within {options.problem_timeout_s:g} s")
                lose(workers.running.pop(ref).index, hung)
            continue
        ref = done[0]
        if ref in workers.loading:
            index = workers.loading.pop(ref)
            try:
                accept(index, ray.get(ref))
            except ray.exceptions.RayError as exc:
                report.refused.append((index, f"could not start: {_short(_cause(exc))}"))
                event(f"ray: worker {index} could not start: {_short(_cause(exc))}")
                workers.stop(index)
            continue
        index, position, _ = workers.running.pop(ref)
        try:
            samples = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the problem raised in the worker: as in one process
            raise _cause(exc) from None
        except ray.exceptions.RayError as exc:  # the worker died or was lost: the problem runs elsewhere
            lose(index, exc)
            continue
        for sample in ledger.record(index, samples):
            run.append(sample)
            if on_sample:
                on_sample(Sample.from_json(sample))
        problem_id = problems[position].id
        if problem_id in workers.hooks.retry_after_record and problem_id not in retried:
            retried.add(problem_id)
            ledger.retry(problem_id)
        idle.append(index)
    return environments

