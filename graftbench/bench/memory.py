"""Resident memory of a graft, over the loaded model, in a fresh process per artifact (so that heap memory kept
from earlier work in the benchmark's own process cannot hide the increase).

The same probe times that graft (read, rebuild, query forward): the first graft of a process, whose memory is
all freshly faulted in, against the benchmark's medians, taken in a process that has grafted before. With a KV pool
(:mod:`graftbench.engine.torch.kv_pool`, reserved when the session opens) the graft reads into resident pages instead; the
probe then reports the pool's size and the seconds it took at open.

Run as ``python -m graftbench.bench.memory STORE ARTIFACT_ID MODEL DTYPE CHUNK_SIZE QUERY_IDS_JSON [POOL_TOKENS]``:
prints ``{"rss_at_rest_bytes", "increase_bytes", "rss_after_bytes", "first_graft_in_process_s", "kv_pool_bytes",
"kv_pool_s"}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .stats import PeakRSS, rss_bytes

DECODE_ROOM = 128  # tokens of room a TTFT graft reads the artifact with beyond the query, as eval reads it


def _probe(store_root: str, artifact_id: str, model: str, dtype: str, chunk_size: int, query: list[int],
           pool_tokens: int = 0) -> dict:
    from ..engine.registry import DEFAULT_ENGINE, benchmark_ops
    from ..store.folder import Store

    ops = benchmark_ops(DEFAULT_ENGINE)  # the engine graftbench bench measures
    session = ops.open_for_benchmark(model, dtype, chunk_size=chunk_size, kv_pool_tokens=pool_tokens)
    store = Store(store_root)
    ops.prefill(session, ops.new_cache(session), query)  # warm the forward once
    with PeakRSS() as peak:
        at_rest = peak.start
        started = time.perf_counter()
        cache = ops.restore(session, store.read(artifact_id, room=len(query) + DECODE_ROOM))
        ops.prefill(session, cache, query)
        first_graft_s = time.perf_counter() - started
    return {"rss_at_rest_bytes": at_rest, "increase_bytes": peak.increase, "rss_after_bytes": rss_bytes(),
            "first_graft_in_process_s": first_graft_s, "kv_pool_bytes": session.kv_pool.bytes,
            "kv_pool_s": session.kv_pool.seconds}


def graft_memory(store_root, artifact_id: str, model: str, dtype: str, chunk_size: int, query: list[int],
                 pool_tokens: int = 0) -> dict:
    """Peak resident memory increase (bytes) of read + restore + query forward, the cache held to the end, over
    a loaded model at rest, and that first graft's seconds, in a fresh process whose session reserved a KV pool of
    ``pool_tokens`` tokens (0: none). Raises ``RuntimeError`` with the probe's stderr if it fails."""
    done = subprocess.run([sys.executable, "-m", "graftbench.bench.memory", str(store_root), artifact_id, model,
                           dtype, str(chunk_size), json.dumps(query), str(pool_tokens)],
                          capture_output=True, text=True, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    if done.returncode != 0:
        raise RuntimeError(f"graft memory probe failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    from ..util.allocator import set_allocator_for_grafts

    set_allocator_for_grafts()  # as the command line that starts this probe
    root, artifact, name, dtype_name, chunk, query_json = sys.argv[1:7]
    pool = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    print(json.dumps(_probe(root, artifact, name, dtype_name, int(chunk), json.loads(query_json), pool)))
