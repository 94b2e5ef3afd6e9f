"""The long-context store: far more tokens of KV state on disk than the model's window, any artifact reached in
a fraction of a second, and no memory beyond the artifact grafted.

The store is built from real prefills of AIME text: artifact ``i`` is ``artifact_tokens`` tokens of the joined
problems-with-solutions text starting at offset ``i * STRIDE`` (wrapping), so that every artifact is a different
token sequence at positions ``0..artifact_tokens-1``. The build is resumable: each artifact is indexed under the
problem key ``long-context/<i>/<n>`` and skipped when already there. Reaching an artifact is what ``eval --graft``
does: route on the exact key, read with the XXH3-128 check, rebuild the cache, forward a 1-token query.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

from ..engine.base import EngineSession
from ..engine.registry import benchmark_ops
from ..store.folder import Store
from .restore import evict
from .memory import graft_memory
from .stats import summary, timed

STRIDE = 997  # tokens between the starts of consecutive artifacts (prime, so offsets rarely repeat)


def segment(corpus: list[int], i: int, n: int) -> list[int]:
    """Tokens ``n`` of ``corpus`` from offset ``i * STRIDE``, wrapping around; raises ``ValueError`` if the
    corpus is shorter than ``n``."""
    if len(corpus) < n:
        raise ValueError(f"the text holds {len(corpus)} tokens, fewer than an artifact of {n}")
    start = (i * STRIDE) % len(corpus)
    return (corpus + corpus)[start:start + n]


def key(i: int, n: int) -> str:
    """The problem key artifact ``i`` of ``n`` tokens is indexed under."""
    return f"long-context/{i}/{n}"


def build(session: EngineSession, store: Store, corpus: list[int], artifact_tokens: int, total_tokens: int,
          on_step=lambda: None) -> list[str]:
    """Deposit artifacts until the store holds at least ``total_tokens`` tokens in ``artifact_tokens``-token
    artifacts (those already there are kept); returns their ids in order. ``on_step`` after each artifact."""
    ids = []
    ops = benchmark_ops(session.engine_name)
    fingerprint = session.config.fingerprint
    for i in range(-(-total_tokens // artifact_tokens)):
        found = store.find_exact(fingerprint, key(i, artifact_tokens))
        if found is None:
            data = ops.artifact_bytes(session, segment(corpus, i, artifact_tokens),
                                      {"problem_key": key(i, artifact_tokens), "source": "long-context"})
            found = store.put(data)
        ids.append(found)
        on_step()
    return ids


def reach(session: EngineSession, store: Store, i: int, artifact_tokens: int, query: list[int]) -> dict:
    """Route to artifact ``i`` by its key, read, rebuild and forward ``query``: seconds of each and in all."""
    ops = benchmark_ops(session.engine_name)
    route_s, artifact_id = timed(lambda: store.find_exact(session.config.fingerprint, key(i, artifact_tokens)))
    read_s, artifact = timed(lambda: store.read(artifact_id))
    rebuild_s, cache = timed(lambda: ops.restore(session, artifact))
    query_s, _ = timed(lambda: ops.prefill(session, cache, query))
    return {"route_s": route_s, "read_s": read_s, "rebuild_s": rebuild_s, "query_s": query_s,
            "total_s": route_s + read_s + rebuild_s + query_s}


def measure(session: EngineSession, model: str, root: Path, corpus: list[int], artifact_tokens: int, total_tokens: int,
            probes: int, query: list[int], on_step=lambda: None) -> dict:
    """Build (or resume) the store under ``root`` and reach ``probes`` random artifacts twice each: with the file
    in the page cache and after evicting it; memory increase over the loaded model for one graft (in a fresh
    process, :func:`graftbench.bench.memory.graft_memory`)."""
    store = Store(root)
    started = time.perf_counter()
    ids = build(session, store, corpus, artifact_tokens, total_tokens, on_step)
    build_s = time.perf_counter() - started
    rows = {row["id"]: row for row in store.rows() if row["id"] in set(ids)}
    stored_tokens = sum(rows[i]["n_tokens"] for i in ids)
    stored_bytes = sum(rows[i]["bytes"] for i in ids)
    rng = random.Random(0)
    picks = [rng.randrange(len(ids)) for _ in range(probes)]
    warm, cold = [], []
    for i in picks:
        store.read(ids[i])  # bring the file into the page cache
        warm.append(reach(session, store, i, artifact_tokens, query[:1]))
        evict(store.path(ids[i]))
        cold.append(reach(session, store, i, artifact_tokens, query[:1]))
    memory = graft_memory(root, ids[picks[0]], model, session.config.dtype, session.config.chunk_size, query[:1])
    usage = shutil.disk_usage(root)
    per_token = stored_bytes / stored_tokens
    return {
        "model": session.config.model, "dtype": session.config.dtype, "artifacts": len(ids),
        "artifact_tokens": artifact_tokens, "stored_tokens": stored_tokens, "stored_bytes": stored_bytes,
        "bytes_per_token": per_token, "context_window": session.context_window,
        "capacity_tokens_in_free_disk": int(usage.free / per_token), "free_disk_bytes": usage.free,
        "build_s": build_s, "probes": probes,
        "reach_warm_s": {k: summary([r[k] for r in warm]) for k in warm[0]},
        "reach_cold_s": {k: summary([r[k] for r in cold]) for k in cold[0]},
        "graft_memory": memory,
        "graft_memory_over_artifact_bytes": memory["increase_bytes"] / rows[ids[picks[0]]]["bytes"],
    }
