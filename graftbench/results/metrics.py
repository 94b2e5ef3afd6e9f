"""Statistics of one run's samples: avg@N, pass@k, maj@N, 95% intervals, copy controls. Imports no torch.

Everything here is a pure, deterministic function of the samples and problems as a manifest stores them, so that a
manifest can carry :func:`summarize`'s dict and ``verify-manifest`` can recompute it byte for byte (numpy is pinned;
the bootstrap draws from ``numpy.random.Generator(PCG64(seed))``).

**Input.** Samples are the dicts of a manifest's ``samples``: ``problem_id``, ``correct`` (bool), ``extracted``
(str or None), ``decode_tokens`` (tokens), ``ttft_s`` and ``wall_s`` (seconds), ``energy_j`` (joules), ``mode``
(``graft``/``baseline``), and the optional fields of N-sample runs, read with these defaults when absent (the
committed manifests predate them): ``sample_index`` (0), ``layout`` (None), ``example_answer`` (None: the grafted
example's key), ``copied`` (None: not recorded), ``seed`` (None). Problems are the manifest's ``problems``
entries ``{"id", "problem_sha256", "key"}``, optionally with ``"family"``.

**Definitions** (over the problems that have at least one sample; ``problems_without_samples`` counts the rest, e.g.
the problems a ``--token-budget`` run never reached):

- avg@N: mean over problems of each problem's mean correctness over its samples (with one sample per problem, the
  fraction of problems correct: pass@1 of a greedy run).
- pass@k, for every k up to the smallest number of samples of any problem: the unbiased estimator of Chen et al.
  (2021, "Evaluating Large Language Models Trained on Code"), ``1 - C(n-c, k) / C(n, k)`` per problem with ``n``
  samples of which ``c`` are correct, averaged over problems. It is computed exactly, in rational arithmetic, as
  the running product ``prod_{j<k} (n-c-j)/(n-j)``; pass@1 is then exactly avg@N for any N.
  ``pass_at_n`` is the fraction of problems with at least one correct sample (pass@n_i for each problem's own n_i).
- maj@N: per problem, a vote among the samples' extracted answers (a sample with no extracted answer does not vote);
  answers are grouped by their extracted string (already normalized by the verifier). Ties go to the answer whose
  first vote has the smallest ``sample_index`` (then the earlier position in the manifest). The problem counts as
  correct iff the first sample that voted for the winning answer is correct; a problem with no votes is incorrect.
- Intervals (95%): the Wilson score interval (Wilson 1927; recommended by Agresti & Coull 1998) for proportions over
  problems: maj@N, pass@n, and accuracy when every problem has one sample; a percentile bootstrap over problems
  (problems resampled with replacement, 2,000 resamples by default) for avg@N; and, in
  :func:`paired_difference`, the difference between two runs on the same problems: Newcombe's hybrid score interval
  for paired proportions (:func:`newcombe_paired_interval`) when every problem scores 0 or 1 in both runs (one sample
  per problem, or samples all right or all wrong), else a bootstrap of the per-problem differences. A percentile
  bootstrap collapses to a point when every pair moves the same way (0 of 30 to 30 of 30 gives [+1, +1]);
  Newcombe's interval does not ([+0.840, +1] there). ``ci95_method`` names the one used.
  ``accuracy_ci95`` is the interval a table shows: Wilson over problems with one sample per problem (a bootstrap
  of 0 of 30 would collapse to [0, 0]) and when every problem's samples are all wrong or all right (the bootstrap
  collapses there too; Wilson then counts problems), the bootstrap otherwise; ``accuracy_ci95_method`` names it.
- Copy controls, over grafted samples (``mode == "graft"``): the copy rate is the fraction of those whose
  ``copied`` is true (among those that record it); the copy baseline is the accuracy that answering every grafted
  problem with its example's answer would get, computed from keys only (``example_answer`` against the problem's
  ``key`` with :func:`graftbench.verify.answers.answers_equivalent` under the run's verifier version), never from
  outputs, averaged like avg@N; ``grafted_accuracy`` is the run's own accuracy on the same samples.
- Families: a problem's ``family`` field, else its id without a trailing ``-<number>`` (the built-in ``mod-3`` is
  in family ``mod``; AIME's ``2024-I-1`` in ``2024-I``).

Floats in the returned dicts are rounded to 6 decimal places.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ..problems.types import family_of_id
from ..verify.answers import VERIFIER_VERSION, answers_equivalent
from ..util.float_sums import total

METRICS_VERSION = 1
RESAMPLES = 2000
CONFIDENCE = 0.95
Z95 = 1.959963984540054  # the 0.975 quantile of the standard normal distribution


def _r(value) -> float | None:
    return None if value is None else round(float(value), 6)


def _interval(pair) -> list[float] | None:
    return None if pair is None else [_r(pair[0]), _r(pair[1])]


def family_of(problem: dict) -> str:
    """A problem entry's family: its ``family`` field, else its id without a trailing ``-<number>``."""
    family = problem.get("family")
    return family if isinstance(family, str) and family else family_of_id(str(problem["id"]))


# ---- estimators ----


def pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The unbiased pass@k of one problem with ``n`` samples of which ``c`` are correct, exactly:
    ``1 - C(n-c, k) / C(n, k)``. Raises ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``."""
    return _pass_at_ks(n, c, k)[k - 1]


def _pass_at_ks(n: int, c: int, k_max: int) -> list[Fraction]:
    """pass@1 … pass@k_max of one problem, from the running product ``prod_{j<k} (n-c-j)/(n-j)``."""
    if not (0 <= c <= n) or not (1 <= k_max <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k_max}")
    values, none_correct = [], Fraction(1)
    for j in range(k_max):
        none_correct = none_correct * (n - c - j) / (n - j) if n - c - j > 0 else Fraction(0)
        values.append(1 - none_correct)
    return values


def mean_pass_at_k(counts: list[tuple[int, int]], k_max: int | None = None) -> list[Fraction]:
    """pass@1 … pass@k_max averaged over problems, exactly; ``counts`` holds ``(n, c)`` per problem. ``k_max``
    defaults to the smallest ``n``. Raises ``ValueError`` for no problems or a ``k_max`` above the smallest n."""
    if not counts:
        raise ValueError("pass@k needs at least one problem")
    k_max = min(n for n, _ in counts) if k_max is None else k_max
    totals = [Fraction(0)] * k_max
    for n, c in counts:
        totals = [t + v for t, v in zip(totals, _pass_at_ks(n, c, k_max))]
    return [t / len(counts) for t in totals]


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a proportion ``successes / n`` (Wilson, E. B. 1927, "Probable inference, the
    law of succession, and statistical inference", JASA 22:209-212; Agresti & Coull 1998, "Approximate is better
    than 'exact' for interval estimation of binomial proportions", The American Statistician 52:119-126):
    ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``, with ``z`` = 1.96 for 95%. Raises ``ValueError``
    unless ``0 <= successes <= n`` and ``n >= 1``."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"a Wilson interval needs 0 <= successes <= n and n >= 1, got {successes} of {n}")
    p, z2 = successes / n, z * z
    denominator = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    # At 0 or n successes the bound is exactly 0 or 1 (in floats center + half can land a rounding step short).
    low = 0.0 if successes == 0 else min(p, max(0.0, center - half))
    high = 1.0 if successes == n else max(p, min(1.0, center + half))
    return low, high


def newcombe_paired_interval(both: int, first_only: int, second_only: int, neither: int,
                             z: float = Z95) -> tuple[float, float]:
    """The 95% interval of the difference ``p1 - p2`` of two paired proportions by Newcombe's hybrid score method
    (Newcombe, R. G. 1998, "Improved confidence intervals for the difference between binomial proportions based on
    paired data", Statistics in Medicine 17:2635-2650, method 10), from the paired 2×2 table over ``n`` units:
    ``both`` succeed in both arms, ``first_only`` in the first arm only, ``second_only`` in the second only,
    ``neither`` in neither; ``p1 = (both + first_only) / n``, ``p2 = (both + second_only) / n``.

    With ``[l1, u1]`` and ``[l2, u2]`` the Wilson intervals (:func:`wilson_interval`) of ``p1`` and ``p2`` and ``D =
    p1 - p2``: ``L = D - sqrt((p1-l1)² - 2φ(p1-l1)(u2-p2) + (u2-p2)²)`` and ``U = D + sqrt((p2-l2)² -
    2φ(p2-l2)(u1-p1) + (u1-p1)²)``, where ``φ`` is the correlation of the pairs with the paper's continuity
    correction: ``(AD - BC) / sqrt`` of the product of the four marginal totals, its numerator replaced by
    ``max(AD - BC - n/2, 0)`` when ``AD > BC``, and 0 when a marginal total is 0. Unlike a bootstrap of the paired
    differences it does not collapse when every pair moves the same way: 30 of 30 pairs first-only gives
    ``[0.8395, 1]`` (the paper's example d). Returns ``(low, high)`` within ``[-1, 1]``. Raises ``ValueError`` for a
    negative count or no pair."""
    counts = (both, first_only, second_only, neither)
    if any(c < 0 for c in counts) or sum(counts) < 1:
        raise ValueError(f"a paired interval needs counts >= 0 and at least one pair, got {counts}")
    n = sum(counts)
    p1, p2 = (both + first_only) / n, (both + second_only) / n
    l1, u1 = wilson_interval(both + first_only, n, z)
    l2, u2 = wilson_interval(both + second_only, n, z)
    phi = _paired_phi(both, first_only, second_only, neither)
    below = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    above = math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    difference = (first_only - second_only) / n
    return max(-1.0, difference - below), min(1.0, difference + above)


def _paired_phi(a: int, b: int, c: int, d: int) -> float:
    """Newcombe's (1998) continuity-corrected phi of the paired table ``[[a, b], [c, d]]`` (0 when a margin is 0)."""
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    if margins == 0:
        return 0.0
    numerator = a * d - b * c
    if numerator > 0:
        numerator = max(numerator - (a + b + c + d) / 2, 0)
    return numerator / math.sqrt(margins)


def _resample_indices(n: int, seed: int, resamples: int) -> np.ndarray:
    return np.random.Generator(np.random.PCG64(seed)).integers(0, n, size=(resamples, n))


def bootstrap_interval(values, seed: int = 0, resamples: int = RESAMPLES,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (one value per problem): ``resamples`` resamples of
    the problems with replacement drawn from ``Generator(PCG64(seed))``; the same seed gives the same interval.
    Raises ``ValueError`` for no values."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise ValueError("a bootstrap interval needs at least one value")
    means = array[_resample_indices(array.size, seed, resamples)].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


# ---- grouping ----


@dataclass
class _Problem:
    id: str
    key: str | None
    family: str
    samples: list[dict] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def c(self) -> int:
        return sum(1 for s in self.samples if s["correct"] is True)


def _index(sample: dict) -> int:
    value = sample.get("sample_index", 0)
    return 0 if value is None else value


def _group(samples: list[dict], problems: list[dict]) -> tuple[list[_Problem], int]:
    """The problems with samples (in the problems' order, each with its samples sorted by ``sample_index``) and
    the number listed. Raises ``ValueError`` for a sample of an unlisted problem or a repeated
    ``(problem_id, sample_index)``."""
    by_id = {}
    for p in problems:
        by_id[p["id"]] = _Problem(p["id"], p.get("key"), family_of(p))
    seen = set()
    for position, sample in enumerate(samples):
        pid = sample.get("problem_id")
        if pid not in by_id:
            raise ValueError(f"sample {pid!r} is not among the problems")
        marker = (pid, _index(sample))
        if marker in seen:
            raise ValueError(f"sample {pid!r} sample_index {marker[1]} appears more than once")
        seen.add(marker)
        by_id[pid].samples.append(sample)
    for p in by_id.values():
        p.samples.sort(key=_index)  # stable: equal indices cannot occur, the manifest order is kept otherwise
    return [p for p in by_id.values() if p.samples], len(by_id)


def _majority_correct(problem: _Problem) -> bool:
    first_vote: dict[str, dict] = {}
    votes: dict[str, int] = defaultdict(int)
    for sample in problem.samples:
        answer = sample.get("extracted")
        if answer is None:
            continue
        votes[answer] += 1
        first_vote.setdefault(answer, sample)
    if not votes:
        return False
    best = max(votes.values())
    winner = next(a for a in first_vote if votes[a] == best)  # first_vote keeps the order answers first appeared
    return first_vote[winner]["correct"] is True


def _accuracy_block(groups: list[_Problem], seed: int, resamples: int) -> dict:
    """avg@N, its bootstrap interval and the interval a table shows, maj@N with Wilson, pass@n with Wilson."""
    if not groups:
        return {"avg_at_n": None, "avg_at_n_ci95": None, "accuracy_ci95": None, "accuracy_ci95_method": None,
                "maj_at_n": None, "maj_at_n_ci95": None, "pass_at_n": None, "pass_at_n_ci95": None}
    per_problem = [Fraction(p.c, p.n) for p in groups]
    avg = sum(per_problem, Fraction(0)) / len(groups)
    boot = bootstrap_interval([float(v) for v in per_problem], seed, resamples)
    # Wilson over problems with one sample each, and where the bootstrap collapses (every problem all wrong or all
    # right: each resample has the same mean, and [0, 0] would claim a certainty that 30 problems do not give)
    use_wilson = all(p.n == 1 for p in groups) or (per_problem[0] in (0, 1) and len(set(per_problem)) == 1)
    correct_problems = sum(1 for v in per_problem if v == 1)  # then every problem is all right or all wrong
    majority = sum(1 for p in groups if _majority_correct(p))
    any_correct = sum(1 for p in groups if p.c > 0)
    return {
        "avg_at_n": _r(avg),
        "avg_at_n_ci95": _interval(boot),
        "accuracy_ci95": _interval(wilson_interval(correct_problems, len(groups)) if use_wilson else boot),
        "accuracy_ci95_method": "wilson" if use_wilson else "bootstrap",
        "maj_at_n": _r(Fraction(majority, len(groups))),
        "maj_at_n_ci95": _interval(wilson_interval(majority, len(groups))),
        "pass_at_n": _r(Fraction(any_correct, len(groups))),
        "pass_at_n_ci95": _interval(wilson_interval(any_correct, len(groups))),
    }


def _cost_block(samples: list[dict]) -> dict:
    n = len(samples)
    correct = sum(1 for s in samples if s["correct"] is True)
    decode = sum(s["decode_tokens"] for s in samples)
    return {
        "decode_tokens": decode,
        "mean_decode_tokens": _r(decode / n) if n else None,
        "decode_tokens_per_correct": _r(decode / correct) if correct else None,
        "mean_ttft_s": _r(total(s["ttft_s"] for s in samples) / n) if n else None,
        "wall_s": _r(total(s["wall_s"] for s in samples)),
        "energy_j": _r(total(s["energy_j"] for s in samples)),
    }


def _copy_controls(groups: list[_Problem], verifier_version: int) -> dict:
    grafted = [s for p in groups for s in p.samples if s.get("mode") == "graft"]
    recorded = [s for s in grafted if s.get("copied") is not None]
    copied = sum(1 for s in recorded if s["copied"] is True)
    baseline, own = [], []
    for p in groups:
        with_example = [s for s in p.samples if s.get("mode") == "graft" and s.get("route") != "exact"
                        and isinstance(s.get("example_answer"), str)]
        if not with_example:
            continue
        key = p.key if isinstance(p.key, str) else ""
        hits = sum(1 for s in with_example if answers_equivalent(s["example_answer"], key, verifier_version))
        baseline.append(Fraction(hits, len(with_example)))
        own.append(Fraction(sum(1 for s in with_example if s["correct"] is True), len(with_example)))
    return {
        "grafted_samples": len(grafted),
        "copied_recorded": len(recorded),
        "copied": copied,
        "copy_rate": _r(Fraction(copied, len(recorded))) if recorded else None,
        "copy_baseline_problems": len(baseline),
        "copy_baseline": _r(sum(baseline, Fraction(0)) / len(baseline)) if baseline else None,
        "grafted_accuracy": _r(sum(own, Fraction(0)) / len(own)) if own else None,
    }


def copy_controls(samples: list[dict], problems: list[dict], verifier_version: int = VERIFIER_VERSION) -> dict:
    """The copy controls of a run's grafted samples (``mode == "graft"``; see the module docstring): how many
    there are, how many record ``copied`` and how many of those copied (``copy_rate``, ``None`` when none records
    it), and, over the grafted problems routed to another problem's example (not ``exact``) whose samples record
    ``example_answer``, the ``copy_baseline`` computed from keys and the run's own ``grafted_accuracy`` on the same samples (both ``None`` when none records it).
    Raises ``ValueError`` as :func:`summarize` does."""
    return _copy_controls(_group(samples, problems)[0], verifier_version)


def summarize(samples: list[dict], problems: list[dict], seed: int = 0, *, resamples: int = RESAMPLES,
              verifier_version: int = VERIFIER_VERSION) -> dict:
    """Every statistic of one run as a JSON-ready dict (floats rounded to 6 places; units: tokens, seconds, joules),
    a pure function of its arguments: counts, avg@N with its bootstrap interval, ``accuracy_ci95`` (Wilson with one
    sample per problem, else the bootstrap), pass@k for k = 1 … the smallest n (keys ``"1"``, ``"2"``, …),
    pass@n and maj@N with Wilson intervals, decode tokens (total, per sample, per correct sample), mean time to
    first token, wall seconds, joules, the copy controls, and the same accuracy figures per family.

    ``verifier_version`` is the version the copy baseline compares keys under (pass the manifest's
    :func:`graftbench.results.manifest.recorded_verifier_version`). Raises ``ValueError`` for a sample whose problem is
    not listed, a repeated ``(problem_id, sample_index)``, or an unknown verifier version; ``KeyError`` / ``TypeError``
    for a sample lacking a field or holding a wrong type."""
    groups, listed = _group(samples, problems)
    counts = [(p.n, p.c) for p in groups]
    pass_k = mean_pass_at_k(counts) if groups else []
    families: dict[str, list[_Problem]] = {}
    for p in groups:
        families.setdefault(p.family, []).append(p)
    return {
        "metrics_version": METRICS_VERSION,
        "seed": seed,
        "bootstrap_resamples": resamples,
        "confidence": CONFIDENCE,
        "verifier_version": verifier_version,
        "problems_listed": listed,
        "problems": len(groups),
        "problems_without_samples": listed - len(groups),
        "samples": sum(p.n for p in groups),
        "correct": sum(p.c for p in groups),
        "samples_per_problem": {"min": min(p.n for p in groups), "max": max(p.n for p in groups)} if groups else None,
        **_accuracy_block(groups, seed, resamples),
        "pass_at_k": {str(k): _r(v) for k, v in enumerate(pass_k, start=1)},
        **_cost_block([s for p in groups for s in p.samples]),
        "copy": _copy_controls(groups, verifier_version),
        "families": {
            name: {"problems": len(members), "samples": sum(p.n for p in members),
                   "correct": sum(p.c for p in members), **_accuracy_block(members, seed, resamples),
                   "mean_decode_tokens": _cost_block([s for p in members for s in p.samples])["mean_decode_tokens"]}
            for name, members in sorted(families.items())
        },
    }


def family_costs(samples: list[dict], problems: list[dict], verifier_version: int = VERIFIER_VERSION) -> dict:
    """Per family (as :func:`summarize` names them): decode tokens per correct sample (``None`` when none is correct)
    and the copy controls of its grafted samples (:func:`copy_controls`). Kept apart from :func:`summarize`, whose
    output a manifest records and ``verify-manifest`` recomputes. Raises ``ValueError`` as :func:`summarize` does."""
    families: dict[str, list[_Problem]] = {}
    for p in _group(samples, problems)[0]:
        families.setdefault(p.family, []).append(p)
    return {name: {"decode_tokens_per_correct": _cost_block([s for p in members for s in p.samples])[
                       "decode_tokens_per_correct"],
                   "copy": _copy_controls(members, verifier_version)}
            for name, members in sorted(families.items())}


def per_problem_accuracy(samples: list[dict], problems: list[dict]) -> dict[str, Fraction]:
    """Each problem's mean correctness over its samples as an exact fraction, by problem id (problems without
    samples are left out). Raises ``ValueError`` as :func:`summarize` does."""
    return {p.id: Fraction(p.c, p.n) for p in _group(samples, problems)[0]}


def paired_difference(graft_samples: list[dict], baseline_samples: list[dict], problems: list[dict], seed: int = 0,
                      resamples: int = RESAMPLES) -> dict:
    """The per-problem difference graft − baseline of mean correctness, over the problems both runs scored (in the
    order of ``problems``), with its 95% interval, and how many problems each run did better on.

    The interval (``ci95_method``): ``newcombe`` (:func:`newcombe_paired_interval` over problems) when every problem
    scores 0 or 1 in both runs (one sample per problem, or all its samples right or all wrong), since a bootstrap
    collapses to a point when every problem moves the same way; else ``bootstrap``, a percentile bootstrap over
    problems (the same problems resampled for both runs, ``Generator(PCG64(seed))``, ``resamples`` resamples).
    Raises ``ValueError`` when the runs share no scored problem, and as :func:`summarize` does."""
    graft = per_problem_accuracy(graft_samples, problems)
    baseline = per_problem_accuracy(baseline_samples, problems)
    common = [p["id"] for p in problems if p["id"] in graft and p["id"] in baseline]
    if not common:
        raise ValueError("the two runs share no scored problem: no paired difference")
    diffs = [graft[i] - baseline[i] for i in common]
    binary = all(graft[i] in (0, 1) and baseline[i] in (0, 1) for i in common)
    if binary:
        cells = ((1, 1), (1, 0), (0, 1), (0, 0))  # both, graft only, baseline only, neither
        interval = newcombe_paired_interval(*(sum(1 for i in common if (graft[i], baseline[i]) == cell)
                                              for cell in cells))
    else:
        interval = bootstrap_interval([float(d) for d in diffs], seed, resamples)
    return {
        "problems": len(common),
        "mean_difference": _r(sum(diffs, Fraction(0)) / len(common)),
        "ci95": _interval(interval),
        "ci95_method": "newcombe" if binary else "bootstrap",
        "graft_better": sum(1 for d in diffs if d > 0),
        "baseline_better": sum(1 for d in diffs if d < 0),
        "seed": seed,
        "bootstrap_resamples": resamples,
    }


@dataclass(frozen=True)
class RunChecks:
    """What a run checked beside its answers, from its samples: the problems that ``grafted`` an artifact, the
    ``--certify`` certificates, one per problem whose graft was recomputed (``certified`` problems, ``equal`` of
    them byte-identical to the fresh recompute),
    the seconds they took (``certify_s``; ``None`` when a certified sample records no time, as manifests written
    before ``certify_s`` do), each fallback as ``(problem_id, reason)`` with the reason its samples record, and the
    wall seconds of the run: the samples' ``wall_s`` (routing, restore or prefill, decode) plus ``certify_s``."""

    grafted: int
    certified: int
    equal: int
    certify_s: float | None
    fallbacks: tuple[tuple[str, str], ...]
    solve_s: float

    @property
    def wall_s(self) -> float:
        """Seconds solving plus seconds certifying (those recorded)."""
        return self.solve_s + (self.certify_s or 0.0)


def run_checks(samples: list[dict]) -> RunChecks:
    """:class:`RunChecks` of a run's sample dicts (a manifest's ``samples``). The N samples of one problem share its
    graft, certificate and fallback: each is counted once per problem (its first sample). Raises ``KeyError`` /
    ``TypeError`` for a sample lacking ``problem_id`` or ``wall_s``, or holding a wrong type."""
    first: dict[str, dict] = {}
    for s in samples:
        first.setdefault(s["problem_id"], s)
    certified = [s for s in first.values() if s.get("certified") is not None]
    times = [s.get("certify_s") for s in certified]
    recorded = all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in times)
    return RunChecks(
        grafted=sum(1 for s in first.values() if s.get("mode") == "graft"),
        certified=len(certified),
        equal=sum(1 for s in certified if s["certified"] is True),
        certify_s=_r(total(times)) if recorded else None,
        fallbacks=tuple((str(pid), str(s["fallback"])) for pid, s in first.items() if s.get("fallback")),
        solve_s=_r(total(s["wall_s"] for s in samples)),
    )
