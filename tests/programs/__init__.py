"""The programs stage: the sandbox, the program environment, program mode and program replay."""

from __future__ import annotations

import functools

from graftbench.programs.sandbox import Sandbox, SandboxError, open_sandbox
from tests.prereqs import need


@functools.cache
def opened() -> tuple[Sandbox | None, str]:
    """This machine's sandbox, opened once per test process, and ``""``; or ``None`` and why it cannot be built."""
    try:
        return open_sandbox(), ""
    except SandboxError as exc:
        return None, str(exc)


def sandbox_here() -> Sandbox:
    """This machine's sandbox (:func:`opened`); the calling test is skipped, or failed where ``GRAFTBENCH_REQUIRE``
    names the sandbox, where it cannot be built."""
    found, why = opened()
    need("sandbox", why)
    return found
