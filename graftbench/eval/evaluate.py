"""Solve and eval: one problem at a time, baseline or with a graft, its samples appended durably.

``solve`` is ``eval`` without ``--graft``. With a graft, the router picks one artifact; it is restored at its own
positions and the query runs after it, in the layout the settings choose for the route (``answer``: the problem
and the answer cue; ``solve``: the problem and the solution cue). A refused artifact is not an error: the problem
falls back to the baseline prompt, recorded as ``fallback: <reason>``, unless ``strict``. An artifact written on
another kind of CPU under a pin not proven portable (:mod:`graftbench.store.writers`) is refused before it is
read, with the reason ``cpu``.

A problem's N samples share its prompt or graft: it is prefilled or restored once and the samples are decoded as one
batch where the engine can (torch: :func:`graftbench.engine.torch.sampling.sample_decode`); greedy decoding (one sample) takes the argmax.

In program mode (``settings.mode``) the baseline prompt and a new problem's query after a graft ask for a Python
program (:mod:`graftbench.programs.mode`); each sample's program runs in the sandbox
(:mod:`graftbench.programs.sandbox`) and the last line it prints is judged. A recurring problem's ``answer`` layout
still answers after the cue.
"""

from __future__ import annotations

import time
from typing import Callable

from ..store import router
from ..store.codec import ArtifactError
from ..util.energy import EnergyMeter
from ..results.samples import Decoded
from ..util.hashing import sha256_text
from ..store.router import Route
from ..problems.types import Problem, family, normalize_problem_text, problem_key, problem_text_sha256
from ..problems.prompts import PROGRAM_CLOSE
from ..programs.mode import extract_program, program_verdict
from ..results.runs import RunDir
from ..results.samples import Attempt, Sample
from ..engine.base import EngineSession, SamplingSettings
from ..util.seeds import sample_seed
from ..programs.sandbox import Sandbox
from ..settings import EvalSettings, SandboxLimits
from ..store.folder import Store
from ..store.writers import kind_refusal, this_kind
from ..verify.answers import answers_equivalent, verify_answer
from ..verify.reasoning import thinking_tokens


class StrictFallbackError(RuntimeError):
    """Raised under ``strict`` when an artifact is refused and the problem would fall back to a prefill."""


def sample_seeds(settings: EvalSettings, problem_id: str) -> list[int] | None:
    """The seeds of a problem's samples (``None`` when decoding is greedy)."""
    if not settings.sampled:
        return None
    return [sample_seed(settings.seed, problem_id, i) for i in range(settings.samples)]


def _decode(session: EngineSession, cache, logits, budget: int, settings: EvalSettings, seeds: list[int] | None,
            stop, started: float) -> tuple[Decoded, ...]:
    sampling = SamplingSettings(settings.temperature, settings.top_p, settings.seed) if seeds is not None else None
    return session.decode(cache, logits, budget, sampling, seeds, stop, started)


def _baseline(session: EngineSession, problem: Problem, budget: int, settings: EvalSettings, seeds: list[int] | None,
              started: float) -> Attempt:
    program = settings.mode == "program"
    prompt = session.program_prompt_ids(problem.problem) if program else session.solve_prompt_ids(problem.problem)
    cache, logits = session.prefill_prompt(prompt)
    logits_hash = session.logits_sha256(logits)
    decoded = _decode(session, cache, logits, budget, settings, seeds, PROGRAM_CLOSE if program else None, started)
    return Attempt(cue="", prefill_tokens=len(prompt), prefill_tokens_saved=0, artifact_id=None, artifact_tokens=0,
                   logits_sha256=logits_hash, decoded=decoded, program=program)


def _query(session: EngineSession, problem: Problem, route: Route, settings: EvalSettings) -> tuple[str, bool, list[int]]:
    """The query that follows a routed example: its layout, whether it asks for a program, and its token ids."""
    layout = settings.query_layout(route.kind)
    program = settings.mode == "program" and layout == "solve"  # a recurring problem still answers after the cue
    query = session.program_query_ids(problem.problem) if program else session.query_ids(problem.problem, layout)
    return layout, program, query


def check_kind(store: Store, artifact_id: str, fingerprint: str, assume_kind: bool) -> None:
    """Refuse to graft ``artifact_id`` (of the pin ``fingerprint``) on this machine unless a writer of its bytes
    was of this kind of CPU, its pin is proven portable, or it records no kind and ``assume_kind``
    (:func:`graftbench.store.writers.kind_refusal`). Raises :class:`ArtifactError` (``cpu``) with the reason."""
    refusal = kind_refusal(fingerprint, store.writer_kinds(artifact_id), this_kind(), assume_kind)
    if refusal is not None:
        raise ArtifactError(artifact_id, "cpu", refusal)


def _grafted(session: EngineSession, store: Store, problem: Problem, route: Route, budget: int,
             settings: EvalSettings, seeds: list[int] | None, started: float) -> Attempt:
    check_kind(store, route.artifact_id, session.config.fingerprint, settings.assume_kind)
    layout, program, query = _query(session, problem, route, settings)
    prompt_layout = session.config.layout
    grafted = session.graft(store, route.artifact_id, room=len(query) + budget)
    logits = session.prefill_after(grafted.cache, query)
    grafted_hash = session.logits_sha256(logits)
    stop = PROGRAM_CLOSE if program else prompt_layout.stop(layout)
    decoded = _decode(session, grafted.cache, logits, budget, settings, seeds, stop, started)
    restored = sum(len(ids) for ids in grafted.segments)
    to_certify = (grafted.segments, query) if settings.certify else None
    example = grafted.headers[-1]
    return Attempt(cue=prompt_layout.cue(layout), prefill_tokens=len(query), prefill_tokens_saved=restored,
                   artifact_id=route.artifact_id, artifact_tokens=restored, logits_sha256=grafted_hash,
                   decoded=decoded, certify_segments=to_certify, layout=layout,
                   example_id=example.get("problem_id"), example_answer=example.get("answer"), program=program)


def _as_prompt(session: EngineSession, store: Store, problem: Problem, route: Route, budget: int,
               settings: EvalSettings, seeds: list[int] | None, started: float) -> Attempt:
    """The example-as-prompt arm: the routed artifact chain's token ids (no KV read) prefilled as prompt text, each
    link with the pinned chunk schedule as it was deposited, then the query exactly as :func:`_grafted` runs it."""
    layout, program, query = _query(session, problem, route, settings)
    prompt_layout = session.config.layout
    chain = [(route.artifact_id, store.header(route.artifact_id))]  # the routed artifact first, then its ancestors
    while parent := chain[-1][1].get("parent"):
        chain.append((parent, store.header(parent)))
    segments = [store.token_ids(artifact_id) for artifact_id, _ in reversed(chain)]
    cache, logits = session.prefill_chain(segments, query)
    stop = PROGRAM_CLOSE if program else prompt_layout.stop(layout)
    decoded = _decode(session, cache, logits, budget, settings, seeds, stop, started)
    example = chain[0][1]
    prompted = sum(len(ids) for ids in segments)
    return Attempt(cue=prompt_layout.cue(layout), prefill_tokens=prompted + len(query), prefill_tokens_saved=0,
                   artifact_id=route.artifact_id, artifact_tokens=prompted,
                   logits_sha256=session.logits_sha256(logits), decoded=decoded, layout=layout,
                   example_id=example.get("problem_id"), example_answer=example.get("answer"), program=program)


def _certificate(session: EngineSession, segments: list[list[int]], query: list[int]) -> str:
    """Logits hash of an independent fresh chunked recompute: new cache, the chain's tokens, then the query."""
    return session.logits_sha256(session.recompute(segments, query))


def _route(session: EngineSession, store: Store, problem: Problem, settings: EvalSettings) -> Route:
    text = normalize_problem_text(problem.problem)
    if settings.graft_from == "other-family":
        return router.route_other_family(store, session.config.fingerprint, text, family(problem), settings.ranker)
    if settings.graft_from == "top-ranked":
        return router.route_top_ranked(store, session.config.fingerprint, text, settings.ranker)
    return router.route(store, session.config.fingerprint, problem_key(problem), text, settings.min_similarity,
                        settings.ranker)


def run_problem(session: EngineSession, problem: Problem, settings: EvalSettings, budget: int,
                store: Store | None, meter: EnergyMeter, sandbox: Sandbox | None = None) -> list[Sample]:
    """Run one problem and return its :class:`~graftbench.results.samples.Sample` list (``settings.samples`` of them).

    ``wall_s`` and ``energy_j`` cover routing, restore or prefill, and decode, split evenly over the samples; the
    ``--certify`` recompute is an audit, timed apart in ``certify_s`` and not counted in them. In program mode
    each sample's program then runs in ``sandbox`` (timed apart in ``program_s``) and its printed line is judged.

    Raises :class:`StrictFallbackError` under ``settings.strict`` when the chosen artifact is refused,
    :class:`graftbench.programs.sandbox.SandboxError` when the sandbox cannot be set up for a program (never for
    what a program does), and ``ValueError`` in program mode without a ``sandbox``
    (:func:`graftbench.programs.sandbox.open_sandbox`).
    """
    if settings.mode == "program" and sandbox is None:
        raise ValueError("program mode runs each program in a sandbox: pass the run's "
                         "(graftbench.programs.sandbox.open_sandbox())")
    started, energy_start = time.perf_counter(), meter.read()
    route, fallback, attempt = None, None, None
    seeds = sample_seeds(settings, problem.id)
    if settings.graft and store is not None:
        route = _route(session, store, problem, settings)
        if route.artifact_id:
            try:
                arm = _as_prompt if settings.example_as == "prompt" else _grafted
                attempt = arm(session, store, problem, route, budget, settings, seeds, started)
            except ArtifactError as exc:
                if settings.strict:
                    raise StrictFallbackError(f"problem {problem.id}: {exc}") from exc
                fallback = f"{exc.check}: {exc}"
    if attempt is None:
        attempt = _baseline(session, problem, budget, settings, seeds, started)
    wall_s, energy_j = time.perf_counter() - started, meter.read() - energy_start
    certify_start = time.perf_counter()
    certificate = _certificate(session, *attempt.certify_segments) if attempt.certify_segments else None
    certify_s = time.perf_counter() - certify_start if attempt.certify_segments else None
    n = len(attempt.decoded)
    shared = dict(
        problem_id=problem.id,
        problem_sha256=problem_text_sha256(problem.problem),
        key=problem.answer,
        mode="graft" if attempt.artifact_id else "baseline",
        route=route.kind if route else None,
        similarity=round(route.similarity, 6) if route else None,
        fallback=fallback,
        cue=attempt.cue,
        prefill_tokens=attempt.prefill_tokens,
        prefill_tokens_saved=attempt.prefill_tokens_saved,
        artifact_id=attempt.artifact_id,
        artifact_tokens=attempt.artifact_tokens,
        logits_sha256=attempt.logits_sha256,
        wall_s=round(wall_s / n, 6),
        energy_j=round(energy_j / n, 6),
        certificate_sha256=certificate,
        certify_s=round(certify_s, 6) if certify_s is not None else None,
        certified=(certificate == attempt.logits_sha256) if certificate else None,
        layout=attempt.layout,
        example_id=attempt.example_id,
        example_answer=attempt.example_answer,
    )
    reasoning = session.config.layout.reasoning_pair
    return [_sample(shared, decoded, i, seeds, route, settings, attempt.program, reasoning,
                    _thinking(session, decoded, attempt.cue, reasoning), sandbox)
            for i, decoded in enumerate(attempt.decoded)]


def program_fields(output: str, limits: SandboxLimits, sandbox: Sandbox) -> dict:
    """Extract the program from a decoded ``output``, run it in ``sandbox`` under ``limits``, and return the
    program fields of a :class:`~graftbench.results.samples.Sample`. Raises
    :class:`graftbench.programs.sandbox.SandboxError` only when the sandbox cannot be set up."""
    program = extract_program(output)
    result = sandbox.run(program, limits)
    return dict(program=program, exit_status=result.exit_status, stdout=result.stdout,
                stdout_sha256=result.stdout_sha256, stderr_tail=result.stderr_tail, program_s=result.run_s,
                stopped=result.stopped, isolation=result.isolation)


def _thinking(session: EngineSession, decoded: Decoded, cue: str, reasoning: tuple[str, str] | None) -> int | None:
    """How many of ``decoded``'s tokens are reasoning (:func:`graftbench.verify.reasoning.thinking_tokens`), by
    the session's tokenizer; ``None`` when the layout names no reasoning delimiters."""
    if reasoning is None:
        return None
    eos = set(session.eos_ids)
    ids = [t for t in decoded.token_ids if t not in eos]  # the text the verifier reads, decoded as the engine does
    return thinking_tokens(ids, lambda prefix: session.tokenizer.decode(prefix, skip_special_tokens=True), cue,
                           reasoning)


def _sample(shared: dict, decoded: Decoded, index: int, seeds: list[int] | None, route: Route | None,
            settings: EvalSettings, program: bool = False, reasoning: tuple[str, str] | None = None,
            thinking: int | None = None, sandbox: Sandbox | None = None) -> Sample:
    run = program_fields(decoded.text, settings.sandbox, sandbox) if program else {}
    if program:
        verdict = program_verdict(run["stdout"], run["stopped"], shared["key"], settings.verifier_version)
    else:
        verdict = verify_answer(decoded.text, shared["key"], cue=shared["cue"], version=settings.verifier_version,
                                reasoning=reasoning)
    copied = None
    if shared["example_answer"] is not None and route is not None and route.kind != "exact":
        copied = verdict.extracted is not None and answers_equivalent(verdict.extracted, shared["example_answer"],
                                                                      settings.verifier_version)
    return Sample(
        **shared,
        output=decoded.text,
        output_sha256=sha256_text(decoded.text),
        extracted=verdict.extracted,
        correct=verdict.correct,
        finish_reason=decoded.finish_reason,
        decode_tokens=len(decoded.token_ids),
        ttft_s=round(decoded.first_token_s, 6),
        sample_index=index,
        seed=seeds[index] if seeds else None,
        copied=copied,
        thinking_tokens=thinking,
        **run,
    )


def evaluate(session: EngineSession, problems: list[Problem], run: RunDir, settings: EvalSettings, store: Store | None,
             meter: EnergyMeter, on_sample: Callable[[Sample], None] | None = None,
             sandbox: Sandbox | None = None) -> list[Sample]:
    """Run every problem whose samples are not all recorded in ``run``, appending each sample durably; returns all
    samples in problem and sample order. Stops early when the run's ``token_budget`` (decode tokens) is spent. In
    program mode each program runs in ``sandbox`` (:func:`run_problem`).

    A problem interrupted between its samples is run again whole (the same seeds and batch draw the same tokens)
    and only its missing samples are appended.

    Raises ``ValueError`` when a recorded sample does not have the fields of a
    :class:`~graftbench.results.samples.Sample`, and what :func:`run_problem` raises.
    """
    done = {(s.problem_id, s.sample_index): s for s in map(Sample.from_json, run.read_samples())}
    spent = sum(s.decode_tokens for s in done.values())
    indices = range(settings.samples)
    for problem in problems:
        if all((problem.id, i) in done for i in indices):
            continue
        budget = settings.max_new_tokens
        if settings.token_budget is not None:
            budget = min(budget, settings.token_budget - spent)
            if budget <= 0:
                break
        for sample in run_problem(session, problem, settings, budget, store, meter, sandbox):
            if (problem.id, sample.sample_index) in done:
                continue
            run.append(sample.to_json())
            done[(problem.id, sample.sample_index)] = sample
            spent += sample.decode_tokens
            if on_sample:
                on_sample(sample)
    return [done[(p.id, i)] for p in problems for i in indices if (p.id, i) in done]
