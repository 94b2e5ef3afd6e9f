"""A test of the tests: under the suite's own pytest settings (pyproject.toml), a parametrization that finds nothing
(an empty glob of committed files) is a collection error, not a silent skip, and an ``xfail`` mark on a test that
passes is a failure, not a pass in disguise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

EMPTY = """
import pytest


@pytest.mark.parametrize("path", sorted(__import__("pathlib").Path(__file__).parent.glob("*.none")))
def test_each_committed_file(path):
    assert path.read_text()
"""

XPASS = """
import pytest


@pytest.mark.xfail(reason="expected to differ on another kind of CPU")
def test_declared_difference():
    assert True
"""


def _pytest(folder: Path, source: str) -> subprocess.CompletedProcess:
    """pytest in a fresh process on one test file holding ``source``, under the checkout's pytest settings."""
    (folder / "test_probe.py").write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
                           str(folder), "-p", "no:cacheprovider", "-p", "no:xdist", str(folder / "test_probe.py")],
                          cwd=folder, capture_output=True, text=True, timeout=120)


def test_an_empty_parametrization_is_a_collection_error(tmp_path):
    done = _pytest(tmp_path, EMPTY)
    assert done.returncode == 2 and "Empty parameter set in 'test_each_committed_file'" in done.stdout, done.stdout
    assert "skipped" not in done.stdout


def test_an_xfail_mark_on_a_passing_test_fails(tmp_path):
    done = _pytest(tmp_path, XPASS)
    assert done.returncode == 1 and "XPASS(strict)" in done.stdout and "1 failed" in done.stdout, done.stdout
