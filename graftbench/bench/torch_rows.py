"""The torch engine's rows beside the llama.cpp engine's (:mod:`.llama_overhead`), on the same model's GGUF file
de-quantized: greedy decode after a short prompt, graft + 1-token query against a chunked prefill + the same token
at each size, and decode after the largest size's graft against an empty cache. Times in seconds, rates in tokens
per second; the same token streams as the llama.cpp rows."""

from __future__ import annotations

from pathlib import Path

from ..engine.base import EngineSession
from ..engine.registry import benchmark_ops
from ..store.folder import Store
from .decode import _decode_tok_per_s, measure_decode_after_graft
from .stats import summary
from .ttft import deposit_tokens, graft_once, prefill_once


def decode_row(session: EngineSession, prompt: list[int], tokens: int, repeats: int) -> dict:
    """Greedy decode tokens per second after ``prompt`` in an empty cache, no EOS stop: ``(tokens - 1) /
    seconds``, median of ``repeats``."""
    ops = benchmark_ops(session.engine_name)
    rates = [_decode_tok_per_s(session, ops.new_cache(session), prompt, tokens) for _ in range(repeats)]
    return {"prompt_tokens": len(prompt), "decode_tokens": tokens, "tok_per_s": summary(rates)}


def state_row(session: EngineSession, folder: Path, ids: list[int], token: int, repeats: int) -> dict:
    """At ``len(ids)`` tokens: graft (XXH3-128) + 1-token query, median of ``repeats``, against one chunked
    prefill of ``ids`` + the token (``ttft_ratio``: prefill over graft); ``logits_equal`` across both."""
    store = Store(folder / "store")
    artifact_id = deposit_tokens(session, store, ids)
    grafts = [graft_once(session, store, artifact_id, [token], "xxh3_128") for _ in range(repeats)]
    prefill = prefill_once(session, ids, {"query_1": [token]})
    graft_s = summary([g["total_s"] for g in grafts])
    prefill_s = prefill["prefill_s"] + prefill["query_1_s"]
    return {"tokens": len(ids), "graft_1tok_s": graft_s, "prefill_1tok_s": prefill_s,
            "ttft_ratio": prefill_s / graft_s["median"],
            "logits_equal": {g["logits"] for g in grafts} == {prefill["query_1_logits"]}}


def decode_after_graft_row(session: EngineSession, folder: Path, ids: list[int], prompt: list[int], tokens: int,
                           repeats: int) -> dict:
    """:func:`graftbench.bench.decode.measure_decode_after_graft` after a graft of ``ids``, the query the last
    prompt token."""
    store = Store(folder / "store-decode")
    artifact_id = deposit_tokens(session, store, ids)
    return measure_decode_after_graft(session, store, artifact_id, len(ids), prompt[-1:], tokens, repeats)
