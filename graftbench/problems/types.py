"""The problem type and its hashes: what a problem is, and the digests that identify a problem and a problem set.

The bottom of the problem modules: :mod:`graftbench.problems.builtin` (the generated set) and
:mod:`graftbench.problems.loading` (files and hub ids) build :class:`Problem` values; everything else (evaluation,
deposit, exactness, manifests) only reads them and their hashes. Imports nothing but the standard library and
:mod:`graftbench.util.hashing`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from ..util.hashing import problem_set_json, sha256_text

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

    Hashes :func:`graftbench.util.hashing.problem_set_json` (compact, ``ensure_ascii=True``) of the list of
    ``[id, problem, answer, solution]`` (``solution`` ``None`` → ``null``); ``family`` is not
    part of the identity. Any change to an id, text, answer key or solution, or to the
    order, changes the digest. Committed manifests record this digest, so its bytes are frozen.
    """
    payload = [[p.id, p.problem, p.answer, p.solution] for p in problems]
    return sha256_text(problem_set_json(payload))


def normalize_problem_text(text: str) -> str:
    """Normalise a problem statement for routing (the exact key and the similarity text): Unicode
    NFC, lowercase, every run of whitespace collapsed to one space, leading/trailing whitespace
    stripped.

    NFC makes the key independent of how the text was encoded: ``"é"`` written precomposed
    (U+00E9) or as ``e`` + U+0301 (NFD, as some editors and macOS file tools write it) is the
    same text, and must route exactly. NFKC would go further and fold compatibility characters,
    which changes mathematics: ``"x²"`` would become ``"x2"``, ``"½"`` ``"1⁄2"``, ``"ℝ"``
    ``"R"``, so two different problems (``x²`` and ``x2``) would share a key. NFC changes no
    character's meaning; it only chooses one of two encodings of the same character.
    It is applied again after lowercasing, which can produce a decomposable sequence, so the
    result is NFC and the function is idempotent."""
    return " ".join(unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).lower()).split())


def problem_text_sha256(text: str) -> str:
    """SHA-256 hex digest of the UTF-8 encoding of the raw (un-normalised) problem text.

    Not normalised, not even to NFC, on purpose: it commits to the exact text that was solved
    (the manifests record it), and an NFD copy is different bytes, tokenized differently.

    Raises ``UnicodeEncodeError`` for text holding lone surrogates (``load_problems``
    refuses such text, so loaded problems always hash)."""
    return sha256_text(text)


def problem_key(problem: Problem) -> str:
    """SHA-256 hex digest of the UTF-8 encoding of the normalized problem text
    (:func:`normalize_problem_text`, so NFC and NFD spellings of one text share a key): the
    exact-match routing key of the store.

    Raises ``UnicodeEncodeError`` for text holding lone surrogates."""
    return sha256_text(normalize_problem_text(problem.problem))


def family_of_id(problem_id: str) -> str:
    """A problem's family when its set does not give one: its id without a trailing ``-<n>`` (``mod-3`` -> ``mod``;
    ``2024-I-2`` -> ``2024-I``); an id without one is its own family."""
    head, sep, tail = problem_id.rpartition("-")
    return head if sep and tail.isdigit() else problem_id


def family(problem: Problem) -> str:
    """``problem.family`` when the set gives one (built-in problems), else :func:`family_of_id` of its id."""
    return problem.family or family_of_id(problem.id)
