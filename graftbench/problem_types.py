"""The problem type and its hashes: what a problem is, and the digests that identify a problem and a problem set.

The bottom of the problem modules: :mod:`graftbench.builtin_problems` (the generated set) and
:mod:`graftbench.problem_loading` (files and hub ids) build :class:`Problem` values; everything else (evaluation,
deposit, exactness, manifests) only reads them and their hashes. Imports nothing but the standard library and
:mod:`graftbench.hashing`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .hashing import problem_set_json, sha256_text

__all__ = [
    "Problem",
    "ProblemSetError",
    "normalize_problem_text",
    "problem_key",
    "problem_set_sha256",
    "problem_text_sha256",
]


class ProblemSetError(ValueError):
    """Raised for a problem set that cannot be loaded; the message names the file (or hub id),
    the row (1-based) and the field."""


@dataclass(frozen=True)
class Problem:
    """One problem.

    ``answer`` is the canonical integer string (no leading zeros, no sign for non-negative
    values) when the set was loaded with ``integer_answers=True`` (the AIME default), else the
    key as given. ``family`` is set only for built-in generated problems.
    """

    id: str
    problem: str
    answer: str
    solution: str | None = None
    family: str | None = None


def problem_set_sha256(problems: Sequence[Problem]) -> str:
    """SHA-256 hex digest (64 characters) identifying a problem set (order-sensitive).

    Hashes :func:`graftbench.hashing.problem_set_json` (compact, ``ensure_ascii=True``) of the list of
    ``[id, problem, answer, solution]`` (``solution`` ``None`` → ``null``); ``family`` is not
    part of the identity. Any change to an id, text, answer key or solution, or to the
    order, changes the digest. Committed manifests record this digest, so its bytes are frozen.
    """
    payload = [[p.id, p.problem, p.answer, p.solution] for p in problems]
    return sha256_text(problem_set_json(payload))


def normalize_problem_text(text: str) -> str:
    """Normalise a problem statement for exact-match routing: lowercase, every run of
    whitespace collapsed to one space, leading/trailing whitespace stripped."""
    return " ".join(text.lower().split())


def problem_text_sha256(text: str) -> str:
    """SHA-256 hex digest of the UTF-8 encoding of the raw (un-normalised) problem text.

    Raises ``UnicodeEncodeError`` for text holding lone surrogates (``load_problems``
    refuses such text, so loaded problems always hash)."""
    return sha256_text(text)


def problem_key(problem: Problem) -> str:
    """SHA-256 hex digest of the UTF-8 encoding of the normalized problem text
    (:func:`normalize_problem_text`): the exact-match routing key of the store.

    Raises ``UnicodeEncodeError`` for text holding lone surrogates."""
    return sha256_text(normalize_problem_text(problem.problem))
