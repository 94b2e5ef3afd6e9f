"""What the problem generators (:mod:`graftbench.problems.builtin`, :mod:`graftbench.problems.methods`) check their
answers with: a check that also runs under ``python -O``, and brute-force counts to compare a formula against.
Imports nothing but the standard library."""

from __future__ import annotations

__all__ = ["GeneratorBug", "check", "walks_avoiding"]


class GeneratorBug(AssertionError):
    """A generator's answer disagreed with its independent (sympy / brute-force) check."""


def check(ok: bool, what: str) -> None:
    """Raise :class:`GeneratorBug` naming ``what`` unless ``ok`` (not ``assert``: it must run under ``python -O``)."""
    if not ok:
        raise GeneratorBug(what)


def walks_avoiding(m: int, n: int, blocked: tuple[int, int]) -> int:
    """The number of right/up unit-step walks from ``(0, 0)`` to ``(m, n)`` that avoid the point ``blocked``,
    counted cell by cell (dynamic programming over the grid, no formula)."""
    ways = [[0] * (n + 1) for _ in range(m + 1)]
    for x in range(m + 1):
        for y in range(n + 1):
            if (x, y) == blocked:
                continue
            ways[x][y] = 1 if x == y == 0 else (ways[x - 1][y] if x else 0) + (ways[x][y - 1] if y else 0)
    return ways[m][n]
