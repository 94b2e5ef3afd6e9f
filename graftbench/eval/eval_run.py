"""One eval run (solve, eval, eval --graft) over a problem set into its run folder, ending in its sealed manifest."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..util.energy import EnergyMeter
from .evaluate import evaluate
from ..results.manifest import write_manifest
from ..problems.types import Problem
from ..results.runs import RunDir
from ..results.samples import Sample
from ..engine.base import EngineSession
from ..programs.sandbox import Sandbox, open_sandbox
from ..settings import EvalSettings
from ..problems.shards import parse_shard, select
from ..store.folder import Store
from ..store.open import open_store
from ..util.provenance import code_version
from .run_identity import run_record
from .run_manifest import eval_manifest, options_section


@dataclass
class DispatchReport:
    """What a run over workers did: workers ``started`` (replacements included), ``refused`` (worker index, why:
    another pin, or it could not load the model), ``lost`` (worker index, the problem it held or ``None``),
    ``dispatched`` problem runs (a re-run counts again), and ``ignored`` sample arrivals whose key was already
    recorded."""

    started: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)
    lost: list[tuple[int, str | None]] = field(default_factory=list)
    dispatched: int = 0
    ignored: int = 0


@dataclass
class RunResult:
    """A finished (or budget-stopped) run: its folder, samples in problem order, and its sealed manifest."""

    run: RunDir
    samples: list[Sample]
    manifest: dict
    cleaned: list[Path] = field(default_factory=list)  # temporary files of killed writers removed on opening
    dispatch: DispatchReport | None = None  # a run over Ray workers: started, refused, lost (graftbench.scale.dispatch)

    @property
    def certificate_mismatches(self) -> list[str]:
        """Problem ids whose ``--certify`` recompute gave another logits hash than the graft."""
        return [s.problem_id for s in self.samples if s.certified is False]


def open_graft_store(store_root: str | Path, new_store: bool = False) -> Store:
    """The store a graft run reads: opened for writing (which removes killed writers' temporary files and brings
    an older index up to date), or read-only when its file system refuses writes (a graft only reads). Raises
    :class:`graftbench.store.index.StoreError` as :func:`graftbench.store.open.open_store` does."""
    try:
        return open_store(store_root, create=new_store)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or new_store:
            raise
        return open_store(store_root, readonly=True)


def run_eval(session: EngineSession, problems: list[Problem], source: str, run_name: str, settings: EvalSettings,
             command: str = "eval", runs_root: str | Path = "runs", store_root: str | Path | None = None,
             on_sample: Callable[[Sample], None] | None = None, new_store: bool = False,
             command_options: dict | None = None, code: dict | None = None,
             sandbox: Sandbox | None = None) -> RunResult:
    """Open (or resume) ``runs/<run_name>`` holding its lock, evaluate every problem not yet recorded (of
    ``settings.shard`` only, when given), write ``manifest.json``, release the lock.

    With ``settings.graft`` the store at ``store_root`` must exist, unless ``new_store`` (then an empty one is
    created and every problem runs as the baseline). ``command_options``: the options the command was given (flag
    to value), recorded as the manifest's ``command_options`` when not empty. ``code``: the code version the run
    is made by (:func:`graftbench.util.provenance.code_version`, read here when ``None``, before any sample), the
    manifest's ``environment.code`` however long the run takes; a resumed run's manifest also lists the code
    versions of the earlier processes whose samples it holds (``environment.code_resumed_from``). In program mode
    each program runs in ``sandbox``, opened here (:func:`graftbench.programs.sandbox.open_sandbox`) when
    ``None``, before the run folder is touched. Raises
    :class:`graftbench.results.runs.RunError` when the run folder holds a run with other settings or another process
    holds it, and :class:`graftbench.store.folder.StoreError` for a store that does not exist (without ``new_store``)
    or whose index is missing or damaged, and :class:`graftbench.programs.sandbox.SandboxError` in program mode
    when the sandbox cannot be built.
    """
    if settings.mode == "program" and sandbox is None:
        sandbox = open_sandbox()
    code = code if code is not None else code_version()  # at the start: the checkout may move during the run
    run = RunDir(runs_root, run_name)
    shard_problems = [p for _, p in select(problems, parse_shard(settings.shard))]
    store = open_graft_store(store_root, new_store) if settings.graft and store_root is not None else None
    with run:
        run.lock()  # first: a run that another process holds is refused before anything else
        config = session.config.to_dict()
        run.open(run_record(command, config, session.config.fingerprint, problems, settings), code)
        # NVML reads the GPU the run uses (cuda:N); a session without a torch device gives its pin's device kind
        meter = EnergyMeter(device=getattr(session, "device", session.config.device))
        samples = evaluate(session, shard_problems, run, settings, store, meter, on_sample, sandbox)
        manifest = eval_manifest(
            run_name=run_name, command=command, config=config, config_fingerprint=session.config.fingerprint,
            settings=settings, source=source, problems=problems, samples=[s.to_json() for s in samples],
            energy=meter.describe(), store_root=store_root if store is not None else None,
            extra=options_section(command_options), code=code, code_resumed_from=run.earlier_code)
        write_manifest(manifest, run.manifest_path)
    return RunResult(run, samples, manifest, run.cleaned + (store.cleaned if store is not None else []))
