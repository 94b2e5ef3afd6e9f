"""graftbench.results.metrics: avg@N, pass@k, maj@N, the intervals and the copy controls, on hand-made samples and on
the committed AIME 2024 manifests. No model."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graftbench.results.manifest import load_manifest, recorded_verifier_version
from graftbench.results.metrics import (Z95, bootstrap_interval, copy_controls, family_of, mean_pass_at_k,
                                        newcombe_paired_interval, paired_difference, pass_at_k, summarize,
                                        wilson_interval)
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(REFERENCE_MANIFESTS.glob("aime2024-*.json"))


def sample(pid: str, correct: bool, index: int = 0, extracted: str | None = None, mode: str = "baseline", **extra):
    return {"problem_id": pid, "correct": correct, "extracted": extracted if extracted is not None or not correct
            else "1", "sample_index": index, "decode_tokens": 10, "ttft_s": 0.5, "wall_s": 1.0, "energy_j": 2.0,
            "mode": mode, **extra}


def problems(n: int, key: str = "1") -> list[dict]:
    return [{"id": f"p-{i}", "problem_sha256": f"{i:064x}", "key": key} for i in range(n)]


def run_from(table: list[list[bool]]) -> tuple[list[dict], list[dict]]:
    """Samples from a table of verdicts: one row per problem, one column per sample."""
    probs = problems(len(table))
    samples = [sample(p["id"], c, j, "1" if c else "2") for p, row in zip(probs, table) for j, c in enumerate(row)]
    return samples, probs


verdict_tables = st.integers(1, 12).flatmap(
    lambda n: st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=1, max_size=8))


# ---- pass@k ----


@settings(max_examples=150, deadline=None)
@given(verdict_tables)
def test_pass_at_1_equals_avg_at_n_for_every_n(table):
    samples, probs = run_from(table)
    summary = summarize(samples, probs, resamples=200)
    assert summary["pass_at_k"]["1"] == summary["avg_at_n"]
    exact_avg = sum((Fraction(sum(row), len(row)) for row in table), Fraction(0)) / len(table)
    assert mean_pass_at_k([(len(row), sum(row)) for row in table])[0] == exact_avg


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=5), st.integers(1, 1000))
def test_pass_at_1_stays_exact_for_large_n(corrects, n):
    """The drift a float or a biased estimator shows as N grows: pass@1 must stay c/n exactly up to n = 1000."""
    counts = [(n, min(c, n)) for c in corrects]
    assert mean_pass_at_k(counts, 1)[0] == sum((Fraction(c, n) for n, c in counts), Fraction(0)) / len(counts)


@settings(max_examples=150, deadline=None)
@given(verdict_tables)
def test_pass_at_n_is_the_fraction_of_problems_with_a_correct_sample_and_pass_at_k_is_monotone(table):
    samples, probs = run_from(table)
    summary = summarize(samples, probs, resamples=200)
    n = len(table[0])
    expected = Fraction(sum(1 for row in table if any(row)), len(table))
    assert mean_pass_at_k([(n, sum(row)) for row in table])[-1] == expected
    assert summary["pass_at_k"][str(n)] == round(float(expected), 6) == summary["pass_at_n"]
    values = [summary["pass_at_k"][str(k)] for k in range(1, n + 1)]
    assert values == sorted(values)
    exact = mean_pass_at_k([(n, sum(row)) for row in table])
    assert all(a <= b for a, b in zip(exact, exact[1:]))


@pytest.mark.parametrize("n, c, k", [(10, 3, 1), (10, 3, 2), (10, 3, 8), (10, 0, 5), (10, 10, 1), (7, 5, 3),
                                     (1000, 1, 999), (1000, 500, 10)])
def test_pass_at_k_is_the_unbiased_estimator(n, c, k):
    assert pass_at_k(n, c, k) == 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_pass_at_k_refuses_impossible_counts():
    for n, c, k in [(5, 6, 1), (5, 2, 0), (5, 2, 6), (5, -1, 1)]:
        with pytest.raises(ValueError, match=rf"pass@k needs .* got n={n}, c={c}, k={k}"):
            pass_at_k(n, c, k)


def test_varying_samples_per_problem_take_k_up_to_the_smallest_n():
    samples, probs = run_from([[True, False, False], [False, True], [True, True, True, False]])
    summary = summarize(samples, probs, resamples=200)
    assert sorted(summary["pass_at_k"]) == ["1", "2"]
    assert summary["samples_per_problem"] == {"min": 2, "max": 4}
    assert summary["accuracy_ci95_method"] == "bootstrap"
    assert summary["avg_at_n"] == round((1 / 3 + 1 / 2 + 3 / 4) / 3, 6)


# ---- maj@N ----


def test_majority_vote_ignores_missing_answers_and_breaks_ties_by_sample_index():
    probs = problems(3, key="7")
    samples = [
        # p-0: 7 twice, 5 once, two without an answer: 7 wins
        sample("p-0", True, 0, "7"), sample("p-0", False, 1, "5"), sample("p-0", True, 2, "7"),
        {**sample("p-0", False, 3), "extracted": None}, {**sample("p-0", False, 4), "extracted": None},
        # p-1: a tie 5 / 7; 5 reached first (sample_index 0, though listed last): 5 wins, so incorrect
        sample("p-1", True, 1, "7"), sample("p-1", False, 2, "5"), sample("p-1", True, 3, "7"),
        sample("p-1", False, 0, "5"),
        # p-2: nobody answered: incorrect
        {**sample("p-2", False, 0), "extracted": None},
    ]
    summary = summarize(samples, probs, resamples=200)
    assert summary["maj_at_n"] == round(1 / 3, 6)
    assert summary["maj_at_n_ci95"] == [round(v, 6) for v in wilson_interval(1, 3)]
    swapped = [s if s["problem_id"] != "p-1" else {**s, "sample_index": 3 - s["sample_index"]} for s in samples]
    assert summarize(swapped, probs, resamples=200)["maj_at_n"] == round(2 / 3, 6)  # now 7 is reached first


# ---- intervals ----


@pytest.mark.parametrize("x, n, low, high", [
    # Newcombe (1998), Statistics in Medicine 17:857-872, Table I, method 3 (Wilson score, no continuity correction)
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718),
])
def test_wilson_interval_matches_published_values(x, n, low, high):
    got = wilson_interval(x, n)
    assert got[0] == pytest.approx(low, abs=5e-5) and got[1] == pytest.approx(high, abs=5e-5)


@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_contains_the_point_estimate(pair):
    x, n = pair
    low, high = wilson_interval(x, n)
    assert 0.0 <= low <= x / n <= high <= 1.0


def test_wilson_interval_refuses_impossible_counts():
    for x, n in [(1, 0), (-1, 5), (6, 5)]:
        with pytest.raises(ValueError, match=rf"a Wilson interval needs .* got {x} of {n}"):
            wilson_interval(x, n)


def test_bootstrap_is_reproducible_for_a_seed():
    values = [0, 1, 1, 0.5, 0.25, 1, 0, 0, 1, 0.75]
    assert bootstrap_interval(values, seed=3) == bootstrap_interval(values, seed=3)
    assert bootstrap_interval(values, seed=3) != bootstrap_interval(values, seed=4)
    low, high = bootstrap_interval(values, seed=3)
    assert low <= sum(values) / len(values) <= high
    samples, probs = run_from([[True, False], [True, True], [False, False], [True, False]])
    assert summarize(samples, probs, seed=9) == summarize(samples, probs, seed=9)
    with pytest.raises(ValueError, match="at least one value"):
        bootstrap_interval([])


def test_one_sample_per_problem_uses_wilson_where_the_bootstrap_collapses():
    samples, probs = run_from([[False]] * 30)
    summary = summarize(samples, probs)
    assert summary["avg_at_n_ci95"] == [0.0, 0.0]  # every resample is 0 of 30
    assert summary["accuracy_ci95_method"] == "wilson"
    assert summary["accuracy_ci95"] == [0.0, round(wilson_interval(0, 30)[1], 6)]
    samples, probs = run_from([[False] * 4] * 30)  # four samples each, all wrong: the bootstrap collapses too
    assert summarize(samples, probs)["accuracy_ci95"] == summary["accuracy_ci95"]
    samples, probs = run_from([[True] * 4] * 29 + [[True, True, False, True]])
    assert summarize(samples, probs)["accuracy_ci95_method"] == "bootstrap"


def _exact_bootstrap_quantile(values: list[int], q: Fraction) -> Fraction:
    """The q-quantile of the mean of n draws with replacement from ``values``, from the whole distribution
    (all n**n resamples, equally likely), in exact arithmetic: the smallest mean whose CDF reaches q."""
    n = len(values)
    counts: dict[Fraction, int] = {}
    for draw in itertools.product(values, repeat=n):
        mean = Fraction(sum(draw), n)
        counts[mean] = counts.get(mean, 0) + 1
    cumulative = 0
    for mean in sorted(counts):
        cumulative += counts[mean]
        if Fraction(cumulative, n ** n) >= q:
            return mean
    raise AssertionError("unreachable: the CDF reaches 1")


def _exact_cdf(values: list[int], at: Fraction, strictly_below: bool) -> Fraction:
    n = len(values)
    hits = sum(1 for draw in itertools.product(values, repeat=n)
               if (Fraction(sum(draw), n) < at if strictly_below else Fraction(sum(draw), n) <= at))
    return Fraction(hits, n ** n)


def test_bootstrap_interval_equals_the_exact_bootstrap_quantiles_on_a_fixed_case():
    """The percentile bootstrap against an independent computation: the exact bootstrap distribution of the mean of
    four paired differences (all 4**4 resamples enumerated). The case is chosen so that each 2.5% and 97.5% quantile
    lies well inside one step of the exact CDF (checked here), so 2,000 seeded resamples must land on it."""
    values = [-1, 1, 1, 1]
    low = _exact_bootstrap_quantile(values, Fraction(25, 1000))
    high = _exact_bootstrap_quantile(values, Fraction(975, 1000))
    # margins: the CDF just below each quantile stays under its level by more than 4 standard errors of 2,000
    # resamples (sqrt(0.025 * 0.975 / 2000) = 0.0035), and reaches past it by as much
    assert _exact_cdf(values, low, strictly_below=True) < Fraction(25, 1000) - Fraction(14, 1000)
    assert _exact_cdf(values, low, strictly_below=False) > Fraction(25, 1000) + Fraction(14, 1000)
    assert _exact_cdf(values, high, strictly_below=True) < Fraction(975, 1000) - Fraction(14, 1000)
    assert _exact_cdf(values, high, strictly_below=False) > Fraction(975, 1000) + Fraction(14, 1000)
    assert (low, high) == (Fraction(-1, 2), Fraction(1))
    for seed in (0, 1, 2):
        assert bootstrap_interval(values, seed=seed) == (float(low), float(high))


# Newcombe (1998), Statistics in Medicine 17:2635-2650, Table II, method 10 (95%), as its four worked examples
# (e, f, g, h) = (both, first only, second only, neither) are transcribed in the test suite of the R package
# propint ("produces the results reported in Newcombe1998"); the paper's own table could not be read through the
# search tool, so test_newcombe_paired_interval_equals_a_first_principles_computation checks every small table
# against an independent computation as well.
NEWCOMBE_TABLE_II = [((36, 12, 2, 0), (0.0569, 0.3404)), ((18, 12, 2, 18), (0.0562, 0.3290)),
                     ((53, 0, 0, 1), (-0.0729, 0.0729)), ((0, 30, 0, 0), (0.8395, 1.0))]


@pytest.mark.parametrize("table, published", NEWCOMBE_TABLE_II)
def test_newcombe_paired_interval_matches_the_published_examples(table, published):
    low, high = newcombe_paired_interval(*table)
    assert (round(low, 4), round(high, 4)) == published


def _score_limit(x: int, n: int, upper: bool) -> float:
    """A Wilson limit from its definition: the p on one side of x/n where the score statistic
    |x/n - p| / sqrt(p(1-p)/n) equals z, found by bisection (no closed form)."""
    p_hat = x / n
    if (upper and x == n) or (not upper and x == 0):
        return p_hat
    lo, hi = (p_hat, 1.0) if upper else (0.0, p_hat)
    for _ in range(200):
        mid = (lo + hi) / 2
        inside = abs(p_hat - mid) <= Z95 * math.sqrt(mid * (1 - mid) / n)
        if inside == upper:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _newcombe_from_first_principles(e: int, f: int, g: int, h: int) -> tuple[float, float]:
    """Method 10 of Newcombe (1998) written out again: score limits by bisection, phi with the paper's correction."""
    n = e + f + g + h
    p1, p2 = (e + f) / n, (e + g) / n
    l1, u1 = _score_limit(e + f, n, False), _score_limit(e + f, n, True)
    l2, u2 = _score_limit(e + g, n, False), _score_limit(e + g, n, True)
    margins = (e + f) * (g + h) * (e + g) * (f + h)
    corrected = max(e * h - f * g - n / 2, 0) if e * h > f * g else e * h - f * g
    phi = corrected / math.sqrt(margins) if margins else 0.0
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    epsilon = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, (f - g) / n - delta), min(1.0, (f - g) / n + epsilon)


def test_newcombe_paired_interval_equals_a_first_principles_computation():
    tables = [t for t in itertools.product(range(5), repeat=4) if sum(t) > 0] + [t for t, _ in NEWCOMBE_TABLE_II]
    for table in tables:
        low, high = newcombe_paired_interval(*table)
        expected = _newcombe_from_first_principles(*table)
        assert low == pytest.approx(expected[0], abs=1e-9) and high == pytest.approx(expected[1], abs=1e-9), table
        assert -1.0 <= low <= (table[1] - table[2]) / sum(table) <= high <= 1.0, table
    with pytest.raises(ValueError, match=r"got \(0, 0, 0, 0\)"):
        newcombe_paired_interval(0, 0, 0, 0)
    with pytest.raises(ValueError, match=r"got \(1, -1, 0, 0\)"):
        newcombe_paired_interval(1, -1, 0, 0)


def test_a_paired_difference_where_every_problem_moves_the_same_way_is_not_a_point():
    """0 of 30 to 30 of 30 (the recurring AIME 2024 pair): a bootstrap of the differences is [+1, +1]; Newcombe's
    interval is the paper's example d, [0.8395, 1]. On two problems too the interval is not a point."""
    for n, low in ((30, 0.8395), (2, 0.0700)):
        probs = problems(n)
        graft = [sample(p["id"], True) for p in probs]
        base = [sample(p["id"], False) for p in probs]
        diff = paired_difference(graft, base, probs)
        assert bootstrap_interval([1.0] * n) == (1.0, 1.0)  # what the bootstrap gave
        assert diff["ci95_method"] == "newcombe" and diff["mean_difference"] == 1.0
        assert round(diff["ci95"][0], 4) == low and diff["ci95"][1] == 1.0
    probs = problems(30)
    same = [sample(p["id"], False) for p in probs]
    diff = paired_difference(same, same, probs)
    assert diff["ci95"][0] < 0.0 < diff["ci95"][1]  # no difference on 0 of 30 both: still an interval, not [0, 0]


def test_paired_difference_bootstraps_fractional_problems():
    graft, probs = run_from([[True, False], [True, True], [False, False], [True, False]])
    base, _ = run_from([[False, False], [True, False], [False, False], [False, False]])
    diff = paired_difference(graft, base, probs, seed=5)
    assert diff["ci95_method"] == "bootstrap"
    assert tuple(diff["ci95"]) == tuple(round(v, 6) for v in bootstrap_interval([0.5, 0.5, 0.0, 0.5], seed=5))


def test_paired_difference_over_the_same_problems():
    probs = problems(4)
    graft = [sample(p["id"], c) for p, c in zip(probs, [True, True, True, False])]
    base = [sample(p["id"], c) for p, c in zip(probs, [False, True, False, False])]
    diff = paired_difference(graft, base, probs, seed=1)
    assert diff["mean_difference"] == 0.5 and diff["problems"] == 4
    assert (diff["graft_better"], diff["baseline_better"]) == (2, 0)
    assert diff["ci95"][0] <= 0.5 <= diff["ci95"][1]
    assert diff == paired_difference(graft, base, probs, seed=1)
    with pytest.raises(ValueError, match="share no scored problem"):
        paired_difference(graft[:2], base[2:], probs)


# ---- copy controls ----


def test_copy_baseline_comes_from_keys_not_outputs():
    probs = [{"id": "mod-0", "problem_sha256": "a", "key": "2"}, {"id": "mod-1", "problem_sha256": "b", "key": "9"},
             {"id": "paths-0", "problem_sha256": "c", "key": "6"}, {"id": "paths-1", "problem_sha256": "d", "key": "4"}]
    samples = [
        # the example's answer is the key (written another way): copying it is right
        sample("mod-0", True, 0, "2", "graft", example_answer="\\frac{4}{2}", copied=True),
        # a wrong example answer that the model follows: copied, and incorrect
        sample("mod-1", False, 0, "5", "graft", example_answer="5", copied=True),
        # a wrong example the model does not follow, solving the problem itself
        sample("paths-0", True, 0, "6", "graft", example_answer="20", copied=False),
        # a baseline fallback: not grafted, no example
        sample("paths-1", False, 0, "3", "baseline"),
    ]
    copy = summarize(samples, probs)["copy"]
    assert copy["grafted_samples"] == 3 and copy["copied_recorded"] == 3 and copy["copied"] == 2
    assert copy["copy_rate"] == round(2 / 3, 6)
    assert copy["copy_baseline_problems"] == 3
    assert copy["copy_baseline"] == round(1 / 3, 6)  # only mod-0's example answer equals its key
    assert copy["grafted_accuracy"] == round(2 / 3, 6)
    flipped = [{**s, "correct": not s["correct"], "extracted": "0"} for s in samples]  # outputs change, keys do not
    assert summarize(flipped, probs)["copy"]["copy_baseline"] == copy["copy_baseline"]
    assert copy_controls(samples, probs) == copy


def test_copy_controls_are_none_when_not_recorded():
    samples, probs = run_from([[True], [False]])
    samples = [{**s, "mode": "graft"} for s in samples]
    copy = summarize(samples, probs)["copy"]
    assert copy["grafted_samples"] == 2 and copy["copy_rate"] is None and copy["copy_baseline"] is None


# ---- families, inputs, the committed manifests ----


def test_family_is_the_field_or_the_id_without_its_number():
    assert family_of({"id": "mod-3"}) == "mod"
    assert family_of({"id": "2024-II-11"}) == "2024-II"
    assert family_of({"id": "lonely"}) == "lonely"
    assert family_of({"id": "mod-3", "family": "modular"}) == "modular"
    samples, probs = run_from([[True], [False], [True]])
    probs[2]["family"] = "other"
    families = summarize(samples, probs)["families"]
    assert sorted(families) == ["other", "p"]
    assert families["p"]["problems"] == 2 and families["p"]["avg_at_n"] == 0.5


def test_bad_samples_are_refused_naming_them():
    samples, probs = run_from([[True, False]])
    with pytest.raises(ValueError, match="appears more than once"):
        summarize(samples + [samples[0]], probs)
    with pytest.raises(ValueError, match="not among the problems"):
        summarize(samples + [sample("elsewhere", True)], probs)


def test_problems_without_samples_are_counted_and_left_out():
    samples, probs = run_from([[True], [False]])
    summary = summarize(samples, probs + problems(5)[2:])
    assert summary["problems_listed"] == 5 and summary["problems"] == 2 and summary["problems_without_samples"] == 3
    assert summary["avg_at_n"] == 0.5
    empty = summarize([], probs)
    assert empty["problems"] == 0 and empty["avg_at_n"] is None and empty["pass_at_k"] == {}


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_committed_manifests_agree_with_their_totals(path):
    manifest = load_manifest(path)
    summary = summarize(manifest["samples"], manifest["problems"],
                        verifier_version=recorded_verifier_version(manifest))
    totals = manifest["totals"]
    assert summary["avg_at_n"] == totals["accuracy"] == summary["pass_at_k"]["1"]
    assert summary["correct"] == totals["correct"] and summary["samples"] == totals["samples"] == 30
    assert summary["decode_tokens"] == totals["decode_tokens"]
    assert summary["decode_tokens_per_correct"] == totals["decode_tokens_per_correct"]
    assert summary["energy_j"] == totals["energy_j"] and summary["mean_ttft_s"] == totals["mean_ttft_s"]
    assert summary["accuracy_ci95"] == [round(v, 6) for v in wilson_interval(totals["correct"], 30)]
    assert json.loads(json.dumps(summary)) == summary  # JSON-ready


# ---- what a run checked ----


def test_run_checks_of_the_committed_recurring_run_count_its_certification_time():
    """The committed AIME 2024 recurring run certified every problem; its samples' wall_s (the summary's "wall s"
    so far) leave out the recompute, recorded apart in certify_s, which took eight times as long."""
    from graftbench.results.metrics import run_checks

    manifest = load_manifest(REFERENCE_MANIFESTS / "aime2024-smollm2-135m-recurring.json")
    checks = run_checks(manifest["samples"])
    assert (checks.certified, checks.equal, checks.fallbacks) == (30, 30, ())
    assert checks.solve_s == manifest["totals"]["wall_s"]
    assert checks.certify_s == round(math.fsum(s["certify_s"] for s in manifest["samples"]), 6)
    assert checks.wall_s == checks.solve_s + checks.certify_s and checks.certify_s > 5 * checks.solve_s


def test_run_checks_count_a_problem_once_and_keep_each_fallback_reason():
    from graftbench.results.metrics import run_checks

    samples = [sample("p-0", True, j, certified=True, certify_s=2.0) for j in range(4)]
    samples += [sample("p-1", False, j, fallback="cpu: written on another kind of CPU") for j in range(4)]
    samples += [sample("p-2", True, certified=False, certify_s=1.0), sample("p-3", True, certified=True)]
    checks = run_checks(samples)
    assert (checks.certified, checks.equal) == (3, 2)  # one certificate per problem, its samples share it
    assert checks.grafted == 0  # these samples are baseline samples: run_checks reads mode, not certified
    assert checks.fallbacks == (("p-1", "cpu: written on another kind of CPU"),)
    assert checks.certify_s is None and checks.wall_s == checks.solve_s == 10.0  # p-3 records no time
    assert run_checks(samples[:8]).certify_s == 2.0
