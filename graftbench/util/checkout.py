"""The git commit of the graftbench checkout a result comes from. Imports no torch."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def checkout_commit() -> str | None:
    """The commit (40 hex digits) of the git checkout graftbench runs from; ``None`` outside a git checkout or
    when git cannot be run (10 s at most)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None
