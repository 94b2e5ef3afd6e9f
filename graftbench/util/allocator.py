"""How this process's allocators treat tensor memory: set by :func:`set_allocator_for_grafts`, which the command
line calls when it starts (``graftbench/cli/__init__.py``), as do the benchmark's fresh-process probes and the Ray
workers; ``import graftbench`` leaves the importing process's allocator alone. This module must not import torch.

Both settings change where tensors live, never what they hold (the exactness replay in tests/eval/test_exactness.py
checks logits hashes recorded without them):

- PyTorch's CPU allocator gives tensors of 2 MiB and more 2 MiB-aligned, transparent-huge-page memory
  (``THP_MEM_ALLOC_ENABLE``, read once when torch first allocates, and inherited by child processes). A restore
  reads an artifact into new tensors, and with 4 KiB pages most of that read went to page faults: 69 ms against
  21 ms for 189 MB.
- glibc malloc keeps freed blocks of up to 32 MiB for reuse instead of returning them to the kernel
  (``mallopt(M_MMAP_THRESHOLD, 32 MiB)``, ``mallopt(M_TRIM_THRESHOLD, 1 GiB)``, see ``mallopt(3)``; 32 MiB is
  glibc's ``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit): a graft frees the previous cache and allocates the next one,
  and fresh pages must be faulted in and zeroed by the kernel. Measured on a 378 MB artifact: 110 ms per graft
  (read at page-cache speed) against 160-470 ms. The cost is that a process's resident memory does not shrink
  after a large graft until it exits.
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
THP_VAR = "THP_MEM_ALLOC_ENABLE"  # read by PyTorch's CPU allocator (c10/core/alloc_cpu.cpp)


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


def set_allocator_for_grafts(trim_bytes: int = DEFAULT_TRIM_BYTES) -> bool:
    """Set this process's allocators for repeated grafts: transparent huge pages for PyTorch's CPU tensors of
    2 MiB and more (``THP_MEM_ALLOC_ENABLE=1`` unless the environment already sets it; takes effect only if torch
    has not allocated yet, so call it before importing torch) and :func:`keep_freed_memory` with ``trim_bytes``
    (bytes; default :data:`DEFAULT_TRIM_BYTES`, 1 GiB). Returns what :func:`keep_freed_memory` returned (False
    where the C library is not glibc or ``GRAFTBENCH_MALLOC`` says otherwise). Idempotent."""
    os.environ.setdefault(THP_VAR, "1")
    return keep_freed_memory(trim_bytes)


def keep_freed_memory(trim_bytes: int) -> bool:
    """Keep freed blocks of up to 32 MiB, and up to ``trim_bytes`` bytes of free heap top (capped at 2 GiB - 1, a
    C int), from the kernel: ``mallopt(M_MMAP_THRESHOLD, 32 MiB)``, then ``mallopt(M_TRIM_THRESHOLD,
    trim_bytes)``. The threshold is the caller's whole need, set as given (glibc keeps one per process, and one
    lower than an earlier call's lowers it: a caller that must not lower the graft setting passes at least
    :data:`DEFAULT_TRIM_BYTES`, as :func:`graft_trim_bytes` does). Returns False (nothing done) where the C library
    is not glibc or ``GRAFTBENCH_MALLOC`` says otherwise."""
    mallopt = _mallopt() if os.environ.get(POLICY_VAR, "keep") == "keep" else None
    if mallopt is None:
        return False
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
    mallopt(M_TRIM_THRESHOLD, min(_INT_MAX, trim_bytes))
    return True


def graft_trim_bytes(kept_bytes: int) -> int:
    """The trim threshold (bytes) that keeps ``kept_bytes`` of free heap top from the kernel without lowering the
    graft setting's :data:`DEFAULT_TRIM_BYTES` (:func:`set_allocator_for_grafts`)."""
    return max(DEFAULT_TRIM_BYTES, kept_bytes)
