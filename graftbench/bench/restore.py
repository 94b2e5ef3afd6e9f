"""Restore throughput against a raw read of the same bytes, the cost of each integrity hash, and a bit-flip check."""

from __future__ import annotations

import hashlib
import os
import random
import time
from pathlib import Path

import xxhash

from ..engine.base import EngineSession
from ..engine.registry import benchmark_ops
from ..store.codec import ArtifactError
from ..store.folder import Store
from .stats import gb_per_s, summary, timed

RAW_READ_METHOD = ("one unbuffered readinto() of the whole file into a preallocated bytearray, "
                   "page cache warm (the file was just written and read)")


def raw_read_s(path: Path, buffer: bytearray) -> float:
    """Seconds to read ``path`` into ``buffer`` (at least the file's size) with unbuffered ``readinto`` calls:
    the physical limit a restore is measured against."""
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        seconds, _ = timed(lambda: _fill(handle, view))
    return seconds


def raw_read_fresh_s(session: EngineSession, path: Path) -> float:
    """Seconds to read ``path`` into newly allocated memory (the engine's buffer of its size, as a restore must
    allocate the cache it reads into; torch: a ``torch.empty``): the raw read plus the kernel's zeroing of fresh
    pages."""
    ops = benchmark_ops(session.engine_name)
    started = time.perf_counter()
    buffer = ops.fresh_buffer(path.stat().st_size)
    with open(path, "rb", buffering=0) as handle:
        _fill(handle, buffer)
    return time.perf_counter() - started


def _fill(handle, view: memoryview) -> int:
    done = 0
    while n := handle.readinto(view[done:]):
        done += n
    return done


def evict(path: Path) -> None:
    """Ask the kernel to drop ``path``'s pages from the page cache (``posix_fadvise(POSIX_FADV_DONTNEED)``), so
    that the next read comes from the disk. The kernel may keep pages that are in use."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def hash_gb_per_s(data: bytes, repeats: int) -> dict:
    """In-memory speed of each hash over ``data`` (GB/s, median of ``repeats``): what the integrity check costs
    apart from reading."""
    methods = {"xxh3_128": lambda: xxhash.xxh3_128_hexdigest(data), "sha256": lambda: hashlib.sha256(data).hexdigest()}
    return {name: gb_per_s(len(data), summary([timed(fn)[0] for _ in range(repeats)])["median"])
            for name, fn in methods.items()}


def _flip(path: Path, bit: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(bit // 8)
        byte = handle.read(1)[0]
        handle.seek(bit // 8)
        handle.write(bytes([byte ^ (1 << (bit % 8))]))


def bit_flips_caught(store: Store, artifact_id: str, n: int, seed: int = 0) -> dict:
    """Flip ``n`` single bits of the artifact file, one at a time at seeded random positions (the first in the
    header, the last in the last byte), and read it each time: every read must be refused (check ``hash``).

    The file is restored after each flip. Returns ``{"tried", "caught", "positions"}`` (bit offsets).
    """
    path = store.path(artifact_id)
    size_bits = path.stat().st_size * 8
    rng = random.Random(seed)
    positions = sorted({64 + 8 * 16, size_bits - 1, *(rng.randrange(size_bits) for _ in range(max(0, n - 2)))})
    caught = 0
    for bit in positions:
        _flip(path, bit)
        try:
            store.read(artifact_id)
        except ArtifactError as exc:
            caught += exc.check == "hash"
        finally:
            _flip(path, bit)
    store.read(artifact_id)
    return {"tried": len(positions), "caught": caught, "positions": positions}


def measure_restore(session: EngineSession, store: Store, artifact_id: str, repeats: int, flips: int) -> dict:
    """Restore throughput of one artifact: raw read (into a warm buffer, and into fresh memory), read with each
    integrity method, and the whole restore (read, XXH3-128, cache rebuild), in seconds and GB/s; one cold-file
    restore; hash speeds; bit flips."""
    path = store.path(artifact_id)
    size = path.stat().st_size
    buffer = bytearray(size)
    raw_read_s(path, buffer)  # warm the page cache
    rows = {
        "raw_read": [raw_read_s(path, buffer) for _ in range(repeats)],
        "raw_read_fresh_memory": [raw_read_fresh_s(session, path) for _ in range(repeats)],
        "read_xxh3_128": [timed(lambda: store.read(artifact_id, "xxh3_128"))[0] for _ in range(repeats)],
        "read_sha256": [timed(lambda: store.read(artifact_id, "sha256"))[0] for _ in range(repeats)],
        "restore_xxh3_128": [timed(lambda: _restore(session, store, artifact_id))[0] for _ in range(repeats)],
    }
    figures = {name: {**summary(values), "gb_per_s": gb_per_s(size, summary(values)["median"])}
               for name, values in rows.items()}
    evict(path)
    cold_s = timed(lambda: _restore(session, store, artifact_id))[0]
    return {
        "artifact_bytes": size, "raw_read_method": RAW_READ_METHOD, "seconds": figures,
        "restore_fraction_of_raw_read": figures["restore_xxh3_128"]["gb_per_s"] / figures["raw_read"]["gb_per_s"],
        "restore_fraction_of_raw_read_fresh_memory":
            figures["restore_xxh3_128"]["gb_per_s"] / figures["raw_read_fresh_memory"]["gb_per_s"],
        "cold_restore": {"seconds": cold_s, "gb_per_s": gb_per_s(size, cold_s),
                         "method": "posix_fadvise(DONTNEED) on the file, then read, XXH3-128 and rebuild"},
        "hash_in_memory_gb_per_s": hash_gb_per_s(bytes(buffer), repeats),
        "bit_flips": bit_flips_caught(store, artifact_id, flips),
    }


def _restore(session: EngineSession, store: Store, artifact_id: str):
    return benchmark_ops(session.engine_name).restore(session, store.read(artifact_id, "xxh3_128"))
