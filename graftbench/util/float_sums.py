"""Sums of floats that come out the same on every Python, and the summations a recorded total may have used.

A manifest's totals are recomputed from its records by whoever verifies it, on whatever Python they have. The
built-in ``sum`` of floats is not the same function everywhere: CPython 3.11 and earlier add left to right, and
CPython 3.12 switched to a compensated (Neumaier) summation ("What's New In Python 3.12": sum() "uses Neumaier
summation"; ``Python/bltinmodule.c``, ``builtin_sum_impl``). The two can differ in the last bit, so a total written
on 3.12 did not verify on 3.11 (it happened: a certificate recorded on a GPU host's Python 3.12). graftbench writes
totals with :func:`total`, by default :func:`math.fsum`, the correctly rounded sum, which every Python computes
alike; a verifier recomputes them with :func:`recompute`, which accepts a recorded value made by any of
:data:`SUMMATIONS`, so manifests written before keep verifying (one did not, by a rounding to 6 decimals that
the last bit tipped).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

exact_sum: Callable[[Iterable[float]], float] = math.fsum


def left_to_right(values: Iterable[float]) -> float:
    """``0.0 + v0 + v1 + ...`` in order: the built-in ``sum`` of floats on CPython 3.11 and earlier."""
    total = 0.0
    for value in values:
        total += value
    return total


def compensated(values: Iterable[float]) -> float:
    """Neumaier's compensated sum, as the built-in ``sum`` of floats computes it on CPython 3.12 and later: a
    running sum and a running compensation of the low-order bits it loses, added at the end when not zero."""
    total, compensation = 0.0, 0.0
    for value in values:
        running = total + value
        if abs(total) >= abs(value):
            compensation += (total - running) + value
        else:
            compensation += (value - running) + total
        total = running
    if compensation and math.isfinite(compensation):
        total += compensation
    return total


# Every summation a graftbench manifest's float totals were written with: the current one first
SUMMATIONS: tuple[Callable[[Iterable[float]], float], ...] = (exact_sum, left_to_right, compensated)
_SUMMATION: contextvars.ContextVar = contextvars.ContextVar("graftbench_summation", default=exact_sum)


def total(values: Iterable[float]) -> float:
    """The sum of ``values`` as a manifest's float totals are written: correctly rounded (:func:`math.fsum`), or,
    inside :func:`recompute`, the summation being tried."""
    return _SUMMATION.get()(values)


@contextlib.contextmanager
def summed_with(summation: Callable[[Iterable[float]], float]) -> Iterator[None]:
    """Inside the block, :func:`total` sums with ``summation`` (one of :data:`SUMMATIONS`)."""
    token = _SUMMATION.set(summation)
    try:
        yield
    finally:
        _SUMMATION.reset(token)


def recompute(compute: Callable[[], T], recorded: Any) -> T:
    """``compute()`` (a recomputation of recorded totals that sums with :func:`total`) under the first of
    :data:`SUMMATIONS` whose result equals ``recorded``. When none does, the result that differs from ``recorded``
    in the fewest top-level values (:func:`differing_values`; the current summation first on a tie), so the caller,
    which reports each differing top-level value, reports the fields that are wrong and not also the last bits of
    float totals another summation gives. Exceptions of ``compute`` propagate."""
    results = []
    for summation in SUMMATIONS:
        with summed_with(summation):
            result = compute()
        if result == recorded:
            return result
        results.append(result)
    return min(results, key=lambda result: differing_values(result, recorded))


def differing_values(ours: Any, recorded: Any) -> int:
    """How many top-level values of ``ours`` differ from ``recorded``: for two dicts, the keys whose values are not
    equal (a key on one side only counts); otherwise 0 when equal, else 1."""
    if isinstance(ours, dict) and isinstance(recorded, dict):
        return sum(ours.get(key) != recorded.get(key) or (key in ours) != (key in recorded)
                   for key in ours.keys() | recorded.keys())
    return 0 if ours == recorded else 1
