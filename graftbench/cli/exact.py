"""``graftbench check-exact``: measure the graft against a fresh recompute, or replay a committed expectation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from .exact_runs import open_run, report_manifest
from .options import KernelsOpt
from ..settings import require_certified_kernels
from .common import (ChunkOpt, DeviceOpt, DtypeOpt, EngineOpt, FlashAttnOpt, KvTypeOpt, ModelOpt, ProblemsOpt, RunsOpt,
                     apply_isa, console, fail, load_problem_set, model_label, open_model, progress, run_dtype)


def check_exact(
    model: str = ModelOpt, dtype: str = DtypeOpt, chunk_size: int = ChunkOpt, problems: str = ProblemsOpt,
    isa: Optional[str] = typer.Option(None, "--isa", help="instruction-set pin: native or avx2 (portable); with "
                                      "--expect the expectation's pin is adopted [default: native]"),
    samples: int = typer.Option(50, "--samples", min=1, help="number of (artifact, query) pairs"),
    controls: bool = typer.Option(False, "--controls", help="also run the negative controls"),
    control_pairs: int = typer.Option(10, "--control-pairs", min=0, help="pairs that run the controls (the first N)"),
    write_expect: Optional[Path] = typer.Option(None, "--write-expect", help="write the manifest here as the expectation"),
    expect: Optional[Path] = typer.Option(None, "--expect", help="replay this expectation instead of measuring"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="with --expect: replay only the first N pairs"),
    pairs: Optional[str] = typer.Option(None, "--pairs", help="with --expect: replay pairs START:END only (0-based, "
                                        "END excluded, as a Python slice: 3:20 is the 17 pairs after the first 3; "
                                        "START: to the last)"),
    log: Optional[Path] = typer.Option(None, "--log", help="with --expect: append the outcome and both CPUs to this "
                                       "replay log (JSON lines, e.g. results/replays.jsonl)"),
    across_cpu_kinds: bool = typer.Option(False, "--across-cpu-kinds", help="with --expect of a llama.cpp "
                                          "expectation: compare the pairs even where this llama.cpp build differs "
                                          "from the recorded one in detected CPU features alone; logged as a "
                                          "comparison on another kind of CPU, never as a replay on the recorded one"),
    extend: Optional[Path] = typer.Option(None, "--extend", help="start from this expectation's pair records "
                                          "(same pin and problem set) and measure only the pairs it lacks"),
    runs_dir: str = RunsOpt,
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch intra-op threads (pinned; default: torch's)"),
    engine: str = EngineOpt, kv_type: str = KvTypeOpt, flash_attn: Optional[bool] = FlashAttnOpt,
    device: str = DeviceOpt, kernels: str = KernelsOpt,
) -> None:
    """Prove the graft byte-exact against a fresh chunked recompute, with negative controls, or replay an expectation."""
    try:
        require_certified_kernels(kernels, "check-exact")
    except ValueError as exc:
        fail(str(exc))
    if expect is not None:
        first, end = _pair_range(pairs, limit)
        return _replay(expect, end, isa, log, first, across_cpu_kinds)
    if pairs is not None or across_cpu_kinds:
        fail(f"{'--pairs' if pairs is not None else '--across-cpu-kinds'} applies with --expect only")
    if engine != "torch":
        from .exact_llama import check_exact_llama

        return check_exact_llama(engine, model, chunk_size, problems, samples, controls, control_pairs, write_expect,
                                 runs_dir, threads, kv_type, flash_attn, torch_only=extend is not None or isa is not None)
    apply_isa(isa)  # before the imports below bring in torch
    from ..eval.exactness import check_pair_source, run_check_exact

    problem_list = load_problem_set(problems, None, "id", "problem", "answer", "solution")
    try:
        check_pair_source(problem_list, problems, samples)
    except ValueError as exc:
        fail(str(exc))
    expected = _load_expectation(extend) if extend else None  # a bad file fails before the model loads
    if extend:
        _check_extendable_before_load(extend, expected, model, run_dtype(dtype, isa), chunk_size, threads, problem_list, samples)
    session, recorded = open_model(model, dtype, chunk_size, threads, isa, architecture_only=True), []
    if extend:
        session, recorded = _extension(extend, expected, session, problem_list, samples)
    run, done = open_run(runs_dir, model, session, problem_list)
    done = recorded + done  # the journal's records come last, so they win
    with run, progress("check-exact", samples) as advance:
        def measured(record):
            run.append(record)
            advance(f"{record['id']} {'✓' if record['equal'] else '✗'} {record['artifact_tokens']} artifact tokens")

        try:
            manifest = run_check_exact(session, problem_list, problems, samples, controls, control_pairs,
                                       on_pair=measured, done=done,
                                       on_reused=lambda r: advance(f"{r['id']} resumed"))
        except OSError as exc:
            fail(str(exc))
    report_manifest(manifest, run, write_expect)


def _load_expectation(expect: Path) -> dict:
    """The exactness manifest at ``expect``; fails naming the path when it is missing or not one."""
    from ..results.exact_manifest import load_expectation
    from ..results.manifest import ManifestError

    try:
        return load_expectation(expect)
    except ManifestError as exc:  # it names the path
        fail(str(exc))


def _check_extendable_before_load(expect: Path, expected: dict, model: str, dtype: str, chunk_size: int,
                                  threads: int | None, problem_list, samples: int) -> None:
    """Fail before the model loads when ``expected`` cannot be extended with these options: the pin fields known
    without a model (dtype, chunk size, threads when given, and the weights' SHA-256 when the spec is an alias,
    whose GGUF file is pinned), the problem set, the pair layout and count (:func:`check_extendable`)."""
    from ..results.exact_manifest import pin_differences
    from ..eval.exactness import check_extendable
    from ..engine.models import ModelError, resolve_model

    known = {"dtype": dtype, "chunk_size": chunk_size, **({"threads": threads} if threads is not None else {})}
    try:
        resolved = resolve_model(model)
    except ModelError as exc:
        fail(str(exc))
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
    console.print(f"extending {expect}: {len(records)} pair records from it (each reused when its pair's tokens and "
                  f"controls match), {samples - len(records)} new pairs")
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


def _replay(expect: Path, limit, isa: str | None, log: Path | None, first: int = 0,
            across_cpu_kinds: bool = False) -> None:
    from ..results.expectation_kind import replay_target

    try:  # expectations are per kind of CPU: a bare file name is this kind's, another kind's is named
        expect, kind_note = replay_target(expect)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if kind_note:
        console.print(f"note: {kind_note}", markup=False, highlight=False)
    expected = _load_expectation(expect)
    pin = expected["config"]
    if first >= len(expected["pairs"]):
        fail(f"--pairs starts at pair {first}, but {expect} holds {len(expected['pairs'])} pairs (0-based)")
    if pin.get("engine"):
        if first:
            fail("--pairs replays expectations of the torch engine; on llama.cpp use --limit")
        from .exact_llama import replay_llama_expectation

        return replay_llama_expectation(expect, expected, limit, log, across_cpu_kinds)
    if across_cpu_kinds:
        fail("--across-cpu-kinds applies to llama.cpp expectations: a torch expectation pinned to --isa avx2 is "
             "compared on any CPU with AVX2 already, and one pinned to native kernels runs on its kind alone")
    apply_isa(isa or pin.get("isa", "native"))
    from ..eval.exactness import replay_and_log
    from ..util.isa import describe_cpu

    problem_list = load_problem_set(expected["problem_set"]["source"], None, "id", "problem", "answer", "solution")
    session = open_model(pin["model"], pin["dtype"], pin["chunk_size"], pin["threads"], architecture_only=True)
    total = max(0, min(limit or len(expected["pairs"]), len(expected["pairs"])) - first)
    with progress("replay", total) as advance:
        try:
            result, record = replay_and_log(session, expected, problem_list, limit, log,
                                            on_pair=lambda r: advance(f"{r['id']} equal"), first=first)
        except ValueError as exc:
            fail(f"{expect}: {exc}")
    recorded, here = record["recorded_on"], record["replayed_on"]
    console.print(f"recorded on {describe_cpu(recorded)}, replayed on {describe_cpu(here)} under --isa "
                  f"{session.config.isa}")
    if result.pin_differences:
        fail(f"not comparable: this machine's pin differs from {expect} in {', '.join(result.pin_differences)}", 1)
    console.print(f"{result.compared} compared, {result.equal} equal")
    if not result.passed:
        fail(f"replay of {expect} failed at {result.first_difference}", 1)
