"""The router's BM25 ranking (graftbench/store/router.py) and its retrieval-quality measurement
(graftbench/bench/route_quality.py, ``graftbench route-quality``), on planted index rows: no model."""

from __future__ import annotations

import difflib
import json
import random

import bm25s
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graftbench.engine.torch import graft
from graftbench.store import router
from graftbench.problems.types import Problem, normalize_problem_text, problem_key
from graftbench.bench.route_quality import (measure_route_quality, plant_library, split_builtin, table_header,
                                            table_rows, write_results)
from graftbench.store.folder import Store

FP = "7" * 64


def _plant(store: Store, text: str, tag: str = "") -> str:
    text = normalize_problem_text(text)
    header = {"config_fingerprint": FP, "positions": [0, 1], "problem_text": text,
              "problem_key": problem_key(Problem("x", text, "0")), "answer": "0"}
    return store.plant(f"stand-in {tag}\n{text}".encode(), header)


def _route(store: Store, text: str, gate: float = 0.6, ranker: str = router.DEFAULT_RANKER) -> router.Route:
    text = normalize_problem_text(text)
    return router.route(store, FP, problem_key(Problem("q", text, "0")), text, gate, ranker)


def test_routing_lives_in_the_router_alone_and_ranks_with_bm25():
    assert not hasattr(graft, "route") and not hasattr(graft, "Route")
    assert router.DEFAULT_RANKER == "bm25"


def test_terms_are_words_without_numbers_or_stop_words():
    text = normalize_problem_text(r"Find the sum of the digits of $11!$ and of $n \cdot 2$ in base 10.")
    assert router.terms(text) == ["find", "sum", "digits", "n", r"\cdot", "base"]
    assert router.terms("$2 + 2$") == []


def test_ranking_is_deterministic_whatever_the_candidates_order():
    library, held_out = split_builtin(3, 4, seed=0)
    candidates = [(f"{i:064x}", normalize_problem_text(p.problem)) for i, p in enumerate(library)]
    for problem in held_out:
        query = normalize_problem_text(problem.problem)
        first = router.rank_candidates(query, candidates)
        assert len(first) == len(candidates)
        assert [s for _, s in first] == sorted((s for _, s in first), reverse=True)
        for seed in range(5):
            shuffled = candidates[:]
            random.Random(seed).shuffle(shuffled)
            assert router.rank_candidates(query, shuffled) == first


def test_equal_scores_go_to_the_ratio_then_to_the_artifact_id():
    text = "find the remainder when $7^{222}$ is divided by $1000$."
    twins = [("b" * 64, text), ("a" * 64, text)]
    query = "find the remainder when $7^{223}$ is divided by $1000$."
    assert [aid for aid, _ in router.rank_candidates(query, twins)] == ["a" * 64, "b" * 64]
    closer = [("a" * 64, "find the remainder when $9^{999}$ is divided by $1000$."),
              ("b" * 64, "find the remainder when $7^{224}$ is divided by $1000$.")]
    ranked = router.rank_candidates(query, closer)
    assert ranked[0][1] == ranked[1][1]  # the same words: the same BM25 score
    assert ranked[0][0] == "b" * 64  # the ratio sees the digits
    numbers_only = [("a" * 64, "$9+9$"), ("b" * 64, "$2+2$")]  # no terms: BM25 ties at 0, the ratio ranks
    assert [aid for aid, _ in router.rank_candidates("$2+3$", numbers_only)] == ["b" * 64, "a" * 64]


def test_bm25_weighs_the_words_that_tell_candidates_apart():
    gcd = ("g" * 64, "find the remainder when the least common multiple of $8554$ and $8218$ is divided by $1000$.")
    mod = ("m" * 64, "find the remainder when $51^{872}$ is divided by $1000$.")
    divisors = ("d" * 64, "find the remainder when the sum of the positive divisors of $4009$ is divided by $1000$.")
    query = "find the remainder when the sum of the positive divisors of $71280$ is divided by $1000$."
    ranked = router.rank_candidates(query, [gcd, mod, divisors])
    assert ranked[0][0] == "d" * 64 and ranked[0][1] > ranked[1][1] > 0
    assert all(s >= 0 for s in router.bm25_scores(query, [gcd[1], mod[1], divisors[1]]))
    assert router.bm25_scores("$2+2$", [mod[1]]).tolist() == [0.0]


def test_an_unknown_ranker_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown ranker"):
        router.rank_candidates("a", [("a" * 64, "a")], "tfidf")
    with pytest.raises(ValueError, match="unknown ranker"):
        _route(Store(tmp_path), "a", ranker="tfidf")


@pytest.mark.parametrize("ranker", router.RANKERS)
def test_the_gate_refuses_a_weak_match(tmp_path, ranker):
    store = Store(tmp_path)
    deposited = _plant(store, "How many positive divisors of $357500$ are perfect squares?")
    weak = "How many positive divisors does $1449175$ have?"  # another question about divisors: ratio 0.58
    assert store.candidates(FP, normalize_problem_text(weak))  # shares a band: only the gate says no
    refused = _route(store, weak, 0.6, ranker)
    assert refused.kind == "none" and refused.artifact_id is None and 0 < refused.similarity < 0.6
    taken = _route(store, weak, refused.similarity, ranker)
    assert taken == router.Route("similar", deposited, refused.similarity)
    near = _route(store, "How many positive divisors of $357600$ are perfect squares?", 0.6, ranker)
    assert near.kind == "similar" and near.artifact_id == deposited and 0.6 <= near.similarity < 1


@pytest.mark.parametrize("ranker", router.RANKERS)
def test_an_exact_route_still_wins(tmp_path, ranker):
    store = Store(tmp_path)
    text = "Find the remainder when $7^{222}$ is divided by $1000$."
    exact = _plant(store, text)
    for i, other in enumerate(["Find the remainder when $7^{222}$ is divided by $1000$ exactly.",
                               "Find the remainder when $7^{222}$ is divided by $100$."]):
        _plant(store, other, str(i))
    assert _route(store, "  find the REMAINDER when $7^{222}$ is divided by $1000$. ", 1.0, ranker) \
        == router.Route("exact", exact, 1.0)


def test_a_held_out_problem_routes_to_its_family_when_the_library_holds_it(tmp_path):
    library, held_out = split_builtin(2, 3, seed=0)
    store = Store(tmp_path)
    planted = plant_library(store, library, FP)
    for problem in held_out:
        if problem.family not in ("mod", "paths", "base"):
            continue
        chosen = _route(store, problem.problem)
        assert chosen.kind == "similar", problem.id
        assert planted[chosen.artifact_id].family == problem.family, problem.id


def test_the_quality_measurement_returns_what_the_table_shows(tmp_path):
    result = measure_route_quality(library_per_family=2, held_out_per_family=3, min_similarity=0.6, seed=0)
    assert result["rankers"] == ["difflib", "bm25"] and len(result["problems"]) == 18
    rows = table_rows(result)
    assert [r[0] for r in rows] == [*result["families"], "overall"]
    assert len(table_header(result)) == len(rows[0]) == 3 + 4 * 2
    overall = result["overall"]
    for ranker, offset in (("difflib", 3), ("bm25", 7)):
        keys = ("library_top_same_family", "top_same_family", "routed_other_family", "routed_same_family")
        counted = {key: sum(p[ranker][key] for p in result["problems"]) for key in keys}
        assert counted == {k: overall[ranker][k] for k in counted}
        assert rows[-1][offset:offset + 4] == [
            f"{counted['library_top_same_family']}/18", f"{counted['top_same_family']}/18",
            f"{counted['routed_other_family']}/18",
            f"{counted['routed_same_family']}/18 ({100 * counted['routed_same_family'] / 18:.0f}%)"]
        assert overall[ranker]["same_family_fraction"] == counted["routed_same_family"] / 18
        assert 0 <= overall[ranker]["same_family_fraction"] <= 1
    mod = result["per_family"]["mod"]
    assert rows[0][:3] == ["mod", "3", str(mod["with_candidates"])]
    assert measure_route_quality(2, 3, 0.6, 0) == result  # deterministic
    json_path, md_path = write_results(result, tmp_path)
    written = json.loads(json_path.read_text())
    assert set(written.pop("provenance")) == {"created_utc", "code", "machine"}  # added by the writer
    assert written == result
    assert "| " + " | ".join(rows[-1]) + " |" in md_path.read_text()
    with pytest.raises(ValueError, match="min_similarity"):
        measure_route_quality(min_similarity=1.5)


def test_route_quality_command_prints_and_writes(tmp_path):
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    result = CliRunner().invoke(app, ["route-quality", "--library-per-family", "1", "--held-out-per-family", "2",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "overall" in result.output
    written = json.loads((tmp_path / "route-quality.json").read_text())
    assert written["library_per_family"] == 1 and written["overall"]["held_out"] == 12


_WORDS = st.sampled_from(["sum", "digits", "paths", "grid", "prime", "remainder", "of", "the", "find", "12", "7"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_WORDS, min_size=1, max_size=8).map(" ".join), min_size=1, max_size=12),
       st.lists(_WORDS, min_size=1, max_size=8).map(" ".join), st.sampled_from(router.RANKERS))
def test_the_top_candidate_is_the_first_of_the_full_ranking(texts, query, ranker):
    """``choose`` finds the top without ranking every candidate (ratios only for ties at the top score, pruned by
    ``quick_ratio``); it must pick what the full ranking puts first, with that candidate's gate ratio."""
    candidates = [(f"{i:02d}", text) for i, text in enumerate(texts)]
    first = router.rank_candidates(query, candidates, ranker)[0][0]
    assert router.top_candidate(query, candidates, ranker) == (first, router.gate_ratio(query, dict(candidates)[first]))


def test_candidate_rows_are_read_by_rowid_not_by_scanning_the_fingerprint(tmp_path):
    """With a long IN list SQLite's planner preferred the (config_fingerprint, problem_key) index and scanned every
    row of the fingerprint, so a similarity lookup grew with the store (39 ms at 100,000 artifacts)."""
    import sqlite3

    from graftbench.store.index import ROUTE_CANDIDATES, candidate_rows_sql

    store = Store(tmp_path / "s")
    for i in range(40):
        _plant(store, f"problem number {i} about digits", str(i))
    n = ROUTE_CANDIDATES * 4
    with sqlite3.connect(store.index_path) as db:
        plan = db.execute("EXPLAIN QUERY PLAN " + candidate_rows_sql(n), (*range(1, n + 1), FP)).fetchall()
    assert [row[-1] for row in plan] == ["SEARCH artifacts USING INTEGER PRIMARY KEY (rowid=?)"]


_TEXT = st.text(alphabet=st.sampled_from("ab cd\\$0123xyz,.éπ"), max_size=400)


@settings(max_examples=300, deadline=None)
@given(_TEXT, _TEXT)
def test_the_gate_ratio_is_the_standard_librarys_difflib_ratio(query, text):
    """The router's ratio comes from cydifflib (compiled); it must equal ``difflib.SequenceMatcher``'s, with
    ``autojunk`` off, on texts long enough (over 200 characters) that ``autojunk`` would have mattered."""
    assert router.gate_ratio(query, text) == difflib.SequenceMatcher(None, query, text, autojunk=False).ratio()


def _bm25_full_vocabulary(query: str, texts: list[str]) -> np.ndarray:
    """BM25 through bm25s with every term of the texts in the vocabulary, as the router computed it before it
    folded the terms no query asks for into one id."""
    docs = [router.terms(text) for text in texts]
    vocab = {term: i for i, term in enumerate(sorted({t for doc in docs for t in doc}))}
    ids = [vocab[t] for t in sorted(set(router.terms(query))) if t in vocab]
    if not ids:
        return np.zeros(len(texts))
    retriever = bm25s.BM25(k1=router.BM25_K1, b=router.BM25_B, method="lucene", dtype="float64", backend="numpy",
                           csc_backend="numpy")
    retriever.index(([[vocab[t] for t in doc] for doc in docs], vocab), show_progress=False)
    return np.asarray(retriever.get_scores_from_ids(ids), dtype=np.float64)


def _bm25_textbook(query: str, texts: list[str]) -> np.ndarray:
    """Robertson and Zaragoza (2009), Lucene's idf: sum over distinct query terms t of
    idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl)), idf = ln(1 + (N - df + 0.5) / (df + 0.5))."""
    docs = [router.terms(text) for text in texts]
    lengths = np.array([len(doc) for doc in docs], dtype=np.float64)
    scores = np.zeros(len(docs))
    for term in set(router.terms(query)):
        tf = np.array([doc.count(term) for doc in docs], dtype=np.float64)
        df = np.count_nonzero(tf)
        if df:
            norm = router.BM25_K1 * (1 - router.BM25_B + router.BM25_B * lengths / lengths.mean())
            scores += np.log(1 + (len(docs) - df + 0.5) / (df + 0.5)) * tf / (tf + norm)
    return scores


_SENTENCE = st.lists(st.sampled_from(["sum", "digits", "paths", "grid", "prime", "remainder", "of", "the", "find",
                                      "12", "7", "\\cdot", "tiles", "coins"]), max_size=25).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(_SENTENCE, st.lists(_SENTENCE, min_size=1, max_size=32))
def test_bm25_scores_equal_a_full_vocabulary_index_and_the_textbook_formula(query, texts):
    """Folding the terms the query does not hold into one id leaves every score bit for bit as a full-vocabulary
    bm25s index gives it, and equal to the formula written out (to rounding)."""
    scores = router.bm25_scores(query, texts)
    assert scores.tobytes() == _bm25_full_vocabulary(query, texts).tobytes()
    np.testing.assert_allclose(scores, _bm25_textbook(query, texts), rtol=1e-12, atol=1e-12)
