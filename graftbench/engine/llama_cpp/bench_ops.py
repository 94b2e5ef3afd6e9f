"""The llama.cpp engine's side of the benchmarks (the :data:`graftbench.engine.base.BENCHMARK` capability, reached
through :func:`graftbench.engine.registry.benchmark_ops`): sessions opened with the KV cache variant a row asks for,
the engine's greedy decode loop, the weights' bytes, the build's identity; N samples from one state, batched
(:mod:`graftbench.engine.llama_cpp.fanout`) and one after another, and whether a row's logits depend on the batch's
width (:mod:`graftbench.bench.llama_samples`); and the probe of the portable build's cost
(:mod:`graftbench.bench.portable_cost`), timed on the engine's own prefill, decode step, capture and restore.

``session`` is a :class:`graftbench.engine.llama_cpp.session.LlamaSession`; logits are the numpy row ``[vocab]``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from . import decode
from .engine import KV_TYPES, LlamaState, binding_version, bindings, system_info
from .fanout import Sequences, fan_out, stream_cells
from .session import LlamaSession, open_llama_session

__all__ = ["KV_TYPES", "binding_version", "system_info", "stream_cells", "open_for_benchmark", "open_for_samples",
           "greedy_decode", "weight_bytes", "batched_samples", "sequential_samples", "width_dependence",
           "captured_state", "batched_kv_bytes", "portable_cost_probe"]


def open_for_benchmark(model: str, chunk_size: int, threads: int | None, kv_type: str = "f16",
                       flash_attn: bool = False, n_ctx: int | None = None) -> LlamaSession:
    """A session on the GGUF file ``model`` with the KV cache type ``kv_type`` (one of :data:`KV_TYPES`), flash
    attention on or off and a context of ``n_ctx`` tokens (``None``: the engine's default)."""
    extra = {"n_ctx": n_ctx} if n_ctx is not None else {}
    return open_llama_session(model, chunk_size=chunk_size, threads=threads, kv_type=kv_type, flash_attn=flash_attn,
                              **extra)


def open_for_samples(model: str, chunk_size: int, threads: int, n_ctx: int) -> LlamaSession:
    """A session (f16 KV cache, flash attention off) for N samples from one state, the draw's torch threads set to
    ``threads`` first (as many as llama.cpp's, as a run under ``OMP_NUM_THREADS``)."""
    import torch

    torch.set_num_threads(threads)
    return open_llama_session(model, chunk_size=chunk_size, threads=threads, n_ctx=n_ctx)


def greedy_decode(session: LlamaSession, cache, logits: np.ndarray, tokens: int, eos_ids: set[int]):
    """The engine's greedy decode loop (logits copied out, argmax in numpy) of up to ``tokens`` tokens after
    ``logits``, stopping at ``eos_ids`` (empty: never): a :class:`graftbench.results.samples.Decoded` whose
    ``decode_s`` runs from the first token to the last."""
    return decode.decode(session.engine, session.tokenizer, cache, logits, tokens, eos_ids)


def weight_bytes(session: LlamaSession) -> int:
    """Bytes of the model's weights as llama.cpp holds them (``llama_model_size``)."""
    return int(bindings().llama_model_size(session.engine.model))


def batched_samples(session: LlamaSession, state: LlamaState, last: int, width: int, tokens: int, sampling,
                    seeds: list[int]) -> dict:
    """``width`` samples of ``tokens`` tokens from ``state`` (every token but the query's ``last``) as one batch per
    step: the state fanned out into ``width`` sequences, ``last`` as one batch, then
    :func:`graftbench.engine.llama_cpp.decode.decode_samples` drawing with ``sampling``
    (:class:`graftbench.engine.base.SamplingSettings`; ``None``: greedy, argmax in numpy) and ``seeds``. Returns
    seconds (``decode_s`` from the first token chosen to the last, ``total_s`` from the fan-out) and each sample's
    tokens."""
    started = time.perf_counter()
    sequences = fan_out(session.engine, state, width, 1 + tokens)
    try:
        first = sequences.step({seq: last for seq in range(width)})
        decoded = decode.decode_samples(session.tokenizer, sequences, first, tokens, set(), None, sampling, seeds)
    finally:
        sequences.close()
    ended = time.perf_counter()
    # from the first token chosen to the last (decode_s and first_token_s count from the same start)
    decode_s = max(d.decode_s for d in decoded) - max(d.first_token_s for d in decoded)
    return {"decode_s": decode_s, "total_s": ended - started, "tokens": [d.token_ids for d in decoded]}


def sequential_samples(session: LlamaSession, state: LlamaState, last: int, width: int, tokens: int, sampling,
                       seeds: list[int]) -> dict:
    """The first ``width`` of ``seeds``, one sample after another: per sample ``state`` restored into its own
    context, ``last``, then its own decode loop drawing with ``sampling``. Seconds summed over the samples
    (``decode_s`` from each first token chosen to its last, ``total_s`` from the first restore) and each sample's
    tokens."""
    engine, decode_s, out = session.engine, 0.0, []
    started = time.perf_counter()
    for seed in seeds[:width]:
        cache = engine.restore(state)
        try:
            logits = engine.prefill(cache, [last], 1)
            decoded = decode.decode(engine, session.tokenizer, cache, logits, tokens, set(), None, settings=sampling,
                                    seed=seed)
        finally:
            cache.close()
        decode_s += decoded.decode_s - decoded.first_token_s  # from its first token chosen to its last
        out.append(decoded.token_ids)
    return {"decode_s": decode_s, "total_s": time.perf_counter() - started, "tokens": out}


def width_dependence(session: LlamaSession, state: LlamaState, steps: int, width: int) -> dict:
    """Whether a sequence's logits depend on how many others share its batch: ``width`` sequences from ``state``
    fed their own tokens for ``steps`` steps, each row against the same sequence decoded alone in the engine's own
    context, for the non-unified cache and the unified one. Returns per cache kind ``rows_equal`` (every row
    byte-equal) and the largest absolute difference."""
    engine, ids = session.engine, state.token_ids
    feeds = [[ids[(7 * step + 13 * seq) % len(ids)] for seq in range(width)] for step in range(steps)]
    alone = []
    for seq in range(width):
        cache = engine.restore(state)
        try:
            alone.append([engine.decode_step(cache, feed[seq]) for feed in feeds])
        finally:
            cache.close()
    found = {}
    for unified in (False, True):
        sequences = fan_out(engine, state, width, steps, unified=unified)
        try:  # every sequence in one llama_decode per step: the width itself is what is measured
            rows = [sequences.step(dict(enumerate(feed)), width=width) for feed in feeds]
        finally:
            sequences.close()
        gaps = [float(np.abs(rows[step][seq] - alone[seq][step]).max()) for step in range(steps)
                for seq in range(width)]
        found["unified" if unified else "non_unified"] = {"rows_equal": max(gaps) == 0.0,
                                                          "max_abs_diff": max(gaps)}
    return {"width": width, "steps": steps, **found}


def captured_state(session: LlamaSession, ids: list[int], keep: Path | None) -> LlamaState:
    """The state after prefilling ``ids``: read from the folder ``keep`` when a run under this pin left it there
    (its id, payload and pin checked), else prefilled (and left there, as an artifact of the session's pin named
    by its token ids and the pin, when ``keep`` is given)."""
    from ...store.ids import artifact_id_of
    from ...util.hashing import sha256_json
    from .codec import decode_llama_artifact, encode_llama_artifact
    from .exactness import deposit_state

    path = None if keep is None else Path(keep) / f"{sha256_json([session.config.fingerprint, ids])}.state"
    if path is not None and path.is_file():
        data = path.read_bytes()
        return decode_llama_artifact(artifact_id_of(data), data, session.config)
    state = deposit_state(session, ids)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_llama_artifact(session.config, state))
    return state


def batched_kv_bytes(session: LlamaSession, state: LlamaState, width: int, tokens: int) -> tuple[int, int]:
    """Bytes of keys and values ``width`` sequences holding ``state`` take in one context whose streams hold
    ``tokens`` tokens each, and the cells of one stream."""
    probe = Sequences(session.engine, width, stream_cells(tokens))
    try:
        return probe.kv_bytes(state), probe.cells
    finally:
        probe.close()


def portable_cost_probe(model: str, decode_tokens: int, threads: int,
                        prompt_ids: Callable[[LlamaSession], list[int]]) -> dict:
    """One probe of :mod:`graftbench.bench.portable_cost` under the build this process loaded
    (``GRAFTBENCH_LLAMA_BUILD``): ``model`` with chunk 256 on ``threads`` threads (KV f16, flash attention off),
    ``prompt_ids(session)`` prefilled (tokens/s), ``decode_tokens`` greedy steps after it (tokens/s), and the
    prefilled state captured, restored into a fresh cache and one token decoded after it (``graft_plus_one_s``)."""
    session = open_llama_session(model, chunk_size=256, threads=threads)
    engine, ids = session.engine, prompt_ids(session)
    cache = engine.new_cache()
    started = time.perf_counter()
    logits = engine.prefill(cache, ids)
    prefill_s = time.perf_counter() - started
    state = engine.capture(cache)
    started = time.perf_counter()
    for _ in range(decode_tokens):
        logits = engine.decode_step(cache, int(np.argmax(logits)))
    decode_s = time.perf_counter() - started
    cache.close()
    started = time.perf_counter()
    grafted = engine.restore(state)
    engine.decode_step(grafted, int(ids[-1]))
    graft_s = time.perf_counter() - started
    grafted.close()
    return {"pin": session.config.isa, "cpu_capability": session.config.cpu_capability, "prompt_tokens": len(ids),
            "prefill_tok_per_s": len(ids) / prefill_s, "decode_tok_per_s": decode_tokens / decode_s,
            "graft_plus_one_s": graft_s}
