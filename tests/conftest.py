"""Shared fixtures: the real data in ../shared/data and one loaded default model per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
AIME2024 = SHARED_DATA / "aime2024.jsonl"
AIME2025 = SHARED_DATA / "aime2025.jsonl"


@pytest.fixture(scope="session")
def session():
    """The default model (smollm2-135m, float32) with its pinned config, loaded once."""
    from graftbench.session import open_session

    return open_session("smollm2-135m", dtype="float32", chunk_size=64)


@pytest.fixture(scope="session")
def aime2024():
    from graftbench.problems import load_problems

    return load_problems(str(AIME2024))
