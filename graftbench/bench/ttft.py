"""Time to first token: a cold chunked prefill of the artifact's text plus the query, against a graft (read with
its integrity check, on a GPU the copy to the device, cache rebuild) plus the same query. Both end in the argmax of
the query's last logits. On a GPU each query's energy is measured too (:class:`graftbench.util.energy.EnergyMeter`,
NVML where it is available)."""

from __future__ import annotations

from pathlib import Path

from ..engine.base import EngineSession
from ..engine.registry import benchmark_ops
from ..store.folder import Store
from ..util.energy import EnergyMeter
from .memory import DECODE_ROOM, graft_memory
from .stats import summary, timed


def deposit_tokens(session: EngineSession, store: Store, ids: list[int]) -> str:
    """Deposit ``ids`` as a top-level artifact (untimed set-up); returns its id."""
    return store.put(benchmark_ops(session.engine_name).artifact_bytes(session, ids, {"source": "bench"}))


def prefill_once(session: EngineSession, ids: list[int], queries: dict[str, list[int]],
                 meter: EnergyMeter | None = None) -> dict:
    """One cold chunked prefill of ``ids``, then each query on its own copy of the cache.

    Returns seconds: ``prefill_s`` and per query name ``{name}_s`` (query forward plus argmax), and the logits
    SHA-256 of each query's last position (``{name}_logits``). Copying the cache for the second query is untimed.
    With ``meter``, joules too: ``prefill_j`` and ``{name}_j``.
    """
    ops = benchmark_ops(session.engine_name)
    cache = ops.new_cache(session)
    seconds, _, joules = _measured(lambda: ops.prefill(session, cache, ids), meter)
    out = {"prefill_s": seconds, **({"prefill_j": joules} if meter else {})}
    for i, (name, query) in enumerate(queries.items()):
        target = cache if i == len(queries) - 1 else ops.copy_cache(cache)
        seconds, (_, digest), joules = _measured(lambda: ops.first_token(session, target, query), meter)
        out[f"{name}_s"], out[f"{name}_logits"] = seconds, digest
        if meter:
            out[f"{name}_j"] = joules
    return out


def _measured(fn, meter: EnergyMeter | None) -> tuple[float, object, float | None]:
    """Seconds ``fn()`` took, what it returned, and the joules ``meter`` counted meanwhile (``None`` without one)."""
    before = meter.read() if meter else None
    seconds, result = timed(fn)
    return seconds, result, meter.read() - before if meter else None


def graft_once(session: EngineSession, store: Store, artifact_id: str, query: list[int], integrity: str,
               meter: EnergyMeter | None = None) -> dict:
    """One graft of ``artifact_id`` and ``query``: seconds of each component and in all, and the logits SHA-256.
    The artifact is read with room for the query and :data:`DECODE_ROOM` decode tokens, as ``eval --graft`` reads
    it with its budget (so the query appends without moving the cache).

    ``read_s`` (file to tensors), ``integrity_s`` (hash), ``parse_s`` (header), ``checks_s`` (the rest of
    :meth:`Store.read`: size, tensor set and shapes), on a GPU ``copy_s`` (the tensors copied to the device),
    ``rebuild_s`` (cache layers set from the artifact), ``query_s`` (query forward plus argmax), ``total_s``; with
    ``meter``, ``energy_j`` (joules of the whole graft and query).
    """
    ops = benchmark_ops(session.engine_name)
    before = meter.read() if meter else None
    read_total, artifact = timed(lambda: store.read(artifact_id, integrity, room=len(query) + DECODE_ROOM))
    timing: dict = {}
    restore_s, cache = timed(lambda: ops.restore(session, artifact, timing=timing))
    query_s, (_, digest) = timed(lambda: ops.first_token(session, cache, query))
    t = artifact.timing
    return {"read_s": t.read_s, "integrity_s": t.integrity_s, "parse_s": t.parse_s,
            "checks_s": read_total - t.read_s - t.integrity_s - t.parse_s, **timing,
            "rebuild_s": restore_s - timing.get("copy_s", 0.0), "query_s": query_s,
            "total_s": read_total + restore_s + query_s, "bytes": t.bytes, "logits": digest,
            **({"energy_j": meter.read() - before} if meter else {})}


def _summaries(runs: list[dict], keys: list[str]) -> dict:
    """The summary of each of ``keys`` that the runs measured (``copy_s`` and ``energy_j`` only on a GPU)."""
    return {key: summary([run[key] for run in runs]) for key in keys if key in runs[0]}


_GRAFT_KEYS = ["read_s", "integrity_s", "parse_s", "checks_s", "copy_s", "rebuild_s", "query_s", "total_s", "energy_j"]


def ttft_meter(session: EngineSession) -> EnergyMeter | None:
    """The energy meter of the TTFT rows: on a CUDA model the meter of its GPU (NVML where ``pynvml`` imports and
    the GPU counts energy, else the method :class:`EnergyMeter` falls back to); ``None`` on the CPU, whose rows
    carry no energy."""
    device = session.device
    return EnergyMeter(device=device) if device.startswith("cuda") else None


def measure_size(session: EngineSession, model: str, store_root: Path, ids: list[int], query: list[int], repeats: int,
                 graft_repeats: int, on_step=lambda: None, memory_probes: bool = True) -> dict:
    """Every TTFT figure for one artifact size (``len(ids)`` tokens): prefill against graft, with a 1-token
    query and with ``query``; the graft with XXH3-128 and with SHA-256 integrity; memory; logits equality.

    ``logits_sha256`` holds, per query, the distinct SHA-256 digests of the last position's logits over every
    prefill repetition and every graft (both integrity checks), so that a row whose ``logits_equal`` is false says
    which side moved; ``logits_equal`` is the equality of the two sets.

    On a GPU the row also holds ``energy`` (how the joules were measured), per query the prefill's
    ``energy_{name}_j`` and each graft's ``energy_j`` (joules per query, the prefill or the graft included).

    ``on_step`` is called after each repetition (for a progress bar). ``memory_probes`` false leaves out the two
    fresh processes that measure a graft's memory (``graft_memory``, ``first_graft_with_kv_pool``): each loads the
    model again, which on a GPU window costs more than the row itself.
    """
    store, meter = Store(store_root), ttft_meter(session)
    queries = {"query_1": query[:1], "query_real": query}
    prefills = []
    for _ in range(repeats):
        prefills.append(prefill_once(session, ids, queries, meter))
        on_step()
    artifact_id = deposit_tokens(session, store, ids)
    grafts = {(name, integrity): [graft_once(session, store, artifact_id, q, integrity, meter)
                                  for _ in range(graft_repeats)]
              for name, q in queries.items() for integrity in ("xxh3_128", "sha256")}
    on_step()
    prefill_fig = {"prefill_s": summary([p["prefill_s"] for p in prefills])}
    for name in queries:
        prefill_fig[f"ttft_{name}_s"] = summary([p["prefill_s"] + p[f"{name}_s"] for p in prefills])
        if meter:
            prefill_fig[f"energy_{name}_j"] = summary([p["prefill_j"] + p[f"{name}_j"] for p in prefills])
    graft_fig = {f"{name}/{integrity}": _summaries(runs, _GRAFT_KEYS) for (name, integrity), runs in grafts.items()}
    ratio = {name: prefill_fig[f"ttft_{name}_s"]["median"] / graft_fig[f"{name}/xxh3_128"]["total_s"]["median"]
             for name in queries}
    digests = {name: {"prefill": sorted({p[f"{name}_logits"] for p in prefills}),
                      "graft": sorted({run["logits"] for (n, _), runs in grafts.items() if n == name for run in runs})}
               for name in queries}
    logits_equal = {name: sides["prefill"] == sides["graft"] for name, sides in digests.items()}
    artifact_bytes = store.path(artifact_id).stat().st_size
    memory = {}
    if memory_probes:
        probe = graft_memory(store_root, artifact_id, model, session.config.dtype, session.config.chunk_size,
                             queries["query_1"])
        pooled = graft_memory(store_root, artifact_id, model, session.config.dtype, session.config.chunk_size,
                              queries["query_1"], pool_tokens=len(ids) + len(queries["query_1"]) + DECODE_ROOM)
        memory = {"graft_memory": probe, "graft_memory_ratio": probe["increase_bytes"] / artifact_bytes,
                  "first_graft_with_kv_pool": pooled}
    return {
        "tokens": len(ids), "query_tokens": {"query_1": 1, "query_real": len(query)},
        "artifact_bytes": artifact_bytes, "artifact_id": artifact_id,
        "prefill": prefill_fig, "graft": graft_fig, "ttft_ratio": ratio, "logits_equal": logits_equal,
        "logits_sha256": digests,
        **memory,
        "file_read": "page cache warm (artifact written by this run)",
        **({"energy": meter.describe()} if meter else {}),
    }
