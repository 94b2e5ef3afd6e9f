"""Retrieval quality of the router on the built-in families, without a model (``graftbench route-quality``).

A library of the first ``library_per_family`` built-in problems of each family is planted in a temporary store
(index rows from the texts under a fixed fake config fingerprint, as a deposit would write them: no model, no KV
state), and each of the next ``held_out_per_family`` problems of each family is routed with
:func:`graftbench.store.router.route`, once per ranker, through the same bounded candidate reads as ``eval --graft``.
The question is the one the router's similar route rests on: is the example it grafts of the problem's family?

For each ranker and family: ``library_top_same_family`` (the top of the ranker over the whole library, no MinHash
bound: the ranker alone), ``top_same_family`` (the top-ranked candidate, before the gate, is of the family),
``routed`` (a route passed the ``min_similarity`` gate), ``routed_same_family`` and ``routed_other_family`` (of
those, the example's family), and ``same_family_fraction`` = ``routed_same_family / held_out`` (a problem that is
not routed counts as a miss). ``with_candidates`` counts the held-out problems that share a MinHash band with a
deposit at all (the ceiling of every ranker).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .history import write_json_and_markdown
from ..problems.builtin import builtin_problems
from ..problems.types import Problem, normalize_problem_text, problem_key
from ..store.router import BM25_B, BM25_K1, RANKERS, rank_candidates, route

FINGERPRINT = "7" * 64  # a fixed fake config fingerprint: the rows are planted, no model computed them
RESULTS_STEM = "route-quality"
_COUNTS = ("library_top_same_family", "top_same_family", "routed", "routed_same_family", "routed_other_family")


def split_builtin(library_per_family: int, held_out_per_family: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """The built-in problems of every family (:func:`builtin_problems`, ``seed``): the first
    ``library_per_family`` of each family as the library, the next ``held_out_per_family`` as held out. Raises
    ``ValueError`` for a negative count or more problems than a family holds."""
    problems = builtin_problems(library_per_family + held_out_per_family, seed)
    library, held_out, seen = [], [], {}
    for problem in problems:
        k = seen[problem.family] = seen.get(problem.family, -1) + 1
        (library if k < library_per_family else held_out).append(problem)
    return library, held_out


def plant_library(store, library: list[Problem], fingerprint: str = FINGERPRINT) -> dict[str, Problem]:
    """Index each library problem in ``store`` as a deposit of it would be indexed (its normalized text, key and
    answer under ``fingerprint``; MinHash band keys), through :meth:`Store.plant` with a small stand-in file (no
    KV state: routing reads only the index). Returns ``{artifact_id: problem}``."""
    planted = {}
    for problem in library:
        text = normalize_problem_text(problem.problem)
        header = {"config_fingerprint": fingerprint, "positions": [0, 1], "problem_text": text,
                  "problem_key": problem_key(problem), "answer": problem.answer}
        planted[store.plant(f"route-quality stand-in for {problem.id}\n{text}\n".encode(), header)] = problem
    return planted


def _summary(rows: list[dict], rankers: tuple[str, ...]) -> dict:
    out = {"held_out": len(rows), "with_candidates": sum(r["candidates"] > 0 for r in rows)}
    for ranker in rankers:
        counts = {name: sum(bool(r[ranker][name]) for r in rows) for name in _COUNTS}
        counts["same_family_fraction"] = counts["routed_same_family"] / len(rows) if rows else 0.0
        out[ranker] = counts
    return out


def measure_route_quality(library_per_family: int = 2, held_out_per_family: int = 10, min_similarity: float = 0.6,
                          seed: int = 0, rankers: tuple[str, ...] = ("difflib", "bm25")) -> dict:
    """Route every held-out built-in problem against a library of built-in problems, once per ranker, and count
    how often the routed example is of the problem's own family (see the module docstring for each count).

    ``min_similarity`` is the router's gate (the ``difflib`` ratio of the top candidate, in [0, 1]). Returns a
    JSON-ready dict: the settings, ``per_family`` and ``overall`` counts (fractions in [0, 1]) and one row per
    held-out problem (its candidates, and per ranker the routed id, its family and the gate's ratio). No model,
    deterministic for its arguments. Raises ``ValueError`` for a ``min_similarity`` outside [0, 1], an unknown
    ranker, or counts the built-in families cannot supply.
    """
    if not 0.0 <= min_similarity <= 1.0:
        raise ValueError(f"min_similarity must be in [0, 1], got {min_similarity!r}")
    if library_per_family < 1 or held_out_per_family < 1:
        raise ValueError("the library and the held-out set need at least one problem per family")
    unknown = [r for r in rankers if r not in RANKERS]
    if unknown:
        raise ValueError(f"unknown ranker(s) {unknown}; choose among {', '.join(RANKERS)}")
    from ..store.folder import Store  # noqa: PLC0415 (brings in torch: kept out of the import of this module)

    library, held_out = split_builtin(library_per_family, held_out_per_family, seed)
    whole = [(f"library:{p.id}", normalize_problem_text(p.problem)) for p in library]
    whole_family = {f"library:{p.id}": p.family for p in library}
    rows = []
    with tempfile.TemporaryDirectory(prefix="graftbench-route-quality-") as folder:
        store = Store(Path(folder))
        planted = plant_library(store, library)
        for problem in held_out:
            text = normalize_problem_text(problem.problem)
            candidates = store.candidates(FINGERPRINT, text)
            row = {"id": problem.id, "family": problem.family, "candidates": len(candidates)}
            for ranker in rankers:
                ranked = rank_candidates(text, candidates, ranker)
                top_family = planted[ranked[0][0]].family if ranked else None
                library_top = whole_family[rank_candidates(text, whole, ranker)[0][0]]
                chosen = route(store, FINGERPRINT, problem_key(problem), text, min_similarity, ranker)
                family = planted[chosen.artifact_id].family if chosen.artifact_id else None
                routed_id = planted[chosen.artifact_id].id if chosen.artifact_id else None
                row[ranker] = {"kind": chosen.kind, "routed_id": routed_id,
                               "routed_family": family, "similarity": round(chosen.similarity, 6),
                               "library_top_same_family": library_top == problem.family,
                               "top_same_family": top_family == problem.family,
                               "routed": chosen.kind != "none",
                               "routed_same_family": family == problem.family,
                               "routed_other_family": family is not None and family != problem.family}
            rows.append(row)
    families = list(dict.fromkeys(p.family for p in held_out))
    import bm25s  # noqa: PLC0415

    return {"library_per_family": library_per_family, "held_out_per_family": held_out_per_family,
            "min_similarity": min_similarity, "seed": seed, "rankers": list(rankers), "families": families,
            "library": [p.id for p in library], "bm25": {"library": f"bm25s {bm25s.__version__}", "k1": BM25_K1,
                                                         "b": BM25_B, "method": "lucene"},
            "per_family": {f: _summary([r for r in rows if r["family"] == f], rankers) for f in families},
            "overall": _summary(rows, rankers), "problems": rows}


_TABLE = (("library_top_same_family", "top-1 same family, whole library"),
          ("top_same_family", "top-1 same family, candidates"),
          ("routed_other_family", "routed, other family"),
          ("routed_same_family", "routed, same family"))


def table_rows(result: dict) -> list[list[str]]:
    """The cells of the quality table, one row per family then ``overall``: family, held out, with candidates,
    and for each ranker the counts of :data:`_TABLE` as ``k/n`` (the last with its percentage). The same cells
    in the printed table and the markdown file."""
    out = []
    for name, summary in [*((f, result["per_family"][f]) for f in result["families"]), ("overall", result["overall"])]:
        cells = [name, str(summary["held_out"]), str(summary["with_candidates"])]
        for ranker in result["rankers"]:
            cells += [f"{summary[ranker][key]}/{summary['held_out']}" for key, _ in _TABLE]
            cells[-1] += f" ({100 * summary[ranker]['same_family_fraction']:.0f}%)"
        out.append(cells)
    return out


def table_header(result: dict) -> list[str]:
    """The column names of :func:`table_rows`."""
    return ["family", "held out", "with candidates",
            *(f"{ranker}: {label}" for ranker in result["rankers"] for _, label in _TABLE)]


def markdown(result: dict) -> str:
    """The measurement as markdown: what was routed against what, and the table of :func:`table_rows`."""
    lines = [f"# Router retrieval quality on the built-in families (seed {result['seed']})", "",
             f"Library: the first {result['library_per_family']} problems of each family, planted in a store (index "
             f"rows only, no model); held out: the next {result['held_out_per_family']} of each family, each routed "
             f"through the bounded MinHash candidates (at most 32) with the gate `--min-similarity "
             f"{result['min_similarity']}` (difflib ratio of the top candidate). BM25: {result['bm25']['library']}, "
             f"k1 = {result['bm25']['k1']}, b = {result['bm25']['b']}. \"routed same family\" is the fraction of "
             "held-out problems whose routed example is of their own family (not routed counts as a miss).", "",
             "| " + " | ".join(table_header(result)) + " |",
             "|---|" + "---:|" * (len(table_header(result)) - 1)]
    lines += ["| " + " | ".join(cells) + " |" for cells in table_rows(result)]
    return "\n".join(lines) + "\n"


def write_results(result: dict, out_dir: Path, stem: str = RESULTS_STEM, code: dict | None = None) -> list[Path]:
    """Write ``{stem}.json`` (the whole result, sorted keys) and ``{stem}.md`` under ``out_dir`` (created if
    needed), each atomically, an earlier pair moving to ``runs/`` first, naming ``code``, the code version read when
    the measurement started; returns the two paths. Raises ``OSError`` when they cannot be written."""
    return write_json_and_markdown(result, markdown(result), out_dir, stem, code)
