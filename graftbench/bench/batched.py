"""Batched samples: after one restore of a grafted artifact, N samples decoded as one batch
(the engine's sampled decode: :func:`graftbench.engine.torch.sampling.sample_decode` on torch) against the same N samples decoded one at a time, each after its own
restore, side by side in one process.

Every row runs the full token budget (no EOS, no stop string), so both sides decode exactly ``samples × tokens``
tokens; sample i draws with the same seed on both sides (:func:`graftbench.util.seeds.sample_seed` of the run seed,
the query problem and i). Repetitions alternate which side runs first.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..engine.base import EngineSession, SamplingSettings
from ..engine.registry import benchmark_ops
from ..util.seeds import sample_seed
from ..store.folder import Store
from ..settings import GOAL_DECODE_RATIO, BatchedSettings
from .stats import PeakRSS, summary
from .ttft import deposit_tokens


def _graft(session: EngineSession, ops, store: Store, artifact_id: str, query: list[int]):
    """Read and restore the artifact, prefill the query after it (``ops``: the engine's benchmark operations):
    (cache, the query's last logits)."""
    cache = ops.restore(session, store.read(artifact_id))
    return cache, ops.prefill(session, cache, query)


def _side(session: EngineSession, store: Store, artifact_id: str, query: list[int], settings: BatchedSettings,
          seeds: list[int], batched: bool) -> dict:
    """One repetition of one side: seconds from the first restore to the last token, decode seconds (summed over
    the samples one at a time), peak resident memory, the most KV bytes one cache held, and each sample's tokens."""
    sampling = SamplingSettings(settings.temperature, settings.top_p, settings.seed)
    ops = benchmark_ops(session.engine_name)
    with PeakRSS() as peak:
        started = time.perf_counter()
        runs = [seeds] if batched else [[seed] for seed in seeds]
        decoded, decode_s, graft_s, kv_bytes = [], 0.0, 0.0, 0
        for run_seeds in runs:
            graft_start = time.perf_counter()
            cache, logits = _graft(session, ops, store, artifact_id, query)
            graft_s += time.perf_counter() - graft_start
            out = ops.sampled_decode(session, cache, logits, settings.tokens, sampling, run_seeds)
            decode_s += out[0].decode_s
            decoded += out
            kv_bytes = max(kv_bytes, ops.cache_kv_bytes(cache))
        total_s = time.perf_counter() - started
    return {"total_s": total_s, "decode_s": decode_s, "graft_s": graft_s, "peak_rss_bytes": peak.start + peak.increase,
            "peak_rss_increase_bytes": peak.increase, "kv_bytes": kv_bytes, "tokens": [d.token_ids for d in decoded]}


def measure_batched(session: EngineSession, store_root: Path, context: list[int], query: list[int], query_problem: str,
                    settings: BatchedSettings, on_step=lambda: None) -> dict:
    """Deposit ``context[:settings.artifact_tokens]`` (untimed), then ``settings.repeats`` times each: the samples
    as one batch after one restore, and one at a time, each after its own restore.

    Decode tokens/s = samples × (tokens − 1) / decode seconds (each sample's first token is drawn from the query's
    logits; decode seconds run from the first draw to the last token, and include repeating the cache to one row
    per sample). End-to-end tokens/s = samples × tokens / seconds from the first restore to the last token.
    ``on_step`` is called after each repetition of each side. Raises ``ValueError`` when ``context`` is shorter than
    the artifact.
    """
    if len(context) < settings.artifact_tokens:
        raise ValueError(f"the problems' text holds {len(context)} tokens, fewer than the "
                         f"{settings.artifact_tokens} of the batched-samples artifact")
    store = Store(store_root)
    artifact_id = deposit_tokens(session, store, context[:settings.artifact_tokens])
    seeds = [sample_seed(settings.seed, query_problem, i) for i in range(settings.samples)]
    warm = BatchedSettings(samples=settings.samples, tokens=2, artifact_tokens=settings.artifact_tokens, repeats=1)
    for batched in (True, False):  # untimed: each side's shapes once (first-call costs of new matmul shapes)
        _side(session, store, artifact_id, query, warm, seeds if batched else seeds[:1], batched)
    sides: dict[str, list[dict]] = {"batched": [], "one_at_a_time": []}
    load_before = os.getloadavg()[0]
    for repeat in range(settings.repeats):
        order = ("batched", "one_at_a_time") if repeat % 2 == 0 else ("one_at_a_time", "batched")
        for name in order:
            sides[name].append(_side(session, store, artifact_id, query, settings, seeds, name == "batched"))
            on_step()
    load_after = os.getloadavg()[0]
    n, t = settings.samples, settings.tokens
    figures = {}
    for name, runs in sides.items():
        figures[name] = {
            "decode_tok_per_s": summary([n * (t - 1) / r["decode_s"] for r in runs]) if t > 1 else None,
            "end_to_end_tok_per_s": summary([n * t / r["total_s"] for r in runs]),
            "decode_s": summary([r["decode_s"] for r in runs]), "total_s": summary([r["total_s"] for r in runs]),
            "graft_s": summary([r["graft_s"] for r in runs]), "restores": 1 if name == "batched" else n,
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in runs),
            "peak_rss_increase_bytes": max(r["peak_rss_increase_bytes"] for r in runs),
            "kv_bytes_at_end": max(r["kv_bytes"] for r in runs),
            "tokens_per_sample": sorted({len(tokens) for r in runs for tokens in r["tokens"]}),
        }
    b, s = figures["batched"], figures["one_at_a_time"]
    batched_tokens, single_tokens = sides["batched"][0]["tokens"], sides["one_at_a_time"][0]["tokens"]
    artifact_bytes = store.path(artifact_id).stat().st_size
    return {
        "settings": settings.to_dict(), "artifact_tokens": settings.artifact_tokens, "artifact_bytes": artifact_bytes,
        "artifact_id": artifact_id, "query_tokens": len(query), "query_problem": query_problem, "seeds": seeds,
        "batched": b, "one_at_a_time": s, "goal_decode_ratio": GOAL_DECODE_RATIO,
        "decode_ratio": (b["decode_tok_per_s"]["median"] / s["decode_tok_per_s"]["median"]) if t > 1 else None,
        "end_to_end_ratio": b["end_to_end_tok_per_s"]["median"] / s["end_to_end_tok_per_s"]["median"],
        "same_tokens_as_one_at_a_time": sum(x == y for x, y in zip(batched_tokens, single_tokens)),
        "distinct_samples": len({tuple(x) for x in batched_tokens}),
        "load_average_1min": {"before": load_before, "after": load_after, "cpus": os.cpu_count()},
        "repeatable": all(r["tokens"] == runs[0]["tokens"] for runs in sides.values() for r in runs),
        "method": (f"{n} samples × {t} tokens, EOS and stop strings ignored (eos_ids=set()), temperature "
                   f"{settings.temperature}, top-p {settings.top_p}, seeds sample_seed("
                   f"{settings.seed}, query problem, i); batched: one read + restore + query prefill, then "
                   "sample_decode with all seeds; one at a time: per seed its own read + restore + query prefill and "
                   "sample_decode with that seed; decode tok/s = samples × (tokens − 1) / decode seconds (summed "
                   "over samples one at a time); end to end = samples × tokens / seconds from the first restore to "
                   "the last token; KV bytes = keys and values the cache holds after the last token (every row); "
                   "peak RSS = the process's VmHWM during a side (reset at its start) and its increase over the "
                   "resident set then (small where the process reuses memory it kept from earlier work); "
                   "repetitions alternate which side runs first"),
    }


def target(row: dict) -> dict:
    """The batched-samples target: batched decode tokens/s at least ``goal_decode_ratio`` times one at a time."""
    ratio, goal = row["decode_ratio"], row["goal_decode_ratio"]
    return {"target": f">= {goal:g}x ({row['settings']['samples']} samples, {row['settings']['tokens']} tokens, "
                      f"{row['artifact_tokens']:,}-token artifact)",
            "measured": ratio, "met": None if ratio is None else ratio >= goal}
