"""Values are passed, not kept in module globals: no module of ``graftbench/util`` keeps state between calls (the
AST check of tests/cli/test_options.py, shown there to find each kind of module state)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_options import module_state

UTIL = Path(__file__).resolve().parents[2] / "graftbench" / "util"


@pytest.mark.parametrize("path", sorted(UTIL.glob("*.py")), ids=lambda p: p.name)
def test_no_module_of_util_keeps_state_between_calls(path):
    assert module_state(path.read_text(encoding="utf-8")) == [], path
