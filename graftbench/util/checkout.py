"""The git commit of the graftbench checkout a result comes from. Imports no torch."""

from __future__ import annotations

from pathlib import Path

from .provenance import code_version

ROOT = Path(__file__).resolve().parents[2]


def checkout_commit() -> str | None:
    """The commit (40 hex digits) of the git checkout graftbench runs from; ``None`` outside a git checkout, in one
    that does not track graftbench's source, or when git cannot be run (:func:`graftbench.util.provenance.code_version`,
    which also says why and whether tracked files differ from it)."""
    return code_version()["commit"]
