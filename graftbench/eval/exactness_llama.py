"""``check-exact --engine llama.cpp``: the graft on the llama.cpp engine against a fresh prefill, with controls.

The pairs are check-exact's own (:func:`graftbench.eval.exactness.build_pairs`: real text, graftbench's tokenizer, the
same ids as the torch engine's pairs). Per pair:

- deposit: the artifact's ids prefilled in a fresh context in the pinned chunk schedule, its sequence state
  captured (``llama_state_seq_get_data``);
- graft: that state restored into another fresh context, then the query prefilled (every position an output);
- fresh: a fresh context, the artifact then the query prefilled with the same batch boundaries.

The certificate is SHA-256 equality of the query's float32 logits (every query position). Negative controls, each
against the fresh prefill unless said otherwise; those of :func:`must_differ` are claimed to differ (measured to on
``smollm2-135m``, docs/llama-cpp.md), the others are reported as measured:

- ``chunk-N``: the fresh prefill with another batch size (``n_batch`` = ``n_ubatch`` = N); with flash attention off
  llama.cpp's CPU kernels gave the same bytes for every batch size measured, so it is reported as measured;
- ``monolithic``: artifact and query in one batch (``n_batch`` = ``n_ubatch`` = their length); reported as measured;
- ``flash-attn-on`` / ``flash-attn-off`` (an f16 cache): the fresh prefill with flash attention switched;
- ``kv-q8_0`` (an f16 cache; with flash attention, which a quantized cache needs) / ``kv-f16`` (a quantized cache):
  the fresh prefill with another KV cache type;
- ``threads-N-decode`` (an f16 cache with flash attention): one decode step after the artifact and the query (the
  query's greedy next token, a one-token batch) at N threads against the same at the pin's threads: flash
  attention's one-token path splits the cache across threads from 512 cells on;
- ``shift-k``: the restored state moved k positions on (llama.cpp re-rotates the keys), against a fresh prefill
  at positions k.., which RoPE's rounding makes differ;
- ``key-bit-flip`` (the sensitivity control): the graft of the deposited state with one bit of one key flipped in
  its bytes (:data:`KEY_BIT_FLIP`, :func:`graftbench.engine.llama_cpp.state_layout.flip_key_bit`).

The manifest is an exactness manifest (:mod:`graftbench.results.exact_manifest`) whose pin carries the engine's fields, so
``verify-manifest`` checks it as any other and its fingerprint is never a torch pin's.
"""

from __future__ import annotations

import numpy as np
import torch

from ..engine.llama_cpp.engine import ContextVariant, LlamaCppEngine, LlamaState
from ..engine.llama_cpp.session import LlamaSession
from ..engine.llama_cpp.state_layout import flip_key_bit
from .exactness import (PAIR_LAYOUT, SHIFTS, Pair, PairLayout, Replay, build_pairs, compare, measure_pairs,
                         summarize)
from ..problems.types import Problem
from ..util.hashing import sha256_bytes


def fresh_logits(ls: LlamaSession, artifact: list[int], query: list[int], chunk_size: int | None = None,
                 shift: int = 0, variant: ContextVariant | None = None) -> np.ndarray:
    """The query's logits ``[len(query), vocab]`` after the artifact, both prefilled in one fresh context with
    batches of ``chunk_size`` tokens (default: the pin's), at positions starting at ``shift``; ``variant``: a
    context that differs from the pin (:class:`graftbench.engine.llama_cpp.engine.ContextVariant`, the controls only)."""
    engine = ls.engine
    cache = engine.new_cache(chunk_size, variant)
    try:
        cache.shift = shift
        engine.prefill(cache, artifact)
        return engine.prefill(cache, query, all_logits=True)
    finally:
        cache.close()


def deposit_state(ls: LlamaSession, artifact: list[int]) -> LlamaState:
    """The sequence state after prefilling ``artifact`` in a fresh context (the pinned chunk schedule)."""
    cache = ls.engine.new_cache()
    try:
        ls.engine.prefill(cache, artifact)
        return ls.engine.capture(cache)
    finally:
        cache.close()


def graft_logits(ls: LlamaSession, state: LlamaState, query: list[int], shift: int = 0) -> np.ndarray:
    """The query's logits after ``state`` restored into a fresh context (moved ``shift`` positions on when
    non-zero)."""
    cache = ls.engine.restore(state)
    try:
        if shift:
            ls.engine.shift_positions(cache, shift)
        return ls.engine.prefill(cache, query, all_logits=True)
    finally:
        cache.close()


def monolithic_logits(ls: LlamaSession, artifact: list[int], query: list[int]) -> np.ndarray:
    """The query's logits ``[len(query), vocab]`` with the artifact and the query prefilled in one batch of a fresh
    context (``n_batch`` = ``n_ubatch`` = their length; only the query's positions are outputs)."""
    engine = ls.engine
    cache = engine.new_cache(len(artifact) + len(query))
    try:
        return engine.prefill(cache, artifact + query, all_logits=True, logits_from=len(artifact))
    finally:
        cache.close()


def decode_step_logits(ls: LlamaSession, artifact: list[int], query: list[int], token: int,
                       variant: ContextVariant | None = None) -> np.ndarray:
    """The logits ``[1, vocab]`` of ``token`` decoded alone (a one-token batch) after the artifact and the query are
    prefilled in a fresh context (``variant``: as :func:`fresh_logits`)."""
    engine = ls.engine
    cache = engine.new_cache(None, variant)
    try:
        engine.prefill(cache, artifact)
        engine.prefill(cache, query)
        return engine.decode_step(cache, token)[None]
    finally:
        cache.close()


# Where key-bit-flip flips one bit of the deposited state, recorded in the manifest's settings
KEY_BIT_FLIP = {"cache": "the first in the state (a sliding-window model's full-attention layers)", "layer": 0,
                "token": "the artifact's last", "element": 0,
                "bit": "the highest mantissa bit of an f16 key (9), or the highest magnitude bit of its quant "
                       "(q8_0 6, q4_0 2)"}


def variant_controls(engine: LlamaCppEngine) -> dict[str, ContextVariant]:
    """The controls that rerun the fresh prefill in a context of another flash attention or KV cache type than
    ``engine``'s pin, each with its :class:`graftbench.engine.llama_cpp.engine.ContextVariant`."""
    if engine.kv_type != "f16":
        return {"kv-f16": ContextVariant(kv_type="f16")}
    switched = "flash-attn-off" if engine.flash_attn else "flash-attn-on"
    return {switched: ContextVariant(flash_attn=not engine.flash_attn),
            "kv-q8_0": ContextVariant(kv_type="q8_0", flash_attn=True)}


def decode_threads(engine: LlamaCppEngine) -> int | None:
    """The other thread count of the ``threads-N-decode`` control (1, or 2 for a one-thread pin), or ``None`` where
    the control does not apply: flash attention's one-token path splits only an f16 (or f32) cache across threads."""
    if engine.kv_type == "f16" and engine.flash_attn:
        return 1 if engine.threads > 1 else 2
    return None


def must_differ(engine: LlamaCppEngine) -> list[str]:
    """The controls claimed to differ under ``engine``'s pin (the others are reported as measured): the switched
    flash attention and KV cache type, the other thread count's decode step where it applies, the shifts and the
    key bit flip."""
    threads = decode_threads(engine)
    return sorted([*variant_controls(engine), *([f"threads-{threads}-decode"] if threads else []),
                   *(f"shift-{k}" for k in SHIFTS), "key-bit-flip"])


def _compare(reference: np.ndarray, other: np.ndarray) -> dict:
    return compare(torch.from_numpy(reference), torch.from_numpy(other))


def controls(ls: LlamaSession, pair: Pair, fresh: np.ndarray, state: LlamaState) -> dict[str, dict]:
    """The negative controls of one pair (see the module docstring): ``{name: compare() result}``."""
    chunk, engine = ls.config.chunk_size, ls.engine
    artifact, query = pair.artifact, pair.query
    other = chunk // 2 if chunk > 1 else 2
    results = {f"chunk-{other}": _compare(fresh, fresh_logits(ls, artifact, query, other)),
               "monolithic": _compare(fresh, monolithic_logits(ls, artifact, query))}
    for name, variant in variant_controls(engine).items():
        results[name] = _compare(fresh, fresh_logits(ls, artifact, query, variant=variant))
    threads = decode_threads(engine)
    if threads:
        token = int(np.argmax(fresh[-1]))
        results[f"threads-{threads}-decode"] = _compare(
            decode_step_logits(ls, artifact, query, token),
            decode_step_logits(ls, artifact, query, token, ContextVariant(threads=threads)))
    for shift in SHIFTS:
        results[f"shift-{shift}"] = _compare(fresh_logits(ls, artifact, query, shift=shift),
                                             graft_logits(ls, state, query, shift))
    flipped, _ = flip_key_bit(state.state, position=len(artifact) - 1)
    results["key-bit-flip"] = _compare(fresh, graft_logits(ls, LlamaState(flipped, state.token_ids, state.positions),
                                                           query))
    return results


def check_pair(ls: LlamaSession, pair: Pair, with_controls: bool) -> dict:
    """The exactness record of one pair (JSON-ready), as :func:`graftbench.eval.exactness.check_pair` writes it, with
    ``state_sha256`` (of the captured state's bytes) in place of the artifact id."""
    state = deposit_state(ls, pair.artifact)
    grafted = graft_logits(ls, state, pair.query)
    fresh = fresh_logits(ls, pair.artifact, pair.query)
    record = {
        "id": pair.id, "kind": pair.kind, "problems": list(pair.problems),
        "artifact_tokens": len(pair.artifact), "query_tokens": len(pair.query),
        "tokens_sha256": pair.tokens_sha256, "state_sha256": sha256_bytes(state.state),
        "graft_logits_sha256": ls.engine.logits_sha256(grafted), "fresh_logits_sha256": ls.engine.logits_sha256(fresh),
        **summarize([_compare(fresh, grafted)]),
    }
    if with_controls:
        record["controls"] = {name: summarize([r]) for name, r in controls(ls, pair, fresh, state).items()}
    return record


def tokenizer_agreement(ls: LlamaSession, problems: list[Problem], layout: PairLayout = PAIR_LAYOUT) -> dict:
    """Whether llama.cpp's own tokenizer gives graftbench's ids for the deposit texts (with start tokens) and
    query texts (without) of ``problems`` with solutions: ``{"texts", "agree", "first_difference"}`` (the problem
    id and text kind of the first disagreement, or ``None``). The engine is fed graftbench's ids either way."""
    texts, agree, first = 0, 0, None
    for problem in (p for p in problems if p.solution):
        deposit = layout.deposit.format(problem=problem.problem, answer=problem.answer, solution=problem.solution)
        for kind, text, special in (("deposit", deposit, True),
                                    ("query", layout.query.format(problem=problem.problem), False)):
            texts += 1
            ours = list(ls.tokenizer(text, add_special_tokens=special).input_ids)
            if ls.engine.llama_tokenize(text, special) == ours:
                agree += 1
            elif first is None:
                first = f"{problem.id} {kind}"
    return {"texts": texts, "agree": agree, "first_difference": first}


def window_of(ls: LlamaSession) -> int:
    """The model's sliding window in tokens (0 when it has none), as llama.cpp reads it from the GGUF."""
    return ls.engine.n_swa


def certify_llama(ls: LlamaSession, problems: list[Problem], source: str, samples: int, with_controls: bool,
                  control_pairs: int, on_pair=None, done: list[dict] | None = None, on_reused=None) -> dict:
    """Check ``samples`` pairs on the llama.cpp engine (controls on the first ``control_pairs`` when
    ``with_controls``) and return the sealed exactness manifest; its settings name the engine and record the
    tokenizer agreement (:func:`tokenizer_agreement`). ``done``, ``on_pair``, ``on_reused``: as
    :func:`graftbench.eval.exactness.run_check_exact`. Raises ``ValueError`` as :func:`build_pairs` does."""
    from ..problems.types import problem_set_sha256
    from ..results.exact_manifest import build_exactness_manifest

    pairs = build_pairs(ls, problems, samples, PAIR_LAYOUT, window=window_of(ls))
    records = measure_pairs(pairs, lambda pair, here: check_pair(ls, pair, here), with_controls, control_pairs,
                            on_pair, done, on_reused)
    return build_exactness_manifest(
        config=ls.config.to_dict(), config_fingerprint=ls.config.fingerprint,
        problem_set={"source": source, "sha256": problem_set_sha256(problems), "n": len(problems)},
        settings={"engine": ls.engine.name, "samples": samples, "controls": with_controls,
                  "control_pairs": control_pairs if with_controls else 0, "shifts": list(SHIFTS),
                  **({"must_differ": must_differ(ls.engine), "key_bit_flip": KEY_BIT_FLIP} if with_controls else {}),
                  "pair_layout": PAIR_LAYOUT.to_dict(), "logits": "every query position, float32",
                  "tokenizer_agreement": tokenizer_agreement(ls, problems)},
        records=records,
    )


def replay_llama(ls: LlamaSession, expected: dict, problems: list[Problem], limit: int | None = None,
                 on_pair=None) -> Replay:
    """Recompute the llama.cpp expectation's pairs (the first ``limit``) on ``ls``: its pin must equal the
    expectation's (else nothing is computed and the differing fields are returned); stop at the first token ids,
    state or graft logits hash that differs."""
    from .exactness import not_comparable

    differing = not_comparable(ls, expected, problems)
    if differing:
        return Replay(0, 0, None, differing)
    records = expected["pairs"][:limit] if limit else expected["pairs"]
    layout = PairLayout(**expected["settings"]["pair_layout"])
    pairs = build_pairs(ls, problems, expected["settings"]["samples"], layout, window=window_of(ls))
    compared = equal = 0
    for record, pair in zip(records, pairs):
        compared += 1
        if pair.tokens_sha256 != record["tokens_sha256"]:
            return Replay(compared, equal, f"{record['id']}: token ids differ", [])
        state = deposit_state(ls, pair.artifact)
        if sha256_bytes(state.state) != record["state_sha256"]:
            return Replay(compared, equal, f"{record['id']}: state {sha256_bytes(state.state)[:16]} != "
                                           f"{record['state_sha256'][:16]}", [])
        got = ls.engine.logits_sha256(graft_logits(ls, state, pair.query))
        if got != record["graft_logits_sha256"]:
            return Replay(compared, equal, f"{record['id']}: graft logits {got[:16]} != "
                                           f"{record['graft_logits_sha256'][:16]}", [])
        equal += 1
        if on_pair:
            on_pair(record)
    return Replay(compared, equal, None, [])
