"""The router: which one artifact to graft for a query (*torch-free*).

An exact match on the normalized problem text's key first (:meth:`Store.find_exact`). Otherwise the candidates are
the at most 32 deposits that share the most MinHash bands with the query (:meth:`Store.candidates`, bounded
reads whatever the store holds; :meth:`Store.lookup` reads both in one connection), ranked by **BM25** over their
normalized problem texts (Robertson and Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond",
*Foundations and Trends in Information Retrieval* 3(4), 2009), computed with the ``bm25s`` library (Lucene's
variant: k1 = 1.5, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))), then by the ``difflib.SequenceMatcher``
ratio among equal BM25 scores, then by artifact id.

BM25's terms are the words of the text (letters, a LaTeX command with its backslash) less Lucene's 33 English
stop words (``bm25s.stopwords.STOPWORDS_EN``); numbers are not terms. A problem's numbers are its instance, its
words say what kind of problem it is: with numbers as terms, a "1" shared by chance with a lattice-path problem's
"(1,1)" outweighed every word of a digit-sum problem (idf is high for what only one candidate holds). Two
instances of one template (same words, other numbers) score the same, and the ratio, which sees the digits,
picks the closer one. The document frequencies are those of the candidate set, the only rows a lookup reads.

The confidence gate stays the ``difflib`` ratio between the query and the top-ranked candidate, in [0, 1]: BM25
scores have no fixed scale (they grow with the query's length and move with the candidate set's document
frequencies), and dividing by the query's self-score does not bound them by 1 either (length normalization lets
a shorter document outscore the query itself). So ``--min-similarity`` keeps the meaning and the default (0.6) it
had with the difflib ranker, and :attr:`Route.similarity` stays a ratio. Only the top candidate is gated: a weak
best match means no graft, not a walk down the ranking. The ratio is computed by ``cydifflib`` (Max Bachmann's
compiled port of the standard library's ``difflib``, whose ``SequenceMatcher`` it reproduces: same matching blocks,
same ratio), about ten times faster on a problem statement; ``tests/store/test_router.py`` checks it against
``difflib`` on generated texts.

Routing is deterministic: BM25 is computed in float64 and summed term by term in a fixed order, so a candidate's
score does not depend on the order the candidates were read in; ties go to the ratio, then to the artifact id.
The ``difflib`` ranker (the ratio as both ranking and gate, as graftbench routed before) is kept for comparison
(:mod:`graftbench.bench.route_quality`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

# bm25s and cydifflib are imported where a route is ranked, not at import: check-exact and the CUDA path import
# graft (which re-exports route) on hosts that hold neither (docs/gpu.md).

if TYPE_CHECKING:  # the router only calls a store's lookups; importing Store would bring in torch
    from .folder import Store

RANKERS = ("bm25", "difflib")
DEFAULT_RANKER = "bm25"
BM25_K1 = 1.5
BM25_B = 0.75
# Words: runs of letters, a LaTeX command keeping its backslash; digits, punctuation and spaces separate them.
_WORD = re.compile(r"\\?[^\W\d_]+")


def _stop_words() -> frozenset[str]:
    """Lucene's 33 English stop words (``bm25s.stopwords.STOPWORDS_EN``)."""
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


@dataclass(frozen=True)
class Route:
    """The router's choice: ``kind`` is ``exact``, ``similar`` or ``none``; ``similarity`` in [0, 1]."""

    kind: str
    artifact_id: str | None
    similarity: float


def terms(normalized_text: str) -> list[str]:
    """The BM25 terms of a normalized problem text, in order: its words (runs of letters; a LaTeX command keeps
    its backslash, ``\\cdot``) less Lucene's English stop words; numbers are not terms. Empty for a text with
    none (``"$2+2$"``)."""
    stop = _stop_words()
    return [word for word in _WORD.findall(normalized_text) if word not in stop]


def gate_ratio(query: str, text: str) -> float:
    """The confidence gate's similarity: ``difflib.SequenceMatcher`` ratio of two normalized texts, in [0, 1]
    (1 for equal texts; 2·matches / total length, ``autojunk`` off)."""
    import cydifflib

    return cydifflib.SequenceMatcher(None, query, text, autojunk=False).ratio()


def bm25_scores(query: str, texts: list[str]) -> np.ndarray:
    """BM25 score of each of ``texts`` (normalized) for ``query`` (normalized), float64 ``[len(texts)]``, >= 0.

    Robertson and Zaragoza (2009), Lucene's variant through ``bm25s`` (k1 = 1.5, b = 0.75) over :func:`terms`,
    with the document frequencies and mean length of ``texts`` and each distinct query term counted once. A text
    that shares no term with the query scores 0; all are 0 when the query or every text has no terms.
    """
    vocab = {term: i for i, term in enumerate(sorted(set(terms(query))), start=1)}
    # A score needs only the query terms' counts, each text's length and the mean length: every other term is
    # indexed as one id (0), which keeps the lengths and skips work on terms no query asks for.
    docs = [[vocab.get(term, 0) for term in terms(text)] for text in texts]
    ids = sorted({i for doc in docs for i in doc} - {0})
    if not ids:
        return np.zeros(len(texts), dtype=np.float64)
    import bm25s

    retriever = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene", dtype="float64", backend="numpy",
                           csc_backend="numpy")
    retriever.index((docs, {"": 0, **vocab}), show_progress=False)
    return np.asarray(retriever.get_scores_from_ids(ids), dtype=np.float64)


def rank_candidates(query: str, candidates: list[tuple[str, str]],
                    ranker: str = DEFAULT_RANKER) -> list[tuple[str, float]]:
    """Rank ``(artifact_id, normalized_text)`` candidates for a normalized ``query``: every candidate as
    ``(artifact_id, score)``, best first.

    ``bm25``: by BM25 score (:func:`bm25_scores`, Robertson and Zaragoza 2009; >= 0, no fixed scale), equal scores
    by :func:`gate_ratio` (computed only for them), then by artifact id. ``difflib``: by :func:`gate_ratio` (in
    [0, 1]), then by artifact id. The result does not depend on the order of ``candidates``. Raises
    ``ValueError`` for another ranker.
    """
    if ranker == "bm25":
        scores = [float(s) for s in bm25_scores(query, [text for _, text in candidates])]
        ties = Counter(scores)
        ratio = {aid: gate_ratio(query, text) for (aid, text), s in zip(candidates, scores) if ties[s] > 1}
        order = sorted(zip(candidates, scores), key=lambda item: (-item[1], -ratio.get(item[0][0], 0.0), item[0][0]))
        return [(aid, score) for (aid, _), score in order]
    if ranker == "difflib":
        scored = [(aid, gate_ratio(query, text)) for aid, text in candidates]
        return sorted(scored, key=lambda item: (-item[1], item[0]))
    raise ValueError(f"unknown ranker {ranker!r}; choose one of {', '.join(RANKERS)}")


def _best_by_ratio(query: str, tied: list[tuple[str, str]]) -> tuple[str, float]:
    """Among ``(artifact_id, text)`` candidates, the one with the highest :func:`gate_ratio` (then the smallest id)
    and that ratio. Candidates are tried in order of ``quick_ratio`` (an upper bound of the ratio, linear time), and
    the search stops when the next bound is below the best ratio found: the result equals computing every ratio."""
    import cydifflib

    bounded = []
    for aid, text in tied:
        matcher = cydifflib.SequenceMatcher(None, query, text, autojunk=False)
        bounded.append((-matcher.quick_ratio(), aid, matcher))
    bounded.sort(key=lambda item: (item[0], item[1]))
    best_id, best = None, -1.0
    for negative_bound, aid, matcher in bounded:
        if -negative_bound < best:
            break
        ratio = matcher.ratio()
        if ratio > best or (ratio == best and aid < best_id):
            best_id, best = aid, ratio
    return best_id, best


def top_candidate(query: str, candidates: list[tuple[str, str]],
                  ranker: str = DEFAULT_RANKER) -> tuple[str, float] | None:
    """The first of :func:`rank_candidates`' ranking and its :func:`gate_ratio` with ``query``, without ranking the
    rest: ``bm25`` computes ratios only for the candidates tied at the top score (and of those only as many as
    :func:`_best_by_ratio` needs). ``None`` without candidates; ``ValueError`` for an unknown ranker."""
    if not candidates:
        return None
    if ranker == "bm25":
        scores = bm25_scores(query, [text for _, text in candidates])
        best = scores.max()
        tied = [candidate for candidate, score in zip(candidates, scores) if score == best]
        if len(tied) == 1:
            return tied[0][0], gate_ratio(query, tied[0][1])
        return _best_by_ratio(query, tied)
    if ranker == "difflib":
        return _best_by_ratio(query, candidates)
    raise ValueError(f"unknown ranker {ranker!r}; choose one of {', '.join(RANKERS)}")


def choose(query: str, candidates: list[tuple[str, str]], min_similarity: float,
           ranker: str = DEFAULT_RANKER) -> Route:
    """The similarity route among ``(artifact_id, normalized_text)`` ``candidates`` (no exact lookup): the
    top-ranked candidate (:func:`top_candidate`, the first of :func:`rank_candidates`) as kind ``similar`` if its
    :func:`gate_ratio` with ``query`` reaches ``min_similarity`` (in [0, 1]), else kind ``none`` with that ratio
    (0 with no candidates). Raises ``ValueError`` for an unknown ranker."""
    top = top_candidate(query, candidates, ranker)
    if top is None:
        return Route("none", None, 0.0)
    top_id, ratio = top
    return Route("similar", top_id, ratio) if ratio >= min_similarity else Route("none", None, ratio)


def route(store: Store, config_fingerprint: str, problem_key: str, normalized_text: str, min_similarity: float,
          ranker: str = DEFAULT_RANKER) -> Route:
    """Pick the one artifact to graft for a query.

    Exact match on the normalized problem text's key (``problem_key``, a SHA-256 hex) first, whatever the
    ranker and the gate; otherwise :func:`choose` among the at most 32 deposits that share the most MinHash bands
    with ``normalized_text`` (:meth:`Store.candidates`, bounded reads): ranked by BM25 (Robertson and Zaragoza
    2009) by default, gated by the ``difflib`` ratio of the top one against ``min_similarity`` (in [0, 1]);
    otherwise kind ``none``. Raises ``ValueError`` for an unknown ranker and :class:`StoreError` for a
    damaged index.
    """
    if ranker not in RANKERS:
        raise ValueError(f"unknown ranker {ranker!r}; choose one of {', '.join(RANKERS)}")
    exact, candidates = store.lookup(config_fingerprint, problem_key, normalized_text)
    if exact:
        return Route("exact", exact, 1.0)
    return choose(normalized_text, candidates, min_similarity, ranker)


def route_other_family(store: Store, config_fingerprint: str, normalized_text: str, family: str,
                       ranker: str = DEFAULT_RANKER) -> Route:
    """The other-family control: the top-ranked deposit (:func:`rank_candidates`) among those of another family
    than ``family`` (:meth:`Store.family_candidates`: every such deposit, not only band candidates), with no
    similarity gate, as kind ``other-family`` with its :func:`gate_ratio`; kind ``none`` when the store holds no
    deposit of another family. Raises ``ValueError`` for an unknown ranker."""
    return _top_of(store.family_candidates(config_fingerprint, family, exclude=True), normalized_text,
                   "other-family", ranker)


def route_top_ranked(store: Store, config_fingerprint: str, normalized_text: str,
                     ranker: str = DEFAULT_RANKER) -> Route:
    """The graft with the gate off: the top-ranked deposit (:func:`rank_candidates`) of the whole library
    (:meth:`Store.family_candidates` with no family: every deposit, not only those sharing a MinHash band), with
    no similarity gate, as kind ``similar`` with its :func:`gate_ratio`; kind ``none`` only when the store holds no
    deposit under this config. Unlike :func:`route` with ``min_similarity`` 0, a problem that shares no band with
    any deposit is grafted too. Reads every deposit: for experiments on a library, not routing at scale. Raises
    ``ValueError`` for an unknown ranker."""
    return _top_of(store.family_candidates(config_fingerprint, None), normalized_text, "similar", ranker)


def _top_of(candidates: list[tuple[str, str]], normalized_text: str, kind: str, ranker: str) -> Route:
    if ranker not in RANKERS:
        raise ValueError(f"unknown ranker {ranker!r}; choose one of {', '.join(RANKERS)}")
    top = top_candidate(normalized_text, candidates, ranker)
    if top is None:
        return Route("none", None, 0.0)
    return Route(kind, *top)
