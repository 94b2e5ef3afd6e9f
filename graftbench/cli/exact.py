"""``graftbench check-exact``: measure the graft against a fresh recompute, or replay a committed expectation, on any
registered engine (:mod:`graftbench.eval.exactness` over its :class:`graftbench.engine.base.ExactnessChecks`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from .exact_runs import open_run, report_manifest
from .invocation import command_options, given_options
from ..settings import require_certified_kernels
from ..engine.base import ACROSS_CPU_KINDS, EXTEND_EXPECTATION, REPLAY_RANGE
from ..engine.registry import DEFAULT_ENGINE
from ..settings import CERTIFIED_KERNELS, DEFAULT_CHUNK_SIZE, DEFAULT_MODEL, DEFAULT_RUNS_DIR, ModelOptions
from .common import (apply_isa, console, engine_factory, fail, load_problem_set, open_model, progress,
                     require_capability)
from ..util.display_text import console_markup, visible
from ..scale.eval_job import run_dtype
from .options import (ChunkSizeArg, DeviceArg, DtypeArg, EngineArg, ExpectArg, FlashAttnArg, IsaArg, KernelsArg,
                      KvTypeArg, ModelArg, ProblemsArg, RunsDirArg, ThreadsArg)


def check_exact(
    model: ModelArg = DEFAULT_MODEL, dtype: DtypeArg = "auto", chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE,
    problems: ProblemsArg = "builtin",
    isa: IsaArg = None,
    samples: int = typer.Option(50, "--samples", min=1, help="number of (artifact, query) pairs"),
    controls: bool = typer.Option(False, "--controls", help="also run the negative controls"),
    control_pairs: int = typer.Option(10, "--control-pairs", min=0, help="pairs that run the controls (the first N)"),
    write_expect: Optional[Path] = typer.Option(None, "--write-expect", help="write the manifest here as the expectation"),
    expect: ExpectArg = None,
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="with --expect: replay only the first N pairs"),
    pairs: Optional[str] = typer.Option(None, "--pairs", help="with --expect: replay pairs START:END only (0-based, "
                                        "END excluded, as a Python slice: 3:20 is the 17 pairs after the first 3; "
                                        "START: to the last)"),
    log: Optional[Path] = typer.Option(None, "--log", help="with --expect: append the outcome and both CPUs to this "
                                       "replay log (JSON lines, e.g. manifests/replays.jsonl)"),
    across_cpu_kinds: bool = typer.Option(False, "--across-cpu-kinds", help="with --expect of a llama.cpp "
                                          "expectation: compare the pairs even where this llama.cpp build differs "
                                          "from the recorded one in detected CPU features alone; logged as a "
                                          "comparison on another kind of CPU, never as a replay on the recorded one"),
    extend: Optional[Path] = typer.Option(None, "--extend", help="start from this expectation's pair records "
                                          "(same pin and problem set) and measure only the pairs it lacks"),
    runs_dir: RunsDirArg = DEFAULT_RUNS_DIR,
    threads: ThreadsArg = None,
    engine: EngineArg = DEFAULT_ENGINE, kv_type: KvTypeArg = "f16", flash_attn: FlashAttnArg = None,
    device: DeviceArg = "auto", kernels: KernelsArg = CERTIFIED_KERNELS,
) -> None:
    """Prove the graft byte-exact against a fresh chunked recompute, with negative controls, or replay an expectation."""
    from ..util.provenance import code_version

    code = code_version()  # the code that starts the check is what its manifest or replay record names
    try:
        require_certified_kernels(kernels, "check-exact")
    except ValueError as exc:
        fail(str(exc))
    options = ModelOptions(engine=engine, model=model, dtype=dtype, chunk_size=chunk_size, threads=threads, isa=isa,
                           device=device, kernels=kernels, kv_type=kv_type, flash_attn=flash_attn)
    if expect is not None:
        first, end = _pair_range(pairs, limit)
        named = problems if "problems" in given_options() else None  # else the expectation's own, found by name
        named_model = model if "model" in given_options() else None  # else the recorded one, when it is a name
        return _replay(expect, end, options, log, first, across_cpu_kinds, code, named, named_model)
    if pairs is not None or across_cpu_kinds:
        fail(f"{'--pairs' if pairs is not None else '--across-cpu-kinds'} applies with --expect only")
    factory = engine_factory(engine)
    if extend is not None:
        require_capability(EXTEND_EXPECTATION, "--extend", engine)
    if "isa" in factory.options:
        apply_isa(isa)  # before the imports below bring in torch
    from ..eval.exactness import check_pair_source, run_check_exact
    from ..results.exact_manifest import reused_code

    problem_list = load_problem_set(problems, None, "id", "problem", "answer", "solution")
    try:
        check_pair_source(problem_list, problems, samples)
    except ValueError as exc:
        fail(str(exc))
    expected = _load_expectation(extend) if extend else None  # a bad file fails before the model loads
    if extend:
        _check_extendable_before_load(extend, expected, model, run_dtype(options), chunk_size, threads, problem_list,
                                      samples)
    session, recorded = open_model(options, architecture_only=True), []
    if extend:
        session, recorded = _extension(extend, expected, session, problem_list, samples)
    run, done = open_run(runs_dir, model, session, problem_list, code)
    done = recorded + done  # the journal's records come last, so they win
    with run, progress(_label("check-exact", session), samples) as advance:
        def measured(record):
            run.append(record)
            advance(f"{record['id']} {'✓' if record['equal'] else '✗'} {record['artifact_tokens']} artifact tokens")

        try:
            manifest = run_check_exact(session, problem_list, problems, samples, controls, control_pairs,
                                       on_pair=measured, done=done,
                                       on_reused=lambda r: advance(f"{r['id']} resumed"),
                                       command_options=command_options(), code=code,
                                       code_resumed_from=reused_code(expected, run.earlier_code))
        except OSError as exc:
            fail(str(exc))
    agreement = manifest["settings"].get("tokenizer_agreement")  # an engine fed graftbench's ids by its own tokenizer
    report_manifest(manifest, run, write_expect, note="" if agreement is None else (
        f"tokenizers: {session.engine_name}'s gives graftbench's ids on {agreement['agree']} of {agreement['texts']} "
        "texts (the engine is fed graftbench's ids)"))


def _label(what: str, session) -> str:
    """A progress bar's label: ``what``, followed by the engine's name when it is not the default engine."""
    return what if session.engine_name == DEFAULT_ENGINE else f"{what} {session.engine_name}"


def _load_expectation(expect: Path) -> dict:
    """The exactness manifest at ``expect``; raises :class:`graftbench.results.manifest.ManifestError` naming the
    path when it is missing or not one."""
    from ..results.exact_manifest import load_expectation

    return load_expectation(expect)  # a ManifestError names the path


def _check_extendable_before_load(expect: Path, expected: dict, model: str, dtype: str, chunk_size: int,
                                  threads: int | None, problem_list, samples: int) -> None:
    """Fail before the model loads when ``expected`` cannot be extended with these options: the pin fields known
    without a model (dtype, chunk size, threads when given, and the weights' SHA-256 when the spec is an alias,
    whose GGUF file is pinned), the problem set, the pair layout and count (:func:`check_extendable`)."""
    from ..results.exact_manifest import pin_differences
    from ..eval.exactness import check_extendable
    from ..engine.models import resolve_model

    known = {"dtype": dtype, "chunk_size": chunk_size, **({"threads": threads} if threads is not None else {})}
    resolved = resolve_model(model)  # a ModelError names the model
    if resolved.sha256:
        known["weights_sha256"] = resolved.sha256
    differing = pin_differences({name: expected["config"].get(name) for name in known}, known)
    try:
        check_extendable(expected, problem_list, samples, differing)
    except ValueError as exc:
        fail(f"{expect}: {exc}")


def _extension(expect: Path, expected: dict, session, problem_list, samples: int):
    """The session and pair records to extend ``expected`` (read from ``expect``) from
    (:func:`graftbench.eval.exactness.extension_base`); fails with the reason when it cannot be extended."""
    from ..eval.exactness import extension_base

    try:
        session, records = extension_base(session, expected, problem_list, samples)
    except ValueError as exc:
        fail(f"{expect}: {exc}")
    console.print(f"extending {console_markup(expect)}: {len(records)} pair records from it (each reused when its "
                  f"pair's tokens and controls match), {samples - len(records)} new pairs")
    return session, records


def _pair_range(pairs: str | None, limit: int | None) -> tuple[int, int | None]:
    """``--pairs START:END`` (or ``--limit N``, the same as ``0:N``) as ``(first, end)``; fails naming the option
    for a range that is not two whole numbers with START < END, or for both options at once."""
    if pairs is None:
        return 0, limit
    if limit is not None:
        fail("--pairs and --limit both choose the pairs replayed: give one")
    match = re.fullmatch(r"(\d+):(\d*)", pairs.strip())
    if not match or (match.group(2) and int(match.group(2)) <= int(match.group(1))):
        fail(f"--pairs {pairs!r} is not START:END with whole numbers START < END (0-based, END excluded), or START:")
    return int(match.group(1)), int(match.group(2)) if match.group(2) else None


def _replay(expect: Path, limit, given: ModelOptions, log: Path | None, first: int = 0,
            across_cpu_kinds: bool = False, code: dict | None = None, problems: str | None = None,
            named_model: str | None = None) -> None:
    """Replay the expectation at ``expect`` on the engine its pin names, under that pin (an engine that takes
    ``--isa`` adopts the recorded one unless ``--isa`` is given; another adopts what its pin fixes, e.g. a llama.cpp
    build), with the device, kernels and llama.cpp cache options of ``given`` where the pin does not fix them;
    ``across_cpu_kinds``: where this machine's pin differs in CPU features alone, compare the pairs anyway
    (:func:`graftbench.eval.replay_committed.adopt_cpu_features`), logged as a comparison on another kind of CPU;
    ``code``: the code version read when the command started, logged as the record's ``code``; ``problems``: the
    problem set the user named (else the recorded one, :func:`graftbench.eval.expectation_pin.expectation_problems`);
    ``named_model``: the model the user named (else the recorded one, when it is a name and not a path or hub id:
    :func:`graftbench.eval.expectation_pin.adopt_expectation`). Fails when not comparable or a hash differs."""
    from ..eval.expectation_pin import adopt_expectation, expectation_problems
    from ..results.exact_manifest import replay_log_refusal
    from ..results.expectation_kind import replay_target
    from ..util.isa import environment

    refusal = replay_log_refusal(log, environment()) if log is not None else None
    if refusal:  # refused before hours of replay, not after
        fail(refusal)
    try:  # expectations are per kind of CPU: a bare file name is this kind's, another kind's is named
        expect, kind_note = replay_target(expect)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if kind_note:
        console.print(visible(f"note: {kind_note}"), markup=False, highlight=False)
    needs = [*([(REPLAY_RANGE, "--pairs START:END")] if first else []),
             *([(ACROSS_CPU_KINDS, "--across-cpu-kinds")] if across_cpu_kinds else [])]
    adopted = adopt_expectation(expect, given, first_pair=first, needs=needs,  # applies the --isa pin: torch after
                                named_model=named_model)
    expected, options, recorded = adopted.expected, adopted.options, adopted.recorded
    problem_list = expectation_problems(expect, expected, problems)
    session = open_model(options, architecture_only=True, pinned=recorded)
    result, record = _replay_pairs(expect, expected, session, problem_list, limit, log, first, across_cpu_kinds,
                                   code)
    if "isa" in engine_factory(options.engine).options:
        from ..util.isa import describe_cpu

        console.print(visible(f"recorded on {describe_cpu(record['recorded_on'])}, replayed on "  # the file's: data
                              f"{describe_cpu(record['replayed_on'])} under --isa {session.config.isa}"),
                      markup=False, highlight=False)
    differing = record["pin_differences"]
    if result.pin_differences:
        fail(f"not comparable: this machine's pin differs from {expect} in {', '.join(differing)}", 1)
    across = "across_cpu_kinds" in record
    if result.compared:  # a range past the last pair replays the pairs that exist, and says which
        console.print(f"pairs {first} to {first + result.compared - 1} of the expectation's {len(expected['pairs'])} "
                      "(0-based)")
    console.print(f"{result.compared} compared, {result.equal} equal"
                  + (" on another kind of CPU (not a replay on the recorded kind)" if across else ""))
    if not result.passed:
        fail(f"replay of {expect} failed at {result.first_difference}", 1)


def _replay_pairs(expect: Path, expected: dict, session, problem_list, limit, log: Path | None, first: int,
                  across_cpu_kinds: bool, code: dict | None = None):
    """Replay the pairs ``first`` to ``limit`` − 1 (:func:`graftbench.eval.exactness.replay`), against the
    expectation with its CPU-feature fields adopted when ``across_cpu_kinds`` finds only those differ; append the
    replay record (:func:`graftbench.results.exact_manifest.replay_record`, naming ``code``) to ``log`` when given.
    Returns ``(outcome, record)``."""
    from ..eval.exactness import replay
    from ..eval.replay_committed import adopt_cpu_features, describe_features
    from ..results.exact_manifest import append_replay_log, replay_record

    adopted = adopt_cpu_features(expected, session.config.to_dict()) if across_cpu_kinds else None
    compared_to, features = adopted or (expected, None)
    if features:
        console.print(visible(f"--across-cpu-kinds: this {session.engine_name} build differs from the recorded one "
                              f"in CPU features alone ({describe_features(features)}); the pairs are compared, and "
                              "the outcome is a comparison on another kind of CPU, not a replay on the recorded "
                              "kind"), markup=False, highlight=False)
    total = max(0, min(limit or len(expected["pairs"]), len(expected["pairs"])) - first)
    with progress(_label("replay", session), total) as advance:
        try:
            result = replay(session, compared_to, problem_list, limit, on_pair=lambda r: advance(f"{r['id']} equal"),
                            first=first)
        except ValueError as exc:
            fail(f"{expect}: {exc}")
    compared_across = features is not None and not result.pin_differences
    record = replay_record(
        expected, compared=result.compared, equal=result.equal, first_difference=result.first_difference,
        pin_differences_found=[*(features["fields"] if features else []), *result.pin_differences],
        replayed_gpu=session.config.accelerator.get("gpu") if session.config.accelerator else None,
        across_cpu_kinds={k: features[k] for k in ("recorded_only", "replayed_only")} if compared_across else None,
        code=code)
    if first:
        record["first_pair"] = first
    if log is not None:
        append_replay_log(log, record)
    return result, record
