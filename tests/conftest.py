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
from hypothesis import HealthCheck, settings

from graftbench.results import layout

from .replay_lanes import BUNDLED_MODELS, REPLAY_TEST, session_replays, start_session_replays

ROOT = Path(__file__).resolve().parents[1]
# The committed manifests of the kind of machine the portable-pin expectations were first recorded on
REFERENCE_MANIFESTS = layout.manifest_folder(ROOT, layout.REFERENCE_KIND)
SHARED_DATA = ROOT.parent / "shared" / "data"
AIME2024 = SHARED_DATA / "aime2024.jsonl"
AIME2025 = SHARED_DATA / "aime2025.jsonl"
SESSION_MODEL = "smollm2-135m"

# No .hypothesis/ folder in the checkout, and no wall-clock limits: Hypothesis' default 200 ms deadline per example and
# its too_slow health check (data generation over a second) fail a test when a loaded machine stalls it (a 2-core CI
# runner with two workers and the background replays; a first sympy import inside an example). Nothing the property
# tests check is a time. A test's own ``suppress_health_check`` list replaces this one: it names too_slow as well.
settings.register_profile("hermetic", database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hermetic")

# One temporary home per test run. Under pytest-xdist (``make test`` runs two workers) the controller makes it and
# its workers, started after ``pytest_configure``, inherit it through SESSION_HOME_VARIABLE: they share one model cache
# (written under file locks and by atomic renames, so two workers loading one model both read a whole copy), and only
# the process that made the home removes it.
SESSION_HOME_VARIABLE = "GRAFTBENCH_TEST_SESSION_HOME"
_INHERITED_HOME = os.environ.get(SESSION_HOME_VARIABLE)
_SESSION_HOME = Path(_INHERITED_HOME or tempfile.mkdtemp(prefix="graftbench-test-home-"))
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
    os.environ[SESSION_HOME_VARIABLE] = str(_SESSION_HOME)
    os.environ.pop("GRAFTBENCH_ISA", None)  # tests choose their pin explicitly
    if is_xdist_worker():
        # Each worker takes one core: torch and the processes a test starts run one thread, so two workers never
        # contend for two cores with four threads (a pin records its thread count; no test depends on this one).
        os.environ["OMP_NUM_THREADS"] = "1"


def pytest_collection_modifyitems(config, items):
    """A test that uses the loaded model (the ``session`` fixture) carries the ``model`` marker, so
    ``pytest -m "not model and not slow"`` runs the quick part alone. The replay tests run last: their replays
    run in the background meanwhile (``tests/replay_lanes.py``)."""
    for item in items:
        if "session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)
    items.sort(key=lambda item: getattr(item, "originalname", "") == REPLAY_TEST)  # stable: the rest keep their order


def is_xdist_worker() -> bool:
    """This process is a pytest-xdist worker (xdist sets the variable before the worker reads its configuration)."""
    return "PYTEST_XDIST_WORKER" in os.environ


def pytest_collection_finish(session):
    """When the session runs the replay tests, start the replays of the models the ``session`` fixture does not
    load (that fixture starts its model's lane once the model is in the cache). An xdist worker starts none here:
    every worker collects every test, and only the one that is given the replay tests' file (``--dist loadfile``)
    starts them, when it reaches them, while the other worker runs the rest."""
    if session.config.option.collectonly or is_xdist_worker() or not any(
            getattr(item, "originalname", "") == REPLAY_TEST for item in session.items):
        return
    replays = start_session_replays()
    for model in BUNDLED_MODELS:
        if model != SESSION_MODEL:
            replays.model_ready(model)


def pytest_sessionfinish(session, exitstatus):
    replays = session_replays()
    if replays is not None:
        replays.stop()  # replays a stopped session never waited for


def pytest_unconfigure(config):
    if not _INHERITED_HOME:
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
    from graftbench.engine.torch.session import open_session

    loaded = open_session(SESSION_MODEL, dtype="float32", chunk_size=64)
    replays = session_replays()
    if replays is not None:  # the model is in the session's cache now: its replays will not de-quantize it again
        replays.model_ready(SESSION_MODEL)
    return loaded


@pytest.fixture(scope="session")
def aime2024():
    from graftbench.problems.loading import load_problems

    return load_problems(str(AIME2024))


@pytest.fixture
def stand_in():
    """The stand-in engine (``tests/stand_in_engine.py``) registered by its ``module:attribute`` for one test; yields
    its name."""
    from graftbench.engine import registry

    from . import stand_in_engine

    registry.register(stand_in_engine.NAME, f"{stand_in_engine.__name__}:ENGINE")
    yield stand_in_engine.NAME
    registry.unregister(stand_in_engine.NAME)
