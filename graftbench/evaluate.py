"""Solve and eval: one problem at a time, baseline or with a graft, each sample appended durably.

``solve`` is ``eval`` without ``--graft``. With a graft, the router picks one artifact; it is restored at its own
positions and the query (problem plus answer cue) runs after it. A refused artifact is not an error: the problem
falls back to the baseline prompt, recorded as ``fallback: <reason>``, unless ``strict``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

from . import engine, graft
from .energy import EnergyMeter
from .hashing import sha256_text
from .problems import Problem, normalize_problem_text, problem_key, problem_text_sha256
from .runs import RunDir
from .session import Session
from .store import ArtifactError, Store
from .verify import verify_answer


class StrictFallbackError(RuntimeError):
    """Raised under ``strict`` when an artifact is refused and the problem would fall back to a prefill."""


@dataclass(frozen=True)
class EvalSettings:
    """Settings of a solve/eval run. Budgets are in decode tokens; ``min_similarity`` in [0, 1]."""

    max_new_tokens: int = 1024
    token_budget: int | None = None
    graft: bool = False
    certify: bool = False
    strict: bool = False
    min_similarity: float = 0.6

    def to_dict(self) -> dict:
        return asdict(self)


def _baseline(session: Session, problem: Problem, budget: int, started: float) -> dict:
    prompt = session.solve_prompt_ids(problem.problem)
    cache = engine.new_cache(session.model)
    logits = engine.prefill(session.model, cache, prompt, session.config.chunk_size)
    decoded = engine.greedy_decode(session.model, session.tokenizer, cache, logits, budget, session.eos_ids,
                                   started=started)
    return {
        "cue": "", "prefill_tokens": len(prompt), "prefill_tokens_saved": 0, "artifact_id": None,
        "artifact_tokens": 0, "logits_sha256": engine.logits_sha256(logits), "decoded": decoded,
    }


def _grafted(session: Session, store: Store, problem: Problem, artifact_id: str, budget: int, certify: bool,
             started: float) -> dict:
    cache, chain = graft.restore_chain(session.model, session.config, store, artifact_id)
    query = session.query_ids(problem.problem)
    logits = engine.prefill(session.model, cache, query, session.config.chunk_size)
    grafted_hash = engine.logits_sha256(logits)
    decoded = engine.greedy_decode(session.model, session.tokenizer, cache, logits, budget, session.eos_ids,
                                   stop=session.config.layout.query_stop, started=started)
    return {
        "cue": session.config.layout.answer_cue, "prefill_tokens": len(query),
        "prefill_tokens_saved": sum(len(link.token_ids) for link in chain), "artifact_id": artifact_id,
        "artifact_tokens": sum(len(link.token_ids) for link in chain), "logits_sha256": grafted_hash,
        "decoded": decoded, "certify": (chain, query) if certify else None,
    }


def _certificate(session: Session, chain, query: list[int]) -> str:
    """Logits hash of an independent fresh chunked recompute: new cache, the chain's tokens, then the query."""
    segments = [link.token_ids.tolist() for link in chain]
    return engine.logits_sha256(graft.fresh_recompute(session.model, session.config, segments, query))


def run_problem(session: Session, problem: Problem, settings: EvalSettings, budget: int,
                store: Store | None, meter: EnergyMeter) -> dict:
    """Run one problem and return its sample (a JSON-ready dict; see the README's sample fields).

    ``wall_s`` and ``energy_j`` cover routing, restore or prefill, and decode; the ``--certify`` recompute is an
    audit, timed apart in ``certify_s`` and not counted in them.

    Raises :class:`StrictFallbackError` under ``settings.strict`` when the chosen artifact is refused.
    """
    started, energy_start = time.perf_counter(), meter.read()
    route, fallback, result = None, None, None
    if settings.graft and store is not None:
        route = graft.route(store, session.config.fingerprint, problem_key(problem),
                            normalize_problem_text(problem.problem), settings.min_similarity)
        if route.artifact_id:
            try:
                result = _grafted(session, store, problem, route.artifact_id, budget, settings.certify, started)
            except ArtifactError as exc:
                if settings.strict:
                    raise StrictFallbackError(f"problem {problem.id}: {exc}") from exc
                fallback = f"{exc.check}: {exc}"
    if result is None:
        result = _baseline(session, problem, budget, started)
    decoded = result.pop("decoded")
    wall_s, energy_j = time.perf_counter() - started, meter.read() - energy_start
    to_certify = result.pop("certify", None)
    certify_start = time.perf_counter()
    certificate = _certificate(session, *to_certify) if to_certify else None
    certify_s = time.perf_counter() - certify_start if to_certify else None
    verdict = verify_answer(decoded.text, problem.answer, cue=result["cue"])
    return {
        "problem_id": problem.id,
        "problem_sha256": problem_text_sha256(problem.problem),
        "key": problem.answer,
        "mode": "graft" if result["artifact_id"] else "baseline",
        "route": route.kind if route else None,
        "similarity": round(route.similarity, 6) if route else None,
        "fallback": fallback,
        **result,
        "output": decoded.text,
        "output_sha256": sha256_text(decoded.text),
        "extracted": verdict.extracted,
        "correct": verdict.correct,
        "finish_reason": decoded.finish_reason,
        "decode_tokens": len(decoded.token_ids),
        "ttft_s": round(decoded.first_token_s, 6),
        "wall_s": round(wall_s, 6),
        "energy_j": round(energy_j, 6),
        "certificate_sha256": certificate,
        "certify_s": round(certify_s, 6) if certify_s is not None else None,
        "certified": (certificate == result["logits_sha256"]) if certificate else None,
    }


def evaluate(session: Session, problems: list[Problem], run: RunDir, settings: EvalSettings, store: Store | None,
             meter: EnergyMeter, on_sample: Callable[[dict], None] | None = None) -> list[dict]:
    """Run every problem not yet recorded in ``run``, appending each sample durably; returns all samples in
    problem order. Stops early when the run's ``token_budget`` (decode tokens) is spent.
    """
    done = {s["problem_id"]: s for s in run.read_samples()}
    spent = sum(s["decode_tokens"] for s in done.values())
    for problem in problems:
        if problem.id in done:
            continue
        budget = settings.max_new_tokens
        if settings.token_budget is not None:
            budget = min(budget, settings.token_budget - spent)
            if budget <= 0:
                break
        sample = run_problem(session, problem, settings, budget, store, meter)
        run.append(sample)
        done[problem.id] = sample
        spent += sample["decode_tokens"]
        if on_sample:
            on_sample(sample)
    return [done[p.id] for p in problems if p.id in done]
