"""A KV pool: memory for KV caches faulted in once, when a session opens, so that a graft in a fresh process reads
its artifact into pages that are already resident.

Why: a graft reads an artifact into new buffers (``artifact_reader.read_safetensors``). In a fresh process those
pages have never been touched, and the kernel faults each page in as the read first writes it. For an
8,192-token smollm2-135m artifact (377 MB) the first graft of a process took 507 ms against a 141 ms median, with
the read into resident pages 38 ms (``results/amd-epyc-avx512/bench/bench-smollm2-135m.json``, 2026-12-01): 3.6x.
llama.cpp pays the same cost when it creates a context (its KV buffer is allocated and cleared for ``n_ctx``
tokens), not at state load; the pool does the same, and the benchmark reports its cost at open beside the first
graft it speeds up.

How: the package keeps freed heap blocks of up to 32 MiB from the kernel (:mod:`graftbench.util.allocator`). The pool
writes ``bytes`` of heap in blocks and frees them, raising the trim threshold to keep them all (never below the graft
setting: :func:`graftbench.util.allocator.graft_trim_bytes`): later KV buffers of
up to 32 MiB each, allocated on the same thread (the main arena), reuse those pages. Only with glibc and the
package's allocator setting (``GRAFTBENCH_MALLOC`` unset or ``keep``); elsewhere :func:`reserve` does nothing and
says so. Resident memory stays at least the pool's size for the life of the process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ...util.allocator import MMAP_THRESHOLD_MAX, graft_trim_bytes, keep_freed_memory


@dataclass(frozen=True)
class PoolReport:
    """What :func:`reserve` did: ``bytes`` faulted in (0 when nothing was done), ``seconds`` it took, and ``how``
    (``"glibc heap"`` or why nothing was done)."""

    bytes: int
    seconds: float
    how: str


NO_POOL = PoolReport(0, 0.0, "no pool asked for")


def kv_bytes_per_token(model) -> int:
    """Bytes of keys and values one token takes in ``model``'s cache: layers x 2 x KV heads x head dim x element
    size. An upper bound for models with sliding-window layers (those keep only their window)."""
    config = model.config.get_text_config()
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    element = torch.empty((), dtype=model.dtype).element_size()
    return int(config.num_hidden_layers * 2 * heads * head_dim * element)


def reserve(nbytes: int, block_bytes: int = 16 << 20) -> PoolReport:
    """Fault ``nbytes`` of heap in and free it into glibc's main arena, kept from the kernel, so that later
    allocations (each below 32 MiB, from this thread) reuse resident pages. ``block_bytes`` is the size written at a
    time (below :data:`MMAP_THRESHOLD_MAX`). Raises ``ValueError`` for a negative size or a block of 32 MiB or more.
    Returns a :class:`PoolReport` (bytes 0 where freed memory is not kept, see :mod:`graftbench.util.allocator`, or
    ``nbytes`` is 0)."""
    if nbytes < 0:
        raise ValueError(f"KV pool size must be >= 0 bytes, got {nbytes}")
    if not 0 < block_bytes < MMAP_THRESHOLD_MAX:
        raise ValueError(f"KV pool block must be between 1 byte and 32 MiB, got {block_bytes}")
    if nbytes == 0:
        return NO_POOL
    started = time.perf_counter()
    if not keep_freed_memory(graft_trim_bytes(nbytes + MMAP_THRESHOLD_MAX)):  # never below the graft setting
        return PoolReport(0, 0.0, "freed memory is not kept (not glibc, or GRAFTBENCH_MALLOC): no pool")
    blocks = [torch.empty(min(block_bytes, nbytes - start), dtype=torch.uint8) for start in range(0, nbytes, block_bytes)]
    for block in blocks:
        block.zero_()
    del blocks
    return PoolReport(nbytes, time.perf_counter() - started, "glibc heap")


def reserve_tokens(model, tokens: int) -> PoolReport:
    """:func:`reserve` enough for a KV cache of ``tokens`` tokens of ``model`` (:func:`kv_bytes_per_token`).
    Raises ``ValueError`` for a negative count."""
    if tokens < 0:
        raise ValueError(f"KV pool must be >= 0 tokens, got {tokens}")
    return reserve(tokens * kv_bytes_per_token(model))
