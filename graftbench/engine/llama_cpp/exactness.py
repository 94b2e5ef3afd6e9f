"""The llama.cpp engine's side of ``check-exact`` (:class:`graftbench.engine.base.ExactnessChecks`): per pair of
check-exact's own token ids,

- deposit: the artifact's ids prefilled in a fresh context in the pinned chunk schedule, its sequence state
  captured (``llama_state_seq_get_data``; its SHA-256 commits it);
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
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ..base import CONTROL_SHIFTS, Deposited
from .engine import ContextVariant, LlamaCppEngine, LlamaState
from .state_layout import flip_key_bit
from ...util.hashing import sha256_bytes

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
                   *(f"shift-{k}" for k in CONTROL_SHIFTS), "key-bit-flip"])


def deposit_state(ls, artifact: list[int]) -> LlamaState:
    """The sequence state after prefilling ``artifact`` in a fresh context of the session ``ls`` (the pinned chunk
    schedule)."""
    cache = ls.engine.new_cache()
    try:
        ls.engine.prefill(cache, artifact)
        return ls.engine.capture(cache)
    finally:
        cache.close()


def graft_logits(ls, state: LlamaState, query: list[int], shift: int = 0) -> np.ndarray:
    """The query's logits after ``state`` restored into a fresh context (moved ``shift`` positions on when
    non-zero)."""
    cache = ls.engine.restore(state)
    try:
        if shift:
            ls.engine.shift_positions(cache, shift)
        return ls.engine.prefill(cache, query, all_logits=True)
    finally:
        cache.close()


def fresh_logits(ls, artifact: list[int], query: list[int], chunk_size: int | None = None, shift: int = 0,
                 variant: ContextVariant | None = None) -> np.ndarray:
    """The query's logits ``[len(query), vocab]`` after the artifact, both prefilled in one fresh context with
    batches of ``chunk_size`` tokens (default: the pin's), at positions starting at ``shift``; ``variant``: a
    context that differs from the pin (:class:`graftbench.engine.llama_cpp.engine.ContextVariant`, the controls
    only)."""
    cache = ls.engine.new_cache(chunk_size, variant)
    try:
        cache.shift = shift
        ls.engine.prefill(cache, artifact)
        return ls.engine.prefill(cache, query, all_logits=True)
    finally:
        cache.close()


def monolithic_logits(ls, artifact: list[int], query: list[int]) -> np.ndarray:
    """The query's logits ``[len(query), vocab]`` with the artifact and the query prefilled in one batch of a fresh
    context (``n_batch`` = ``n_ubatch`` = their length; only the query's positions are outputs)."""
    cache = ls.engine.new_cache(len(artifact) + len(query))
    try:
        return ls.engine.prefill(cache, artifact + query, all_logits=True, logits_from=len(artifact))
    finally:
        cache.close()


def decode_step_logits(ls, artifact: list[int], query: list[int], token: int,
                       variant: ContextVariant | None = None) -> np.ndarray:
    """The logits ``[1, vocab]`` of ``token`` decoded alone (a one-token batch) after the artifact and the query are
    prefilled in a fresh context (``variant``: as :func:`fresh_logits`)."""
    cache = ls.engine.new_cache(None, variant)
    try:
        ls.engine.prefill(cache, artifact)
        ls.engine.prefill(cache, query)
        return ls.engine.decode_step(cache, token)[None]
    finally:
        cache.close()


def window_of(ls) -> int:
    """The model's sliding window in tokens (0 when it has none), as llama.cpp reads it from the GGUF."""
    return ls.engine.n_swa


class LlamaExactness:
    """check-exact on a llama.cpp session (:class:`graftbench.engine.llama_cpp.session.LlamaSession`): a deposit is
    the captured sequence state, committed by its bytes' SHA-256."""

    deposit_field = "state_sha256"
    deposit_label = "state"

    def __init__(self, session):
        self.session = session
        self.engine: LlamaCppEngine = session.engine

    @property
    def window(self) -> int:
        """The model's sliding window in tokens (0 when it has none): :func:`window_of`."""
        return window_of(self.session)

    def deposit(self, artifact: list[int]) -> Deposited:
        """:func:`deposit_state`, committed by the SHA-256 of the state's bytes."""
        state = deposit_state(self.session, artifact)
        return Deposited(sha256_bytes(state.state), state)

    def graft_logits(self, deposited: Deposited, query: list[int], shift: int = 0) -> np.ndarray:
        """:func:`graft_logits` of the deposited state."""
        return graft_logits(self.session, deposited.payload, query, shift)

    def fresh_logits(self, artifact: list[int], query: list[int]) -> np.ndarray:
        """:func:`fresh_logits` under the pin."""
        return fresh_logits(self.session, artifact, query)

    def controls(self, artifact: list[int], query: list[int], fresh: np.ndarray,
                 deposited: Deposited) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        """The negative controls of one pair (see the module docstring), each ``(name, reference, other)``."""
        ls, state = self.session, deposited.payload
        chunk = ls.config.chunk_size
        other = chunk // 2 if chunk > 1 else 2
        yield f"chunk-{other}", fresh, fresh_logits(ls, artifact, query, other)
        yield "monolithic", fresh, monolithic_logits(ls, artifact, query)
        for name, variant in variant_controls(self.engine).items():
            yield name, fresh, fresh_logits(ls, artifact, query, variant=variant)
        threads = decode_threads(self.engine)
        if threads:
            token = int(np.argmax(fresh[-1]))
            yield (f"threads-{threads}-decode", decode_step_logits(ls, artifact, query, token),
                   decode_step_logits(ls, artifact, query, token, ContextVariant(threads=threads)))
        for shift in CONTROL_SHIFTS:
            yield (f"shift-{shift}", fresh_logits(ls, artifact, query, shift=shift),
                   graft_logits(ls, state, query, shift))
        flipped, _ = flip_key_bit(state.state, position=len(artifact) - 1)
        yield "key-bit-flip", fresh, graft_logits(ls, LlamaState(flipped, state.token_ids, state.positions), query)

    def control_settings(self) -> dict:
        """The controls claimed to differ under this pin (:func:`must_differ`) and where the bit is flipped."""
        return {"must_differ": must_differ(self.engine), "key_bit_flip": KEY_BIT_FLIP}

    def settings(self, problems: list, layout) -> dict:
        """The engine's name, what the logits are, and the tokenizer agreement on ``problems``
        (:func:`tokenizer_agreement`)."""
        return {"engine": self.engine.name, "logits": "every query position, float32",
                "tokenizer_agreement": tokenizer_agreement(self.session, problems, layout)}


def tokenizer_agreement(ls, problems: list, layout) -> dict:
    """Whether llama.cpp's own tokenizer gives graftbench's ids for the deposit texts (with start tokens) and query
    texts (without) of ``problems`` with solutions, laid out by ``layout`` (its ``deposit`` and ``query``
    templates): ``{"texts", "agree", "first_difference"}`` (the problem id and text kind of the first disagreement,
    or ``None``). The engine is fed graftbench's ids either way."""
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
