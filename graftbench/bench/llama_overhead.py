"""graftbench's llama.cpp engine against raw llama.cpp (:mod:`.llama_raw`) on the same GGUF file, side by side in one
process: the same build, the same weights in memory, contexts with the same parameters, each pair of measurements
taken back to back with the order swapped every repetition. Both sides are llama.cpp: the rows measure what
graftbench adds on top of it (its decode loop, its store, integrity check and pin), not two inference engines.

Rows, for one model (times in seconds, rates in tokens per second, sizes in tokens and bytes):

- ``load``: graftbench's session (the GGUF loaded, graftbench's tokenizer, the file's SHA-256 for the pin) against
  ``llama_model_load_from_file`` alone;
- ``prefill``: a chunked prefill of ``prefill_tokens`` into a fresh context, both sides;
- ``decode``: greedy decode after a short prompt, graftbench's loop (logits copied out, argmax in numpy) against
  llama.cpp's greedy sampler;
- ``state`` per size: graftbench's graft (store read into the session's buffer, XXH3-128, pin check,
  ``llama_state_seq_set_data`` into its closed context, cleared) + a 1-token query against llama.cpp's
  ``llama_state_seq_load_file`` into a kept context, cleared, + the same token (both sides clear an existing
  context: the ratio is graftbench's store, integrity check and pin on top of llama.cpp's load), and the graft's
  TTFT against a chunked prefill of the same tokens + that token in a fresh context;
- ``decode_after_graft`` per KV cache variant (f16 with flash attention off and on, quantized types with it on):
  greedy decode after a graft of the largest size, against llama.cpp's own decode after its state load of the same
  state and against an empty cache, and the bound the bytes allow (below).

The decode bound: a decode step reads every weight and, after a graft of n tokens, the n cached keys and values, so
at best it runs at the empty-cache rate × W / (W + C), with W the weights' bytes (``llama_model_size``) and C the
cache's bytes at n tokens (the sequence state's size, ``llama_state_seq_get_size``). The model is the roofline
argument (Williams, Waterman and Patterson, "Roofline", CACM 52(4), 2009) for a memory-bound decode step.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..engine.base import EngineSession
from ..engine.registry import benchmark_ops
from ..store.folder import Store
from .llama_raw import ENGINE, RawLlama, load_model_alone_s
from .stats import summary, timed

PROMPT_TOKENS = 16  # the short prompt an empty-cache decode starts from


@dataclass(frozen=True)
class LlamaBenchSettings:
    """What the llama.cpp rows measure: ``sizes`` (tokens per state), ``prefill_tokens``, ``decode_tokens`` per
    decode, ``repeats`` per side and row."""

    sizes: tuple[int, ...] = (4096, 8192)
    prefill_tokens: int = 512
    decode_tokens: int = 64
    repeats: int = 3


def result_name(label: str, threads: int) -> str:
    """The results files' name (without suffix) for the model ``label`` at ``threads`` threads: one thread, the
    reference count, is unnamed; another count is named, so runs at two counts sit side by side."""
    return f"llama-engine-{label}" + ("" if threads == 1 else f"-threads-{threads}")


def alternate(repeats: int, ours, theirs) -> tuple[list, list]:
    """``repeats`` results of each side, taken back to back: ``ours`` first in even repetitions, ``theirs`` first in
    odd ones."""
    a, b = [], []
    for i in range(repeats):
        for side in ((ours, theirs) if i % 2 == 0 else (theirs, ours)):
            (a if side is ours else b).append(side())
    return a, b


def rotate(repeats: int, *sides) -> tuple[list, ...]:
    """``repeats`` results of each side, all sides back to back in each repetition, the first side rotating (side
    ``i % len(sides)`` first in repetition ``i``)."""
    results = [[] for _ in sides]
    for i in range(repeats):
        for k in range(len(sides)):
            j = (i + k) % len(sides)
            results[j].append(sides[j]())
    return tuple(results)


def _ratio(numerator: dict, denominator: dict) -> float:
    return numerator["median"] / denominator["median"]


def prefill_row(session: EngineSession, raw: RawLlama, ids: list[int], repeats: int) -> dict:
    """Tokens per second of a chunked prefill of ``ids`` into a fresh context (context creation untimed)."""
    def ours():
        cache = session.engine.new_cache()
        try:
            return len(ids) / timed(lambda: session.engine.prefill(cache, ids))[0]
        finally:
            cache.close()

    def theirs():
        cache = raw.context()
        try:
            return len(ids) / timed(lambda: raw.prefill(cache, ids))[0]
        finally:
            cache.close()

    a, b = alternate(repeats, ours, theirs)
    return {"tokens": len(ids), "graftbench_tok_per_s": summary(a), "llama_cpp_tok_per_s": summary(b),
            "ratio": _ratio(summary(a), summary(b))}


def _our_decode(session: EngineSession, prompt: list[int], tokens: int) -> tuple[float, list[int]]:
    ops = benchmark_ops(session.engine_name)
    cache = session.engine.new_cache()
    try:
        logits = session.engine.prefill(cache, prompt)
        done = ops.greedy_decode(session, cache, logits, tokens, set())
        return (len(done.token_ids) - 1) / done.decode_s, done.token_ids
    finally:
        cache.close()


def _raw_decode(raw: RawLlama, prompt: list[int], tokens: int) -> tuple[float, list[int]]:
    cache = raw.context()
    try:
        raw.prefill(cache, prompt)
        chosen = raw.greedy(cache, 1)
        started = time.perf_counter()
        chosen += raw.greedy(cache, tokens - 1)
        return (tokens - 1) / (time.perf_counter() - started), chosen
    finally:
        cache.close()


def decode_row(session: EngineSession, raw: RawLlama, prompt: list[int], tokens: int, repeats: int) -> dict:
    """Greedy decode tokens per second after ``prompt``: ``(tokens - 1) / seconds`` from the first token chosen to
    the last (one ``llama_decode`` per token after the first), no EOS stop; ``same_tokens`` compares the two
    sides' greedy tokens."""
    a, b = alternate(repeats, lambda: _our_decode(session, prompt, tokens), lambda: _raw_decode(raw, prompt, tokens))
    ours, theirs = summary([r for r, _ in a]), summary([r for r, _ in b])
    return {"prompt_tokens": len(prompt), "decode_tokens": tokens, "graftbench_tok_per_s": ours,
            "llama_cpp_tok_per_s": theirs, "ratio": _ratio(ours, theirs), "same_tokens": a[0][1] == b[0][1]}


def _graft_and_query(session: EngineSession, store: Store, artifact_id: str, token: int) -> dict:
    timing: dict = {}
    started = time.perf_counter()
    grafted = session.graft(store, artifact_id, room=1, timing=timing)
    try:
        restored = time.perf_counter()
        logits = session.prefill_after(grafted.cache, [token])
        done = time.perf_counter()
    finally:
        grafted.cache.close()
    return {**timing, "restore_s": restored - started, "query_s": done - restored, "total_s": done - started,
            "logits": session.logits_sha256(logits)}


def _prefill_and_query(session: EngineSession, ids: list[int], token: int) -> dict:
    cache = session.engine.new_cache()
    try:
        seconds, logits = timed(lambda: session.engine.prefill(cache, [*ids, token]))
    finally:
        cache.close()
    return {"ttft_s": seconds, "logits": session.logits_sha256(logits)}


def deposit_and_save(session: EngineSession, raw: RawLlama, folder: Path, ids: list[int]) -> tuple[Store, str, Path]:
    """``ids`` deposited by graftbench into a store in ``folder`` and, independently, prefilled by llama.cpp
    (:meth:`RawLlama.prefill`) and saved to a state file there (``llama_state_seq_save_file``): two prefills,
    untimed. Returns ``(store, artifact id, state file)``."""
    store = Store(folder / "store")
    artifact_id = store.put(session.build_artifact(ids, {"source": "bench"}))
    state_file = folder / f"state-{len(ids)}.bin"
    cache = raw.context()
    try:
        raw.prefill(cache, ids)
        raw.save_state(cache, state_file)
    finally:
        cache.close()
    return store, artifact_id, state_file


def state_row(session: EngineSession, raw: RawLlama, deposited: tuple[Store, str, Path], ids: list[int], token: int,
              repeats: int, prefill_repeats: int = 1) -> dict:
    """At ``len(ids)`` tokens, deposited (:func:`deposit_and_save`): graft + 1-token query against llama.cpp's
    state load + the same token (``ratio``: graftbench over llama.cpp, ≤ 1.1 is the target), and the graft's time
    to first token against a chunked prefill of ``ids`` and the token (``ttft_ratio``: prefill over graft); the page
    cache is warm for both. Both start from a used context whose memory is cleared with its data (zeroed):
    graftbench's graft zeroes it on a second thread while it reads the file (``graft_parts``' ``clear_s`` overlaps
    ``read_s``), llama.cpp's load reads and restores in one call, after its clear (``llama_cpp_clear_s``, inside
    ``llama_cpp_load_s``). ``logits_equal``: the query's logits after the graft, the state load and the prefill
    are the same bytes."""
    store, artifact_id, state_file = deposited
    ours, theirs = alternate(repeats, lambda: _graft_and_query(session, store, artifact_id, token),
                             lambda: raw.load_state_and_query(state_file, len(ids), token))
    prefills = [_prefill_and_query(session, ids, token) for _ in range(prefill_repeats)]
    graft_s, load_s = summary([r["total_s"] for r in ours]), summary([t["total_s"] for t in theirs])
    prefill_s = summary([p["ttft_s"] for p in prefills])
    digests = {r["logits"] for r in ours} | {session.logits_sha256(t["logits"]) for t in theirs} | \
        {p["logits"] for p in prefills}
    parts = {k: summary([r[k] for r in ours]) for k in ("read_s", "integrity_s", "parse_s", "checks_s",
                                                          "clear_s", "rebuild_s", "query_s")}
    return {"tokens": len(ids), "artifact_bytes": store.path(artifact_id).stat().st_size,
            "state_file_bytes": state_file.stat().st_size, "graft_1tok_s": graft_s, "graft_parts": parts,
            "llama_cpp_load_1tok_s": load_s,
            "llama_cpp_load_s": summary([t["load_s"] for t in theirs]),
            "llama_cpp_clear_s": summary([t["clear_s"] for t in theirs]), "ratio": _ratio(graft_s, load_s),
            "prefill_1tok_s": prefill_s, "ttft_ratio": _ratio(prefill_s, graft_s), "logits_equal": len(digests) == 1}


def _decode_after(session: EngineSession, store: Store, artifact_id: str, token: int, tokens: int) -> float:
    ops = benchmark_ops(session.engine_name)
    grafted = session.graft(store, artifact_id, room=1 + tokens)
    try:
        logits = session.prefill_after(grafted.cache, [token])
        done = ops.greedy_decode(session, grafted.cache, logits, tokens, set())
        return (len(done.token_ids) - 1) / done.decode_s
    finally:
        grafted.cache.close()


def deposit_state(session: EngineSession, raw: RawLlama, folder: Path, ids: list[int]) -> tuple[Store, str, Path]:
    """``ids`` deposited into a store in ``folder`` (one prefill) and the same state written by llama.cpp's
    ``llama_state_seq_save_file`` from a graft of it (a graft is the prefill's state, certified byte-exact), for
    llama.cpp's side of :func:`decode_after_graft_row`. Returns ``(store, artifact id, state file)``."""
    store = Store(folder / "store")
    artifact_id = store.put(session.build_artifact(ids, {"source": "bench"}))
    grafted = session.graft(store, artifact_id)
    try:
        state_file = folder / f"state-{len(ids)}.bin"
        raw.save_state(grafted.cache, state_file)
    finally:
        grafted.cache.close()
    return store, artifact_id, state_file


def decode_after_graft_row(session: EngineSession, raw: RawLlama, deposited: tuple[Store, str, Path], prompt: list[int],
                           token: int, tokens: int, repeats: int) -> dict:
    """Greedy decode tokens per second after a graft of the deposited state (``deposited``: store, artifact id and
    llama.cpp's own state file of it, :func:`deposit_state`), three sides in turn, the first rotating each
    repetition: graftbench after its graft, llama.cpp after its state load (``ratio_to_llama_cpp``: what graftbench
    adds after a graft) and graftbench on an empty cache (after ``prompt``); with the bound the bytes allow:
    empty-cache rate × W / (W + C) (module docstring). ``of_bound``: the measured rate over the bound (≥ 0.9 is the
    target); ``llama_cpp_of_bound`` the same for llama.cpp's own decode after its load."""
    store, artifact_id, state_file = deposited
    _, ids, state = store.read_state(artifact_id)
    n, cache_bytes = len(ids), len(state)
    weight_bytes = benchmark_ops(session.engine_name).weight_bytes(session)
    after, raw_after, empty = rotate(repeats, lambda: _decode_after(session, store, artifact_id, token, tokens),
                                     lambda: raw.load_state_and_decode(state_file, n, token, tokens)[0],
                                     lambda: _our_decode(session, prompt, tokens)[0])
    after_s, raw_s, empty_s = summary(after), summary(raw_after), summary(empty)
    bound = empty_s["median"] * weight_bytes / (weight_bytes + cache_bytes)
    return {"kv_type": session.engine.kv_type, "flash_attn": session.engine.flash_attn, "context_tokens": n,
            "decode_tokens": tokens, "weight_bytes": weight_bytes, "cache_bytes": cache_bytes,
            "after_graft_tok_per_s": after_s, "llama_cpp_after_load_tok_per_s": raw_s,
            "empty_cache_tok_per_s": empty_s, "ratio": _ratio(after_s, empty_s),
            "ratio_to_llama_cpp": _ratio(after_s, raw_s), "bound_tok_per_s": bound,
            "of_bound": after_s["median"] / bound, "llama_cpp_of_bound": raw_s["median"] / bound,
            "bound": "empty-cache tok/s × weight bytes / (weight bytes + cache bytes): each decode step reads every "
                     "weight and every cached key and value once"}


def load_row(model: str, engine_threads: int, chunk: int, n_ctx: int) -> dict:
    """Seconds to load ``model``: a graftbench llama.cpp session against ``llama_model_load_from_file`` alone, one
    each, graftbench second (the page cache warm for both)."""
    ops = benchmark_ops(ENGINE, "bench-llama")
    seconds, session = timed(lambda: ops.open_for_benchmark(model, chunk_size=chunk, threads=engine_threads,
                                                            n_ctx=n_ctx))
    raw_s = load_model_alone_s(session.engine.gguf_path)
    session.engine.close()
    return {"graftbench_s": seconds, "llama_cpp_s": raw_s,
            "graftbench_includes": "GGUF load, graftbench's tokenizer, the GGUF file's SHA-256 (first time)"}


def _workload_ids(session: EngineSession, problems, tokens: int) -> list[int]:
    from .workload import corpus_ids

    ids = corpus_ids(session, problems)
    while len(ids) < tokens:
        ids = ids + ids
    return ids[:tokens]


def variant_name(session: EngineSession) -> str:
    """The KV cache variant a session runs: its cache type, ``+fa`` for an f16 cache with flash attention on (a
    quantized cache always has it on)."""
    engine = session.engine
    return engine.kv_type + ("+fa" if engine.kv_type == "f16" and engine.flash_attn else "")


def run_llama_rows(session: EngineSession, problems, settings: LlamaBenchSettings, others: list[EngineSession] = (),
                   on_step=lambda name: None) -> dict:
    """Every llama.cpp row for ``session`` (f16 KV cache, flash attention off) and, for decode after a graft, for
    each of ``others`` (other KV cache variants, :func:`variant_name`): prefill, decode, state at each size, decode
    after the largest size's graft for each variant. On a
    sliding-window model whose window is shorter than the largest size, the state and decode-after-graft rows are
    left out and ``skipped`` says why."""
    raw = RawLlama(session.engine)
    corpus = _workload_ids(session, problems, max(settings.sizes) + settings.prefill_tokens)
    prompt = corpus[:PROMPT_TOKENS]
    rows = {"prefill": prefill_row(session, raw, corpus[:settings.prefill_tokens], settings.repeats)}
    on_step("prefill")
    rows["decode"] = decode_row(session, raw, prompt, settings.decode_tokens, settings.repeats)
    on_step("decode")
    token = corpus[max(settings.sizes)]
    window = session.engine.n_swa
    if window and max(settings.sizes) > window:  # a graft past the window is refused (docs/llama-cpp.md)
        rows["skipped"] = (f"state and decode-after-graft rows: the model's {window}-token sliding window is shorter "
                           f"than {max(settings.sizes)} tokens, and a graft past it is refused on llama.cpp")
        raw.close()
        return rows
    with tempfile.TemporaryDirectory(prefix="graftbench-llama-bench-") as tmp:
        rows["state"], deposits = [], {}
        for size in settings.sizes:
            deposits[size] = deposit_and_save(session, raw, Path(tmp) / str(size), corpus[:size])
            rows["state"].append(state_row(session, raw, deposits[size], corpus[:size], token, settings.repeats))
            on_step(f"state {size}")
        rows["decode_after_graft"] = []
        largest = corpus[:max(settings.sizes)]
        for which in [session, *others]:
            other_raw = raw if which is session else RawLlama(which.engine)
            deposited = deposits[len(largest)] if which is session else \
                deposit_state(which, other_raw, Path(tmp) / variant_name(which), largest)  # one more prefill
            rows["decode_after_graft"].append(decode_after_graft_row(
                which, other_raw, deposited, prompt, token, settings.decode_tokens, settings.repeats))
            if other_raw is not raw:
                other_raw.close()
            on_step(f"decode after graft {variant_name(which)}")
    raw.close()
    return rows
