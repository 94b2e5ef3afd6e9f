"""A test of the tests: where the sandbox cannot be built, its tests are reported skipped, with the reason, and
where ``GRAFTBENCH_REQUIRE`` names the sandbox (as ``.ci/run`` sets where ``make test`` builds it) they fail. None
passes without checking.

The sandbox is made really unavailable, not pretended so: the tests run in a fresh pytest as root without any
capability (``setpriv --inh-caps=-all --bounding-set=-all``, like a container without ``CAP_SYS_ADMIN``), where
bubblewrap cannot create its namespaces and the sandbox's probe fails; as another user, the probe fails already on
"must run as root". The counts are read from pytest's own summary line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.prereqs import REQUIRE_ENV

ROOT = Path(__file__).resolve().parents[2]
# Three containment tests of tests/programs/test_sandbox.py (each needs the sandbox).
SELECTED = ("test_a_program_prints_its_answer_and_imports_sympy or test_a_fork_bomb_is_refused_and_leaves_no_process "
            "or test_a_program_sees_only_the_program_environment")


def _run_without_the_sandbox(require: str | None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "tests/programs/test_sandbox.py", "-k", SELECTED, "-p", "no:cacheprovider",
               "-rsf"]  # pyproject's addopts already make it -q
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
        assert setpriv is not None, "setpriv (util-linux) is needed to drop root's capabilities"
        command = [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", *command]
    env = {name: value for name, value in os.environ.items() if name != REQUIRE_ENV}
    if require is not None:
        env[REQUIRE_ENV] = require
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _counts(output: str) -> dict[str, int]:
    """The outcome counts of pytest's summary line (``3 skipped in 1.2s``, ``3 failed in 1.0s``)."""
    summary = [line for line in output.splitlines() if re.search(r"\d+ \w+.* in [\d.]+s", line)][-1]
    return {word: int(count) for count, word in re.findall(r"(\d+) (passed|failed|skipped|error|errors|xfailed)",
                                                           summary)}


@pytest.mark.slow  # two fresh pytest processes
def test_without_the_sandbox_its_tests_are_skipped_with_the_reason_and_fail_where_required():
    skipped = _run_without_the_sandbox(None)
    assert _counts(skipped.stdout) == {"skipped": 3}, skipped.stdout[-3000:]
    reasons = [line for line in skipped.stdout.splitlines() if line.startswith("SKIPPED")]
    assert sum(int(re.match(r"SKIPPED \[(\d+)\]", line).group(1)) for line in reasons) == 3  # one line per reason
    assert reasons and all("sandbox unavailable: " in line for line in reasons)
    if os.geteuid() == 0:
        assert all("Operation not permitted" in line for line in reasons)  # bubblewrap could not make its namespaces
    assert skipped.returncode == 0

    failed = _run_without_the_sandbox("sandbox")
    assert _counts(failed.stdout) == {"failed": 3}, failed.stdout[-3000:]
    assert failed.stdout.count(f"sandbox required here ({REQUIRE_ENV}) but unavailable: ") >= 3
    assert failed.returncode == 1
