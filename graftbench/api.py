"""The Python API: load problems, open a model, solve, deposit, evaluate with and without a graft, certify, verify a
manifest, and load runs and samples as pandas DataFrames, each through the library calls the command line makes.

Importing this module imports neither torch nor transformers: :func:`verify_manifest`, :func:`load_runs`,
:func:`load_samples` and :func:`load_problems` never load them; :func:`open_model` and the functions that take its
session do, when called. Importing it leaves the process's allocator alone; a process that grafts many times calls
:func:`set_allocator_for_grafts` first, before torch is imported (the command line does so when it starts).

Examples that run: docs/api.md (tests/end_to_end/test_api_docs.py executes every one).
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from .problems.loading import load_problems as _load_problems
from .problems.types import Problem
from .results.anchor import ProblemSet
from .results.check import Verification, verify_file
from .settings import CERTIFIED_KERNELS, DEFAULT_CHUNK_SIZE, DEFAULT_MODEL, DEFAULT_RUNS_DIR, EvalSettings
from .util.allocator import set_allocator_for_grafts

if TYPE_CHECKING:  # annotations only: the eval modules import torch
    import pandas

    from .engine.base import EngineSession as Session
    from .eval.deposit import DepositReport
    from .eval.eval_run import RunResult

__all__ = ["load_problems", "open_model", "solve", "evaluate", "deposit", "certify", "verify_manifest", "load_runs",
           "load_samples", "set_allocator_for_grafts", "EvalSettings"]


def load_problems(source: str = "builtin", limit: int | None = None, *, id_field: str = "id",
                  problem_field: str = "problem", answer_field: str = "answer",
                  solution_field: str = "solution") -> list[Problem]:
    """The problems of ``source`` as every command reads them (``--problems``): ``builtin`` or ``builtin:A-B``,
    a local ``.jsonl``/``.json``/``.parquet``/``.csv`` file, or a hub dataset id; the first ``limit`` only when
    given. The ``*_field`` names say which field holds what. Raises
    :class:`graftbench.problems.types.ProblemSetError` naming the source and what is wrong with it."""
    return _load_problems(source, id_field=id_field, problem_field=problem_field, answer_field=answer_field,
                          solution_field=solution_field, limit=limit)


def open_model(model: str = DEFAULT_MODEL, *, engine: str | None = None, dtype: str = "auto",
               chunk_size: int = DEFAULT_CHUNK_SIZE, threads: int | None = None, device: str = "cpu",
               kernels: str = CERTIFIED_KERNELS, kv_type: str = "f16", flash_attn: bool | None = None) -> Session:
    """A model on an engine, with its pinned config, as ``--engine`` opens it
    (:func:`graftbench.engine.registry.open_engine`; ``engine`` ``None`` is the default engine, torch):
    ``model`` an alias (``smollm2-135m``, ``gemma3-270m``), a hub id, a folder or a ``.gguf`` file; ``dtype`` a dtype
    name or ``auto`` (the device's default: float32 on the CPU); ``chunk_size`` the prefill chunk in tokens;
    ``threads`` intra-op threads (part of the pin); ``device`` ``cpu``, ``auto``, ``cuda`` or ``cuda:N``;
    ``kernels`` ``certified`` or ``fast``; ``kv_type`` and ``flash_attn`` for the llama.cpp engine. Loads the engine's
    libraries (torch, or llama.cpp). Raises :class:`graftbench.engine.registry.UnknownEngineError` naming the known
    engines, :class:`graftbench.engine.models.ModelError` for a model it cannot load and
    :class:`graftbench.engine.device.DeviceError` for a device this machine lacks."""
    from .engine.base import EngineOptions
    from .engine.registry import DEFAULT_ENGINE, open_engine

    return open_engine(engine or DEFAULT_ENGINE, EngineOptions(
        model=model, dtype=dtype, chunk_size=chunk_size, threads=threads, device=device, kernels=kernels,
        kv_type=kv_type, flash_attn=flash_attn))


def _settings(settings: EvalSettings | None, overrides: dict) -> EvalSettings:
    """``settings`` (the defaults of :class:`~graftbench.settings.EvalSettings` when ``None``) with
    ``overrides`` applied; raises ``ValueError`` or ``TypeError`` as the dataclass does for a bad or unknown one."""
    return replace(settings or EvalSettings(), **overrides)


def solve(session: Session, problems: list[Problem], *, run: str, source: str, runs_dir: str | Path = DEFAULT_RUNS_DIR,
          settings: EvalSettings | None = None, on_sample: Callable | None = None, **overrides) -> RunResult:
    """``graftbench solve``: decode every problem under the budget and verify each answer (the baseline), into the
    run folder ``runs_dir/run`` (resumed when it holds samples of the same settings). ``source`` is the problem
    set's name as the manifest records it (what :func:`load_problems` was given). ``overrides`` are
    :class:`~graftbench.settings.EvalSettings` fields (``max_new_tokens``, ``samples``, ``temperature``, ...).
    Returns the :class:`graftbench.eval.eval_run.RunResult` (samples, sealed manifest). Raises
    :class:`graftbench.results.runs.RunError` for a run folder holding other settings or held by another process."""
    return _run("solve", session, problems, run, source, runs_dir, _settings(settings, {**overrides, "graft": False}),
                None, False, on_sample)


def evaluate(session: Session, problems: list[Problem], *, run: str, source: str, graft: bool = False,
             store: str | Path | None = None, new_store: bool = False, runs_dir: str | Path = DEFAULT_RUNS_DIR,
             settings: EvalSettings | None = None, on_sample: Callable | None = None,
             on_note: Callable[[str], None] | None = None, **overrides) -> RunResult:
    """``graftbench eval``: the baseline, or with ``graft`` each problem routed to an artifact of ``store`` and
    grafted before its query. Before a graft run starts, the store is checked against the session's pin
    (:func:`graftbench.eval.preflight.preflight`); each note it has (nothing this run can graft, and why) goes to
    ``on_note`` (default: a ``UserWarning``). ``new_store`` creates an empty store when ``store`` does not exist.
    Other arguments as :func:`solve`. Raises ``ValueError`` for ``graft`` without a ``store``,
    :class:`graftbench.store.index.StoreError` for a store that does not exist (without ``new_store``) or is
    damaged, :class:`graftbench.eval.preflight.PreflightError` when ``strict`` and the store holds nothing for this
    pin, and what :func:`solve` raises."""
    settings = _settings(settings, {**overrides, "graft": graft})
    if graft:
        if store is None:
            raise ValueError("evaluate(graft=True) needs the store to graft from: pass store=")
        if not new_store:
            from .scale.eval_job import store_pin_notes  # the command line's own check

            notes = store_pin_notes(str(store), session.config, settings)
            for note in notes:
                (on_note or (lambda text: warnings.warn(text, stacklevel=3)))(note)
    return _run("eval", session, problems, run, source, runs_dir, settings, store if graft else None, new_store,
                on_sample)


def _run(command: str, session, problems: list[Problem], run: str, source: str, runs_dir, settings: EvalSettings,
         store, new_store: bool, on_sample) -> RunResult:
    from .eval.eval_run import run_eval

    return run_eval(session, problems, source, run, settings, command=command, runs_root=runs_dir,
                    store_root=store, on_sample=on_sample, new_store=new_store)


def deposit(session: Session, problems: list[Problem], store: str | Path, *, references: bool = True,
            from_run: str | None = None, from_manifest: str | Path | None = None,
            runs_dir: str | Path = DEFAULT_RUNS_DIR, mode: str = "text", recompute: bool = False,
            on_item: Callable | None = None) -> DepositReport:
    """``graftbench deposit``: re-verify solutions against their keys and deposit the verified ones as KV
    artifacts into ``store`` (created when missing): the problems' own solutions (``references``), the verified
    samples of the solve run ``runs_dir/from_run``, and those recorded in the run manifest ``from_manifest``. A
    solution the store already holds under this pin is reused without a prefill unless ``recompute``. Returns the
    :class:`graftbench.eval.deposit.DepositReport` (``deposited``, ``reused``, ``refused`` with reasons). Raises
    ``ValueError`` when there is nothing to deposit (naming why, per source),
    :class:`graftbench.results.runs.RunError` for a missing or damaged run,
    :class:`graftbench.results.manifest.ManifestError` for a manifest that does not verify, and
    :class:`graftbench.store.index.StoreError` for a store path that cannot hold a store."""
    from .eval.deposit_plan import deposit_job, deposit_plan, empty_plan_reasons
    from .results.runs import RunDir
    from .store.folder import check_store_target

    source_run = RunDir(runs_dir, from_run) if from_run else None
    items = deposit_plan(problems, references=references, from_run=source_run, from_manifest=from_manifest)
    check_store_target(str(store))
    if not items:
        reasons = empty_plan_reasons(problems, references=references, from_run=source_run,
                                     from_manifest=from_manifest)
        raise ValueError("nothing to deposit: " + ("; ".join(reasons) or "no source asked for (references=False, "
                                                    "no from_run, no from_manifest)"))
    return deposit_job(session, store, problems, references=references, items=items, on_item=on_item, mode=mode,
                       recompute=recompute)


def certify(session: Session, problems: list[Problem], source: str, *, pairs: int = 50, controls: bool = False,
            control_pairs: int = 10, on_pair: Callable[[dict], None] | None = None) -> dict:
    """``graftbench check-exact`` on the session's engine: ``pairs`` (artifact, query) pairs built from the problems' worked
    solutions, each graft's logits compared byte for byte with a fresh chunked recompute (and, with ``controls``,
    the negative controls on the first ``control_pairs``). Returns the sealed exactness manifest (a dict;
    ``totals.exact_pairs`` of ``totals.pairs`` byte-exact), nothing written. Raises ``ValueError`` naming
    ``source`` when too few of its problems have a solution for ``pairs`` pairs, or when the session's kernels are
    not the certified ones."""
    from .eval.exactness import check_pair_source, run_check_exact
    from .settings import require_certified_kernels

    require_certified_kernels(session.config.kernels, "certify")
    check_pair_source(problems, source, pairs)
    return run_check_exact(session, problems, source, pairs, controls, control_pairs, on_pair=on_pair)


def verify_manifest(path: str | Path, *, store: str | Path | None = None, require_artifacts: bool = False,
                    problems: str | None = None) -> Verification:
    """``graftbench verify-manifest`` without a model (no torch unless ``store`` holds tensors to read): re-check
    the manifest at ``path`` (a run folder such as ``runs/NAME``, a run manifest, or an exactness manifest) for
    its hashes, every verdict, totals, artifact payloads (against ``store`` when given: the store a manifest
    records is never read) and its problem set (``problems``, a source as :func:`load_problems` takes, or the set
    it records when graftbench can rebuild it). Returns the :class:`graftbench.results.check.Verification`:
    ``mismatches`` (it holds only when empty), ``notes``, and what could not be checked; its ``exit_code()`` is the
    command's exit status. Raises :class:`graftbench.results.manifest.ManifestError` for a path that is not a
    manifest (its subclass :class:`~graftbench.results.manifest.ManifestRefused` for one not shaped as its schema
    says) and :class:`graftbench.problems.types.ProblemSetError` for ``problems`` that cannot be read."""
    named = ProblemSet(tuple(load_problems(problems)), problems, True) if problems is not None else None
    return verify_file(path, None if store is None else str(store), require_artifacts, named)


RUN_COLUMNS = ("run", "path", "command", "model", "dtype", "mode", "layout", "problems", "samples", "correct",
               "accuracy", "accuracy_low", "accuracy_high", "pass_at_n", "maj_at_n", "decode_tokens",
               "mean_ttft_s", "wall_s", "energy_j", "unverified")


def _entries(paths: Iterable[str | Path], allow_unanchored: bool, seed: int = 0, resamples: int | None = None):
    from .report.compare import RESAMPLES, load_runs as _load

    return _load(list(paths), seed=seed, resamples=resamples or RESAMPLES, allow_unanchored=allow_unanchored)


def load_runs(paths: Iterable[str | Path], *, allow_unanchored: bool = False, seed: int = 0,
              resamples: int | None = None) -> pandas.DataFrame:
    """One row per run, as ``graftbench report`` reads runs (:func:`graftbench.report.compare.load_runs`: each
    ``paths`` item a run folder or a run manifest, verified first): the columns of :data:`RUN_COLUMNS`, with
    ``layout`` the samples' query layouts (``None`` when
    the manifest records none), ``accuracy`` the mean over samples (avg@n, a fraction) and ``accuracy_low``/``accuracy_high`` its 95%
    interval, ``pass_at_n`` and ``maj_at_n`` fractions, ``decode_tokens`` in tokens, ``mean_ttft_s`` and ``wall_s``
    in seconds, ``energy_j`` in joules, and ``unverified`` what could not be checked ("" when everything was).
    ``seed`` and ``resamples`` are the bootstrap's. Raises :class:`graftbench.report.compare.ReportError` naming a
    path that is not a run or does not verify (:class:`~graftbench.report.compare.UnanchoredRun` for an unanchored
    one unless ``allow_unanchored``)."""
    import pandas

    rows = []
    for entry in _entries(paths, allow_unanchored, seed, resamples):
        summary, config = entry.summary, entry.manifest.get("config") or {}
        low, high = summary["accuracy_ci95"]
        rows.append({"run": entry.label, "path": str(entry.path), "command": entry.manifest.get("command"),
                     "model": entry.model, "dtype": config.get("dtype"), "mode": entry.mode,
                     "layout": None if entry.layout == "—" else entry.layout,
                     "problems": summary["problems"], "samples": summary["samples"], "correct": summary["correct"],
                     "accuracy": summary["avg_at_n"], "accuracy_low": low, "accuracy_high": high,
                     "pass_at_n": summary["pass_at_n"], "maj_at_n": summary["maj_at_n"],
                     "decode_tokens": summary["decode_tokens"], "mean_ttft_s": summary["mean_ttft_s"],
                     "wall_s": summary["wall_s"], "energy_j": summary["energy_j"],
                     "unverified": "; ".join(entry.unverified)})
    return pandas.DataFrame(rows, columns=list(RUN_COLUMNS))


def load_samples(paths: Iterable[str | Path], *, allow_unanchored: bool = False) -> pandas.DataFrame:
    """One row per recorded sample of each run in ``paths`` (read and verified as :func:`load_runs` reads them),
    a ``run`` column first, then the sample's fields as its manifest records them (``problem_id``,
    ``sample_index``, ``correct``, ``extracted``, ``key``, ``decode_tokens`` in tokens, ``ttft_s`` and ``wall_s``
    in seconds, ``mode``, ``route``, ...; a field an older manifest lacks is empty). Raises what
    :func:`load_runs` raises."""
    import pandas

    rows = [{"run": entry.label, **sample} for entry in _entries(paths, allow_unanchored, resamples=100)
            for sample in entry.manifest["samples"]]
    return pandas.DataFrame(rows)


def replay_programs(paths: Iterable[str | Path], *, log: str | Path | None = None,
                    on_record: Callable[[dict], None] | None = None) -> list[dict]:
    """Re-run the recorded programs of the program-mode manifests at ``paths`` in today's sandbox and compare their
    verdicts and stop reasons with the records (:func:`graftbench.programs.replay.replay_manifests`; no model).

    Every manifest is loaded and re-checked first (its seal, fields and verdicts: :func:`verify_manifest`'s checks
    without a store), so a damaged or edited file is refused before any program runs; ``log`` (JSON lines) is
    opened for appending before any program runs too. Each manifest's record goes to ``on_record`` as soon as it is
    done. Returns the records (one per manifest: programs, same verdicts, same stop reasons, each difference).
    Raises :class:`graftbench.results.manifest.ManifestError` for a missing, unreadable or damaged manifest (naming
    it and its first mismatch), ``ValueError`` for one of no program or of sandbox limits looser than a run's
    (:func:`graftbench.programs.replay.replay_limits`; no program runs then), ``OSError`` for a log that cannot be
    written, and :class:`graftbench.programs.sandbox.SandboxError` when the sandbox cannot be built."""
    from .programs.replay import replay_manifests
    from .results.manifest import ManifestError, check_manifest, load_manifest, recorded_verifier_version

    loaded = []
    for path in paths:
        manifest = load_manifest(path)
        mismatches, _ = check_manifest(manifest)
        if mismatches:
            raise ManifestError(f"{path}: does not verify ({len(mismatches)} mismatch(es); first: {mismatches[0]}); "
                                f"its programs were not replayed")
        loaded.append((path, manifest, recorded_verifier_version(manifest)))
    return replay_manifests(loaded, Path(log) if log is not None else None, on_record)
