"""The token streams the benchmark runs on: real AIME text, cut to each artifact size."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..problems.types import Problem
from ..engine.base import EngineSession


@dataclass(frozen=True)
class Workload:
    """``context``: token ids of AIME problems with their solutions in the deposit layout, joined and long enough
    for the largest artifact; ``query``: the graft query of the problem whose query length is the median of the
    set (``query_lengths`` holds them all, in tokens); ``decode_prompt``: that problem's solve prompt."""

    context: list[int]
    query: list[int]
    query_lengths: list[int]
    decode_prompt: list[int]
    query_problem: str


def _with_solutions(problems: list[Problem]) -> list[Problem]:
    usable = [p for p in problems if p.solution]
    if not usable:
        raise ValueError("the benchmark needs problems with a solution field (e.g. ../shared/data/aime2024.jsonl)")
    return usable


def corpus_ids(session: EngineSession, problems: list[Problem]) -> list[int]:
    """Token ids of every problem with a solution, in the deposit layout, joined (start tokens once).

    Raises ``ValueError`` when no problem has a solution.
    """
    layout = session.config.layout
    text = "".join(layout.deposit_text(p.problem, p.answer, p.solution) for p in _with_solutions(problems))
    return session.tokenizer(text).input_ids


def build_workload(session: EngineSession, problems: list[Problem], max_tokens: int) -> Workload:
    """Token streams for artifacts of up to ``max_tokens`` tokens from ``problems`` (those with a solution).

    Raises ``ValueError`` when no problem has a solution or the text cannot reach ``max_tokens`` tokens.
    """
    usable = _with_solutions(problems)
    context = corpus_ids(session, usable)
    if len(context) < max_tokens:
        raise ValueError(f"the problems' text holds {len(context)} tokens, fewer than the {max_tokens} asked for")
    queries = [(len(session.query_ids(p.problem)), p) for p in usable]
    median = statistics.median_low([n for n, _ in queries])
    chosen = next(p for n, p in queries if n == median)
    return Workload(context[:max_tokens], session.query_ids(chosen.problem), sorted(n for n, _ in queries),
                    session.solve_prompt_ids(chosen.problem), chosen.id)
