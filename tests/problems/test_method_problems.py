"""The method-transfer problem set (``methods``): every key re-derived here by a solver of its own that reads only
the problem text, answers distinct across the whole set (copying an example's answer scores zero), slices that name
the same problems whatever their end, and a frozen identity for the slices the transfer experiment uses."""

from __future__ import annotations

import re

import pytest

from graftbench.results.anchor import resolve_recorded
from graftbench.problems.methods import METHOD_FAMILIES, METHODS_MAX_PER_FAMILY, method_problems
from graftbench.problems.loading import load_problems
from graftbench.problems.types import ProblemSetError, problem_set_sha256
from graftbench.verify.answers import verify_answer

FAMILIES = [fam.name for fam in METHOD_FAMILIES]


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _grid_detour(text: str) -> int:
    m, n, p, q = _ints(text)[2:6]  # (0,0) first
    ways = [[0] * (n + 1) for _ in range(m + 1)]
    for x in range(m + 1):
        for y in range(n + 1):
            if (x, y) == (p, q):
                continue
            ways[x][y] = 1 if x == y == 0 else (ways[x - 1][y] if x else 0) + (ways[x][y - 1] if y else 0)
    return ways[m][n] % 1000


def _incl_excl(text: str) -> int:
    _, n, *divisors = _ints(text)
    return sum(1 for k in range(1, n + 1) if all(k % d for d in divisors))


def _fermat(text: str) -> int:
    a, e, p = _ints(text)
    return pow(a, e, p)


def _recurrence(text: str) -> int:
    match = re.search(r"a_1 = (\d+)\$, \$a_2 = (\d+)\$ and \$a_k = (\d+ )?a_\{k-1\} \+ (\d+ )?a_\{k-2\}.*"
                      r"\$a_\{(\d+)\}\$", text)
    x, y, s, t, n = match.groups()
    terms = [int(x), int(y)]
    while len(terms) < int(n):
        terms.append(int(s or 1) * terms[-1] + int(t or 1) * terms[-2])
    return terms[-1] % 1000


def _floor_sum(text: str) -> int:
    _, top, p, q = _ints(text)[:4]
    return sum(p * k // q for k in range(1, top + 1))


def _crt(text: str) -> int:
    r1, m1, r2, m2, r3, m3 = _ints(text)
    return next(x for x in range(1, m1 * m2 * m3 + 1) if (x % m1, x % m2, x % m3) == (r1, r2, r3))


SOLVERS = {"grid-detour": _grid_detour, "incl-excl": _incl_excl, "fermat": _fermat, "recurrence": _recurrence,
           "floor-sum": _floor_sum, "crt": _crt}


@pytest.fixture(scope="module")
def whole_set():
    return method_problems(n_per_family=METHODS_MAX_PER_FAMILY)


def test_every_key_equals_an_independent_solution_from_the_text_alone(whole_set):
    assert set(SOLVERS) == set(FAMILIES)
    wrong = [(p.id, p.answer, SOLVERS[p.family](p.problem)) for p in whole_set
             if str(SOLVERS[p.family](p.problem)) != p.answer]
    assert wrong == []


def test_no_two_problems_share_an_answer_or_a_text(whole_set):
    assert len(whole_set) == len(FAMILIES) * METHODS_MAX_PER_FAMILY
    assert len({p.answer for p in whole_set}) == len(whole_set)
    assert len({p.problem for p in whole_set}) == len(whole_set)
    assert all(re.fullmatch(r"0|[1-9]\d{0,2}", p.answer) for p in whole_set)


def test_every_worked_solution_ends_with_its_key_and_verifies(whole_set):
    for p in whole_set[::7]:
        assert p.solution.splitlines()[-1] == f"Final answer: {p.answer}"
        assert verify_answer(p.solution, p.answer).correct, p.id


def test_the_first_problems_of_a_family_do_not_depend_on_how_many_are_asked_for():
    small, large = method_problems(3), method_problems(9)
    for family in FAMILIES:
        assert [p for p in small if p.family == family] == [p for p in large if p.family == family][:3]
    assert [p.id for p in small[:3]] == ["grid-detour-0", "grid-detour-1", "grid-detour-2"]


def test_slices_load_by_name_and_are_disjoint():
    pilot, held_out = load_problems("methods:0-4"), load_problems("methods:4-12")
    assert len(pilot) == 24 and len(held_out) == 48
    assert {p.family for p in held_out} == set(FAMILIES)
    assert not {p.answer for p in pilot} & {p.answer for p in held_out}
    by_id = {p.id: p for p in load_problems("methods:12")}
    assert all(by_id[p.id] == p for p in pilot + held_out)
    assert load_problems("methods") == method_problems()


@pytest.mark.parametrize("source, message", [
    ("methods:5-2", "holds no problem"), ("methods:x", "write methods"),
    (f"methods:{METHODS_MAX_PER_FAMILY + 1}", f"hold {METHODS_MAX_PER_FAMILY} distinct problems each")])
def test_bad_slices_are_refused_with_the_set_named(source, message):
    with pytest.raises(ProblemSetError, match=message):
        load_problems(source)


def test_the_experiment_slices_keep_their_identity():
    # The pre-registered transfer experiment names these digests: a change to any generator fails here first.
    assert problem_set_sha256(load_problems("methods:0-4")) == PILOT_SHA256
    assert problem_set_sha256(load_problems("methods:4-12")) == HELD_OUT_SHA256


def test_a_manifest_naming_a_methods_slice_is_anchored_without_a_file():
    problem_set, why = resolve_recorded({"problem_set": {"source": "methods:4-12"}})
    assert why == "" and problem_set is not None
    assert problem_set_sha256(problem_set.problems) == HELD_OUT_SHA256


def test_answers_spread_over_the_range(whole_set):
    answers = sorted(int(p.answer) for p in whole_set)
    assert answers[0] < 50 and answers[-1] > 950
    assert len({a // 100 for a in answers}) == 10


PILOT_SHA256 = "ec81d7271775809160faaa4b7f31a6badf31aee791cb5cad62ce5838a5c7b97e"
HELD_OUT_SHA256 = "1742fb7e0126f1c1894dd3d5f689a130c4134c31129eb9adf3af08d3f0e34dd0"
