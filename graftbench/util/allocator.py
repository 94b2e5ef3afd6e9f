"""How this process's C allocator treats freed memory (glibc only; imported by ``graftbench/__init__.py`` before
torch, so it must not import torch).

glibc returns a freed block to the kernel when the block was ``mmap``-ed (128 KiB and up by default) or when the
heap's free top exceeds the trim threshold; the next allocation of that size then faults fresh pages in, zeroed by
the kernel. :func:`keep_freed_memory` raises both thresholds so freed blocks of up to 32 MiB stay in the heap for
reuse (``mallopt(3)``; 32 MiB is glibc's ``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit).
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # bytes
DEFAULT_TRIM_BYTES = 1 << 30
_INT_MAX = 2**31 - 1  # mallopt takes a C int
POLICY_VAR = "GRAFTBENCH_MALLOC"  # "keep" (the default) or anything else to leave glibc's defaults


def _mallopt():
    """glibc's ``mallopt``, or None where the C library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return mallopt


def keep_freed_memory(trim_bytes: int = DEFAULT_TRIM_BYTES) -> bool:
    """Keep freed blocks of up to 32 MiB, and up to ``trim_bytes`` of free heap top (capped at 2 GiB - 1, a C int),
    from the kernel. Never lowers the trim threshold this module set before. Returns False (nothing done) where
    the C library is not glibc or ``GRAFTBENCH_MALLOC`` says otherwise."""
    global _trim
    mallopt = _mallopt() if os.environ.get(POLICY_VAR, "keep") == "keep" else None
    if mallopt is None:
        return False
    _trim = max(_trim, min(_INT_MAX, trim_bytes))
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
    mallopt(M_TRIM_THRESHOLD, _trim)
    return True


_trim = 0
