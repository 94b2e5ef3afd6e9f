"""``graftbench check-exact --engine llama.cpp``: parse, run :mod:`graftbench.eval.exactness_llama`, print."""

from __future__ import annotations

from pathlib import Path

from .common import ENGINES, console, fail, load_problem_set, open_llama, progress

def check_exact_llama(engine: str, model: str, chunk_size: int, problems: str, samples: int, controls: bool,
                      control_pairs: int, write_expect: Path | None, runs_dir: str, threads: int | None,
                      kv_type: str, flash_attn: bool | None, torch_only: bool = False) -> None:
    """check-exact on the llama.cpp engine (:func:`graftbench.eval.exactness_llama.certify_llama`); ``torch_only``: an
    option of the torch engine alone (``--extend``, ``--isa``) was given, which is refused."""
    from ..eval.exactness import check_pair_source
    from .exact_runs import open_run, report_manifest

    if engine not in ENGINES:
        fail(f"--engine {engine!r} is not one of {', '.join(ENGINES)}")
    if torch_only:
        fail(f"--engine {engine}: --extend and --isa apply to the torch engine only")
    problem_list = load_problem_set(problems, None, "id", "problem", "answer", "solution")
    try:
        check_pair_source(problem_list, problems, samples)
    except ValueError as exc:
        fail(str(exc))
    ls = open_llama(model, chunk_size, threads, kv_type, flash_attn)
    from ..eval.exactness_llama import certify_llama

    run, done = open_run(runs_dir, model, ls, problem_list)
    with run, progress("check-exact llama.cpp", samples) as advance:
        def measured(record):
            run.append(record)
            advance(f"{record['id']} {'✓' if record['equal'] else '✗'} {record['artifact_tokens']} artifact tokens")

        manifest = certify_llama(ls, problem_list, problems, samples, controls, control_pairs, on_pair=measured,
                                 done=done, on_reused=lambda r: advance(f"{r['id']} resumed"))
    agreement = manifest["settings"]["tokenizer_agreement"]
    report_manifest(manifest, run, write_expect,
                    note=f"tokenizers: llama.cpp's gives graftbench's ids on {agreement['agree']} of "
                         f"{agreement['texts']} texts (the engine is fed graftbench's ids)")


def replay_llama_expectation(expect: Path, expected: dict, limit: int | None, log: Path | None,
                             across_cpu_kinds: bool = False) -> None:
    """Replay a llama.cpp expectation under its own engine pin; fails when not comparable or a hash differs.
    ``across_cpu_kinds``: where this build's pin differs in CPU features alone, compare the pairs anyway
    (:func:`graftbench.eval.replay_committed.adopt_cpu_features`) and log the differing fields and features."""
    from ..results.exact_manifest import append_replay_log, replay_record
    from ..eval.exactness_llama import replay_llama
    from ..eval.replay_committed import adopt_cpu_features, describe_features

    pin, engine = expected["config"], expected["config"]["engine"]
    if engine.get("engine") != "llama.cpp":
        fail(f"{expect}: engine {engine.get('engine')!r} is not one this graftbench runs")
    problem_list = load_problem_set(expected["problem_set"]["source"], None, "id", "problem", "answer", "solution")
    adopt_build(expect, engine)
    ls = open_llama(pin["model"], pin["chunk_size"], pin["threads"], engine["type_k"], engine["flash_attn"],
                    engine["n_ctx"])
    adopted = adopt_cpu_features(expected, ls.config.to_dict()) if across_cpu_kinds else None
    compared_to, features = adopted or (expected, None)
    if features:
        console.print(f"--across-cpu-kinds: this llama.cpp build differs from the recorded one in CPU features alone "
                      f"({describe_features(features)}); the pairs are compared, and the outcome is a comparison on "
                      "another kind of CPU, not a replay on the recorded kind", markup=False, highlight=False)
    total = min(limit or len(expected["pairs"]), len(expected["pairs"]))
    with progress("replay llama.cpp", total) as advance:
        result = replay_llama(ls, compared_to, problem_list, limit, on_pair=lambda r: advance(f"{r['id']} equal"))
    compared_across = features is not None and not result.pin_differences
    differing = [*(features["fields"] if features else []), *result.pin_differences]
    if log is not None:
        append_replay_log(log, replay_record(
            expected, compared=result.compared, equal=result.equal, first_difference=result.first_difference,
            pin_differences_found=differing,
            across_cpu_kinds={k: features[k] for k in ("recorded_only", "replayed_only")} if compared_across else None))
    if result.pin_differences:
        fail(f"not comparable: this machine's pin differs from {expect} in {', '.join(differing)}", 1)
    console.print(f"{result.compared} compared, {result.equal} equal"
                  + (" on another kind of CPU (not a replay on the recorded kind)" if compared_across else ""))
    if not result.passed:
        fail(f"replay of {expect} failed at {result.first_difference}", 1)


def adopt_build(expect: Path, engine: dict) -> None:
    """Load the llama.cpp build the expectation's pin names (``build``: ``portable``; none: ``native``), as
    ``check-exact --expect`` adopts a torch expectation's ``--isa``; fails naming the expectation when it cannot."""
    from ..engine.llama_cpp.portable_build import LlamaBuildError, select

    try:
        select(str(engine.get("build", "native")))
    except LlamaBuildError as exc:
        fail(f"{expect}: {exc}")
