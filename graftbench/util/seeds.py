"""Per-sample seeds, derived so that a sample draws the same tokens whatever the run's order, resumption or sharding.

Imports no torch, so ``graftbench merge`` can check them without a model.
"""

from __future__ import annotations

import hashlib


def sample_seed(run_seed: int, problem_id: str, sample_index: int) -> int:
    """The seed of one sample: the first 53 bits of SHA-256 of ``"<run_seed>:<problem_id>:<sample_index>"`` (53 so
    that a manifest's RFC 8785 JSON carries it exactly). Independent of the order problems are run in and of how many
    samples a problem has."""
    digest = hashlib.sha256(f"{run_seed}:{problem_id}:{sample_index}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") >> 11
