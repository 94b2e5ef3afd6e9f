"""Resident memory of a graft, over the loaded model, in a fresh process per artifact (so that heap memory kept
from earlier work in the benchmark's own process cannot hide the increase).

The same probe times that graft (read, rebuild, query forward): the first graft of a process, whose memory is
all freshly faulted in, against the benchmark's medians, taken in a process that has grafted before.

Run as ``python -m graftbench.bench.memory STORE ARTIFACT_ID MODEL DTYPE CHUNK_SIZE QUERY_IDS_JSON``: prints
``{"rss_at_rest_bytes", "increase_bytes", "rss_after_bytes", "first_graft_in_process_s"}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .stats import PeakRSS, rss_bytes


def _probe(store_root: str, artifact_id: str, model: str, dtype: str, chunk_size: int, query: list[int]) -> dict:
    from .. import engine, graft
    from ..session import open_session
    from ..store import Store
    from .ttft import DECODE_ROOM

    session = open_session(model, dtype=dtype, chunk_size=chunk_size)
    store = Store(store_root)
    engine.prefill(session.model, engine.new_cache(session.model), query, chunk_size)  # warm the forward once
    with PeakRSS() as peak:
        at_rest = peak.start
        started = time.perf_counter()
        cache = graft.restore(session.model, session.config, store.read(artifact_id, room=len(query) + DECODE_ROOM))
        engine.prefill(session.model, cache, query, chunk_size)
        first_graft_s = time.perf_counter() - started
    return {"rss_at_rest_bytes": at_rest, "increase_bytes": peak.increase, "rss_after_bytes": rss_bytes(),
            "first_graft_in_process_s": first_graft_s}


def graft_memory(store_root, artifact_id: str, model: str, dtype: str, chunk_size: int, query: list[int]) -> dict:
    """Peak resident memory increase (bytes) of read + restore + query forward, the cache held to the end, over
    a loaded model at rest, in a fresh process. Raises ``RuntimeError`` with the probe's stderr if it fails."""
    done = subprocess.run([sys.executable, "-m", "graftbench.bench.memory", str(store_root), artifact_id, model,
                           dtype, str(chunk_size), json.dumps(query)],
                          capture_output=True, text=True, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    if done.returncode != 0:
        raise RuntimeError(f"graft memory probe failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    root, artifact, name, dtype_name, chunk, query_json = sys.argv[1:7]
    print(json.dumps(_probe(root, artifact, name, dtype_name, int(chunk), json.loads(query_json))))
