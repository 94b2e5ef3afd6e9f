"""Hashing and canonical JSON: the one place that decides how bytes are committed to.

Imports no torch, so that manifests can be verified on a machine without a model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

_READ_BLOCK = 1 << 20  # bytes


def canonical_json(obj: Any) -> str:
    """Serialize ``obj`` as canonical JSON: sorted keys, no whitespace, UTF-8 text (not ASCII-escaped).

    Two equal objects give the same string, so its SHA-256 is a stable commitment.
    Raises ``TypeError`` for objects JSON cannot represent and ``ValueError`` for NaN or infinity.
    """
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_bytes(data: bytes) -> str:
    """SHA-256 hex digest (64 characters) of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    """SHA-256 hex digest of the UTF-8 encoding of ``text``."""
    return sha256_bytes(text.encode("utf-8"))


def sha256_json(obj: Any) -> str:
    """SHA-256 hex digest of :func:`canonical_json` of ``obj``."""
    return sha256_text(canonical_json(obj))


def sha256_file(path: str | Path) -> str:
    """SHA-256 hex digest of a file's bytes, read in 1 MiB blocks. Raises ``OSError`` if unreadable."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()
