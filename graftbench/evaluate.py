"""Solve and eval: one problem at a time, baseline or with a graft, each sample appended durably.

``solve`` is ``eval`` without ``--graft``. With a graft, the router picks one artifact; it is restored at its own
positions and the query (problem plus answer cue) runs after it. A refused artifact is not an error: the problem
falls back to the baseline prompt, recorded as ``fallback: <reason>``, unless ``strict``.
"""

from __future__ import annotations

import time
from typing import Callable

from . import engine, graft
from .artifact_codec import ArtifactError
from .energy import EnergyMeter
from .hashing import sha256_text
from .problem_types import Problem, normalize_problem_text, problem_key, problem_text_sha256
from .runs import RunDir
from .sample import Attempt, Sample
from .session import Session
from .settings import EvalSettings
from .store import Store
from .verify import verify_answer


class StrictFallbackError(RuntimeError):
    """Raised under ``strict`` when an artifact is refused and the problem would fall back to a prefill."""


def _baseline(session: Session, problem: Problem, budget: int, started: float) -> Attempt:
    prompt = session.solve_prompt_ids(problem.problem)
    cache = engine.new_cache(session.model)
    logits = engine.prefill(session.model, cache, prompt, session.config.chunk_size)
    decoded = engine.greedy_decode(session.model, session.tokenizer, cache, logits, budget, session.eos_ids,
                                   started=started)
    return Attempt(cue="", prefill_tokens=len(prompt), prefill_tokens_saved=0, artifact_id=None, artifact_tokens=0,
                   logits_sha256=engine.logits_sha256(logits), decoded=decoded)


def _grafted(session: Session, store: Store, problem: Problem, artifact_id: str, budget: int, certify: bool,
             started: float) -> Attempt:
    cache, chain = graft.restore_chain(session.model, session.config, store, artifact_id)
    query = session.query_ids(problem.problem)
    logits = engine.prefill(session.model, cache, query, session.config.chunk_size)
    grafted_hash = engine.logits_sha256(logits)
    decoded = engine.greedy_decode(session.model, session.tokenizer, cache, logits, budget, session.eos_ids,
                                   stop=session.config.layout.query_stop, started=started)
    restored = sum(len(link.token_ids) for link in chain)
    to_certify = ([link.token_ids.tolist() for link in chain], query) if certify else None
    return Attempt(cue=session.config.layout.answer_cue, prefill_tokens=len(query), prefill_tokens_saved=restored,
                   artifact_id=artifact_id, artifact_tokens=restored, logits_sha256=grafted_hash, decoded=decoded,
                   certify_segments=to_certify)


def _certificate(session: Session, segments: list[list[int]], query: list[int]) -> str:
    """Logits hash of an independent fresh chunked recompute: new cache, the chain's tokens, then the query."""
    return engine.logits_sha256(graft.fresh_recompute(session.model, session.config, segments, query))


def run_problem(session: Session, problem: Problem, settings: EvalSettings, budget: int,
                store: Store | None, meter: EnergyMeter) -> Sample:
    """Run one problem and return its :class:`~graftbench.sample.Sample`.

    ``wall_s`` and ``energy_j`` cover routing, restore or prefill, and decode; the ``--certify`` recompute is an
    audit, timed apart in ``certify_s`` and not counted in them.

    Raises :class:`StrictFallbackError` under ``settings.strict`` when the chosen artifact is refused.
    """
    started, energy_start = time.perf_counter(), meter.read()
    route, fallback, attempt = None, None, None
    if settings.graft and store is not None:
        route = graft.route(store, session.config.fingerprint, problem_key(problem),
                            normalize_problem_text(problem.problem), settings.min_similarity)
        if route.artifact_id:
            try:
                attempt = _grafted(session, store, problem, route.artifact_id, budget, settings.certify, started)
            except ArtifactError as exc:
                if settings.strict:
                    raise StrictFallbackError(f"problem {problem.id}: {exc}") from exc
                fallback = f"{exc.check}: {exc}"
    if attempt is None:
        attempt = _baseline(session, problem, budget, started)
    decoded = attempt.decoded
    wall_s, energy_j = time.perf_counter() - started, meter.read() - energy_start
    certify_start = time.perf_counter()
    certificate = _certificate(session, *attempt.certify_segments) if attempt.certify_segments else None
    certify_s = time.perf_counter() - certify_start if attempt.certify_segments else None
    verdict = verify_answer(decoded.text, problem.answer, cue=attempt.cue, version=settings.verifier_version)
    return Sample(
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
        output=decoded.text,
        output_sha256=sha256_text(decoded.text),
        extracted=verdict.extracted,
        correct=verdict.correct,
        finish_reason=decoded.finish_reason,
        decode_tokens=len(decoded.token_ids),
        ttft_s=round(decoded.first_token_s, 6),
        wall_s=round(wall_s, 6),
        energy_j=round(energy_j, 6),
        certificate_sha256=certificate,
        certify_s=round(certify_s, 6) if certify_s is not None else None,
        certified=(certificate == attempt.logits_sha256) if certificate else None,
    )


def evaluate(session: Session, problems: list[Problem], run: RunDir, settings: EvalSettings, store: Store | None,
             meter: EnergyMeter, on_sample: Callable[[Sample], None] | None = None) -> list[Sample]:
    """Run every problem not yet recorded in ``run``, appending each sample durably; returns all samples in
    problem order. Stops early when the run's ``token_budget`` (decode tokens) is spent.

    Raises ``ValueError`` when a recorded sample does not have the fields of a :class:`~graftbench.sample.Sample`.
    """
    done = {s.problem_id: s for s in map(Sample.from_json, run.read_samples())}
    spent = sum(s.decode_tokens for s in done.values())
    for problem in problems:
        if problem.id in done:
            continue
        budget = settings.max_new_tokens
        if settings.token_budget is not None:
            budget = min(budget, settings.token_budget - spent)
            if budget <= 0:
                break
        sample = run_problem(session, problem, settings, budget, store, meter)
        run.append(sample.to_json())
        done[problem.id] = sample
        spent += sample.decode_tokens
        if on_sample:
            on_sample(sample)
    return [done[p.id] for p in problems if p.id in done]
