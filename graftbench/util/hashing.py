"""Hashing and canonical JSON: the one place that decides how bytes are committed to (a tensor's bytes:
:mod:`graftbench.store.tensor_hashing`).

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


def jcs_json(obj: Any) -> bytes:
    """Serialize ``obj`` with the JSON Canonicalization Scheme (RFC 8785, the ``rfc8785`` package): UTF-8 bytes, keys
    sorted by UTF-16 code units, numbers in ECMAScript form (``1e-7``, ``100``), so that a checker in any language
    can reproduce them. The convention of ``graftbench.manifest/2`` manifests.

    Raises ``rfc8785.CanonicalizationError`` (a ``ValueError``) for a value JSON cannot carry exactly: an integer
    of magnitude 2**53 or more, NaN or infinity; ``UnicodeEncodeError`` for a lone surrogate.
    """
    import rfc8785

    return rfc8785.dumps(obj)


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


def problem_set_json(obj: Any) -> str:
    """Serialize ``obj`` the way problem-set digests commit to it: compact, ASCII-escaped, keys in given order.

    The second canonical-JSON convention of the project, used only by
    :func:`graftbench.problems.types.problem_set_sha256`. It differs from :func:`canonical_json` in two choices:
    non-ASCII characters are written as ``\\uXXXX`` escapes (``ensure_ascii=True``; ``"é"`` is hashed as the six
    bytes ``\\u00e9``, not the two UTF-8 bytes), and keys are not sorted (the problem-set payload is a list of
    lists, so no key order arises there). The result is pure ASCII, so its UTF-8 encoding is its ASCII encoding.

    Frozen: digests of exactly these bytes are recorded in run manifests (``problem_set.sha256`` in the committed
    ``manifests/*/*.json``, under their seal), in exactness expectations (``check-exact --expect`` refuses a
    problem set whose digest differs) and in each run folder's settings (a resume with another digest is
    refused), so aligning it with :func:`canonical_json` would invalidate every recorded problem-set digest.
    Raises ``TypeError`` for objects JSON cannot represent and ``ValueError`` for NaN or infinity.
    """
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
