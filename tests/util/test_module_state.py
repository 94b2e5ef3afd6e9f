"""Values are passed, not kept in module globals: no module of graftbench keeps state between calls (the AST check
of tests/cli/test_options.py, shown there to find each kind of module state), except the few declared below, each
with why a process-wide value is the right owner. A new finding fails; a declared one that is gone fails too, so the
list stays the list of what is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_options import module_state

PACKAGE = Path(__file__).resolve().parents[2] / "graftbench"

# module (relative to graftbench/) -> {finding without its line number: why it stays}
DECLARED = {
    "engine/llama_cpp/engine.py": {
        "global _LOG_CALLBACK": "llama.cpp's log callback is one C pointer per process (llama_log_set); the Python "
                                "object behind it must live as long as llama.cpp may call it",
    },
    "engine/model_packages.py": {
        "module-level _verified.clear()": "forget_verified, the tests' reset of the memo below",
        "an item of module-level _verified is set or deleted": "the SHA-256 of a weights file (up to 1.1 GB) is "
            "checked once per process per file identity (device, inode, size, mtime), not at every load",
    },
}


def _findings(path: Path) -> set[str]:
    return {line.split(": ", 1)[1] for line in module_state(path.read_text(encoding="utf-8"))}


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_module_keeps_undeclared_state_between_calls(path):
    declared = set(DECLARED.get(path.relative_to(PACKAGE).as_posix(), {}))
    assert _findings(path) == declared, path


def test_every_declared_module_exists():
    assert all((PACKAGE / module).is_file() for module in DECLARED), sorted(DECLARED)
