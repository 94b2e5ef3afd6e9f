"""``check-exact --engine llama.cpp``: :mod:`graftbench.eval.exactness` on a llama.cpp session (kept for
:mod:`graftbench.cli.exact_llama` until the two check-exact commands are one)."""

from __future__ import annotations

from .exactness import Replay, replay, run_check_exact
from ..problems.types import Problem


def certify_llama(ls, problems: list[Problem], source: str, samples: int, with_controls: bool, control_pairs: int,
                  on_pair=None, done: list[dict] | None = None, on_reused=None) -> dict:
    """:func:`graftbench.eval.exactness.run_check_exact` on the llama.cpp session ``ls``."""
    return run_check_exact(ls, problems, source, samples, with_controls, control_pairs, on_pair, done, on_reused)


def replay_llama(ls, expected: dict, problems: list[Problem], limit: int | None = None, on_pair=None) -> Replay:
    """:func:`graftbench.eval.exactness.replay` on the llama.cpp session ``ls``."""
    return replay(ls, expected, problems, limit, on_pair)
