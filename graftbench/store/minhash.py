"""MinHash locality-sensitive hashing of problem texts, so the router's similarity lookup stays flat in store size.

A problem text (already normalized) is cut into character 5-grams; 40 MinHash values are taken over them, and
grouped into 20 bands of 2. Each band becomes one 64-bit key, scoped by the config fingerprint, that the store
indexes. Two texts whose 5-gram Jaccard similarity is J share at least one band with probability
1 - (1 - J^2)^20 (Leskovec, Rajaraman and Ullman, *Mining of Massive Datasets*, ch. 3.4): 0.85 at J = 0.3,
0.97 at J = 0.4, 0.9999 at J = 0.6. Only texts sharing a band are compared with ``difflib``, so a lookup reads a
few index rows whatever the store holds; the price is that a deposit whose 5-gram Jaccard with the query is below
about 0.3 may be missed.
"""

from __future__ import annotations

import numpy as np
import xxhash

SHINGLE_CHARS = 5
BANDS = 20
ROWS_PER_BAND = 2
_HASHES = BANDS * ROWS_PER_BAND
_SEED = 20240501
# Multiply-add hash family over uint64 (wrapping); odd multipliers keep each map a bijection.
_RNG = np.random.default_rng(_SEED)
_MULTIPLIERS = (_RNG.integers(1, 2**63, size=_HASHES, dtype=np.uint64) | np.uint64(1)).reshape(-1, 1)
_ADDENDS = _RNG.integers(0, 2**63, size=_HASHES, dtype=np.uint64).reshape(-1, 1)


def shingles(text: str) -> set[str]:
    """Character 5-grams of ``text`` (the whole text when shorter); empty text gives no shingles."""
    if len(text) <= SHINGLE_CHARS:
        return {text} if text else set()
    return {text[i:i + SHINGLE_CHARS] for i in range(len(text) - SHINGLE_CHARS + 1)}


def minhash(text: str) -> np.ndarray:
    """The MinHash signature of ``text``: uint64 ``[40]``; raises ``ValueError`` for empty text."""
    grams = shingles(text)
    if not grams:
        raise ValueError("cannot take the MinHash of an empty text")
    base = np.fromiter((xxhash.xxh64_intdigest(g.encode(), seed=_SEED) for g in grams), dtype=np.uint64, count=len(grams))
    return (_MULTIPLIERS * base[None, :] + _ADDENDS).min(axis=1)


def band_keys(config_fingerprint: str, text: str) -> list[int]:
    """The 20 band keys of ``text`` under ``config_fingerprint``, as signed 64-bit ints (SQLite's INTEGER).

    Empty text has no keys.
    """
    if not text:
        return []
    signature = minhash(text).reshape(BANDS, ROWS_PER_BAND)
    keys = []
    for band, rows in enumerate(signature):
        digest = xxhash.xxh64_intdigest(f"{config_fingerprint}:{band}:".encode() + rows.tobytes(), seed=_SEED)
        keys.append(digest - (1 << 64) if digest >= 1 << 63 else digest)
    return keys
