"""Shared fixtures: the real data in ../shared/data, one loaded default model per test session, and hermetic folders.

No test reads or writes the checkout's ``runs/`` or ``store/``, the user's home or caches: before any test runs,
the model cache (``GRAFTBENCH_CACHE``), Hugging Face's caches and ``HOME`` point into one temporary folder for the
session (the default model is de-quantized there once), and every test runs in its own temporary working folder
with ``GRAFTBENCH_RUNS_DIR`` and ``GRAFTBENCH_STORE`` inside it. So ``make run`` before ``make test``, or any other
local state, cannot change a test's result.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
AIME2024 = SHARED_DATA / "aime2024.jsonl"
AIME2025 = SHARED_DATA / "aime2025.jsonl"

settings.register_profile("hermetic", database=None)  # no .hypothesis/ folder in the checkout
settings.load_profile("hermetic")

_SESSION_HOME = Path(tempfile.mkdtemp(prefix="graftbench-test-home-"))
HERMETIC_ENV = {
    "HOME": str(_SESSION_HOME / "home"),
    "GRAFTBENCH_CACHE": str(_SESSION_HOME / "graftbench-cache"),
    "HF_HOME": str(_SESSION_HOME / "hf"),
    "HF_DATASETS_CACHE": str(_SESSION_HOME / "hf" / "datasets"),
    "XDG_CACHE_HOME": str(_SESSION_HOME / "xdg-cache"),
    "MPLCONFIGDIR": str(_SESSION_HOME / "matplotlib"),
}


def pytest_configure(config):
    """Point every cache at the session's temporary folder before any test module imports a library."""
    for path in HERMETIC_ENV.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    os.environ.update(HERMETIC_ENV)
    os.environ.pop("GRAFTBENCH_ISA", None)  # tests choose their pin explicitly


def pytest_collection_modifyitems(config, items):
    """A test that uses the loaded model (the ``session`` fixture) carries the ``model`` marker, so
    ``pytest -m "not model and not slow"`` runs the quick part alone."""
    for item in items:
        if "session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def hermetic_folders(tmp_path_factory, monkeypatch):
    """Each test works in its own temporary folder (apart from its ``tmp_path``): default runs and store folders
    live there, not in the checkout."""
    work = tmp_path_factory.mktemp("work")
    monkeypatch.chdir(work)
    monkeypatch.setenv("GRAFTBENCH_RUNS_DIR", str(work / "runs"))
    monkeypatch.setenv("GRAFTBENCH_STORE", str(work / "store"))
    return work


@pytest.fixture(scope="session")
def session():
    """The default model (smollm2-135m, float32) with its pinned config, loaded once."""
    from graftbench.engine.session import open_session

    return open_session("smollm2-135m", dtype="float32", chunk_size=64)


@pytest.fixture(scope="session")
def aime2024():
    from graftbench.problems.loading import load_problems

    return load_problems(str(AIME2024))
