"""Named prerequisites: a test that cannot check what it is for is skipped with the reason, never passed.

A test whose prerequisite is missing (the sandbox, the llama.cpp engine, a comparable build) calls
:func:`need` with the prerequisite's name and why it is missing. On a laptop or a host where graftbench cannot build
it, that is a named skip (pytest's ``SKIPPED [...] <name> unavailable: <why>``). Where the prerequisite should have
been built (``.ci/run`` on a machine where ``make test`` builds it), the variable :data:`REQUIRE_ENV` names it, and
the same call fails the test instead: CI cannot go green with the check not run.

``GRAFTBENCH_REQUIRE`` is a comma-separated list of prerequisite names (:data:`NAMES`), or ``all``.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_ENV = "GRAFTBENCH_REQUIRE"
# Every prerequisite a test may name; a name outside this set is a typo in a test and raises.
NAMES = frozenset({"sandbox", "llama.cpp", "chromium", "emulator"})


def required() -> frozenset[str]:
    """The prerequisites this run must have, from :data:`REQUIRE_ENV` (empty when unset).

    Raises:
        ValueError: the variable names a prerequisite not in :data:`NAMES`.
    """
    words = {word.strip() for word in os.environ.get(REQUIRE_ENV, "").split(",") if word.strip()}
    if "all" in words:
        return NAMES
    unknown = words - NAMES
    if unknown:
        raise ValueError(f"{REQUIRE_ENV} names unknown prerequisites {sorted(unknown)}; known: {sorted(NAMES)}")
    return frozenset(words)


def need(name: str, why_missing: str | None) -> None:
    """Return when the prerequisite is there (``why_missing`` empty or None); otherwise skip the calling test with
    the reason, or fail it where :data:`REQUIRE_ENV` requires the prerequisite.

    Raises:
        ValueError: ``name`` is not a known prerequisite.
        pytest.skip.Exception / pytest.fail.Exception: as above.
    """
    if name not in NAMES:
        raise ValueError(f"unknown prerequisite {name!r}; known: {sorted(NAMES)}")
    if not why_missing:
        return
    if name in required():
        pytest.fail(f"{name} required here ({REQUIRE_ENV}) but unavailable: {why_missing}", pytrace=False)
    pytest.skip(f"{name} unavailable: {why_missing}")


def llama_missing() -> str | None:
    """Why the llama.cpp engine cannot run here (llama-cpp-python not importable, with the import error), else
    ``None``: the argument of ``need("llama.cpp", ...)``."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return f"llama-cpp-python is not importable ({exc})"
    return None
