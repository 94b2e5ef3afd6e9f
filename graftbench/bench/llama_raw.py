"""Raw llama.cpp: llama.cpp's own calls through llama-cpp-python's low-level bindings, with no graftbench code between
them, on the model graftbench's llama.cpp engine has loaded (the same build, the same weights in memory, a context
with the same parameters). The benchmark's reference for what graftbench adds on top of llama.cpp.

- decode: one ``llama_decode`` of a one-token batch (``llama_batch_get_one``) per token, the next token chosen by
  llama.cpp's greedy sampler (``llama_sampler_init_greedy``: the argmax in C);
- prefill: ``llama_batch_get_one`` batches of the chunk size, the last position's logits only;
- N sequences (:class:`RawSamples`): one context of N sequences, a state put into each by
  ``llama_state_seq_set_data``, one ``llama_batch`` of N tokens per step, each llama.cpp's greedy choice in C;
- state: ``llama_state_seq_save_file`` of sequence 0 and ``llama_state_seq_load_file`` into a kept context cleared
  with ``llama_memory_clear`` (the file holds the token ids and llama.cpp's sequence state; nothing checks a hash
  or a model); decode after a state load: the load, a one-token query, then the greedy loop above.

Needs llama-cpp-python (the ``llama`` extra); imports no torch.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from ..engine.llama_cpp import NAME
from ..engine.llama_cpp.engine import SEQ, LlamaCache, LlamaCppEngine, LlamaCppError, bindings
from ..engine.llama_cpp.fanout import stream_cells
from ..engine.llama_cpp.state_layout import in_streams

ENGINE = NAME  # the engine the raw reference runs beside: the llama.cpp benchmarks reach it by this name


class RawLlama:
    """llama.cpp's own calls on ``engine``'s model, in contexts made with the engine's parameters."""

    def __init__(self, engine: LlamaCppEngine):
        self.engine = engine
        self.lib = bindings()
        self._kept: LlamaCache | None = None  # the context state loads go into, cleared before each

    def context(self) -> LlamaCache:
        """A fresh context with the engine's parameters (the one call shared with graftbench: its parameters)."""
        return self.engine.new_cache()

    def prefill(self, cache: LlamaCache, ids: list[int]) -> None:
        """``ids`` after the context's tokens, in ``llama_batch_get_one`` batches of the chunk size (positions are
        llama.cpp's: the sequence's next). Raises :class:`LlamaCppError` when a decode fails."""
        for start in range(0, len(ids), cache.chunk_size):
            part = ids[start:start + cache.chunk_size]
            tokens = (self.lib.llama_token * len(part))(*part)
            status = self.lib.llama_decode(cache.ctx, self.lib.llama_batch_get_one(tokens, len(part)))
            if status != 0:
                raise LlamaCppError(f"llama_decode returned {status}")
        cache.token_ids.extend(ids)

    def greedy(self, cache: LlamaCache, tokens: int) -> list[int]:
        """``tokens`` greedy tokens after the context's last logits: llama.cpp's greedy sampler picks each, one
        ``llama_decode`` per token. EOS does not stop it (a fixed count is timed). Returns the token ids."""
        sampler = self.lib.llama_sampler_init_greedy()
        chosen = []
        try:
            token_box = (self.lib.llama_token * 1)()
            for _ in range(tokens):
                token = self.lib.llama_sampler_sample(sampler, cache.ctx, -1)
                chosen.append(int(token))
                token_box[0] = token
                if self.lib.llama_decode(cache.ctx, self.lib.llama_batch_get_one(token_box, 1)) != 0:
                    raise LlamaCppError("llama_decode failed while decoding")
        finally:
            self.lib.llama_sampler_free(sampler)
        cache.token_ids.extend(chosen)
        return chosen

    def save_state(self, cache: LlamaCache, path: str) -> int:
        """``llama_state_seq_save_file`` of sequence 0 with its token ids; returns the bytes written."""
        ids = (self.lib.llama_token * cache.n_past)(*cache.token_ids)
        written = self.lib.llama_state_seq_save_file(cache.ctx, str(path).encode(), SEQ, ids, cache.n_past)
        if not written:
            raise LlamaCppError(f"llama_state_seq_save_file wrote nothing to {path}")
        return int(written)

    def load_state_and_query(self, path: str, capacity: int, token: int) -> dict:
        """``llama_state_seq_load_file`` of ``path`` into a kept context, its memory cleared first
        (``llama_memory_clear`` with its data: as graftbench's graft reuses a closed context), then ``token`` decoded
        after the restored tokens. Returns seconds: ``clear_s`` (the clear), ``load_s`` (the clear and the load),
        ``total_s`` (all of it with the one-token query and its logits copied out), and ``logits`` (float32
        ``[vocab]``). The context is made once, untimed."""
        cache = self._kept_context()  # made on first use, before the clock starts
        started = time.perf_counter()
        clear_s = self._load_into(cache, path, capacity)
        loaded = time.perf_counter()
        box = (self.lib.llama_token * 1)(token)
        if self.lib.llama_decode(cache.ctx, self.lib.llama_batch_get_one(box, 1)) != 0:
            raise LlamaCppError("llama_decode failed after the state load")
        pointer = self.lib.llama_get_logits_ith(cache.ctx, -1)
        logits = np.ctypeslib.as_array(pointer, shape=(self.engine.n_vocab,)).astype(np.float32, copy=True)
        return {"clear_s": clear_s, "load_s": loaded - started, "total_s": time.perf_counter() - started,
                "logits": logits}

    def _kept_context(self) -> LlamaCache:
        """The context state loads go into, made on first use."""
        if self._kept is None:
            self._kept = self.context()
        return self._kept

    def _load_into(self, cache: LlamaCache, path: str, capacity: int) -> float:
        """Clear ``cache`` with its data, then load the state file into it; returns the clear's seconds."""
        started = time.perf_counter()
        self.lib.llama_memory_clear(self.lib.llama_get_memory(cache.ctx), True)
        cleared = time.perf_counter() - started
        ids, count = (self.lib.llama_token * capacity)(), ctypes.c_size_t(0)
        read = self.lib.llama_state_seq_load_file(cache.ctx, str(path).encode(), SEQ, ids, capacity,
                                                  ctypes.byref(count))
        if not read:
            raise LlamaCppError(f"llama_state_seq_load_file could not load {path}")
        return cleared

    def load_state_and_decode(self, path: str, capacity: int, token: int, tokens: int) -> tuple[float, list[int]]:
        """``llama_state_seq_load_file`` of ``path`` into the kept context (cleared), ``token`` decoded after it, then
        ``tokens`` greedy tokens by llama.cpp's greedy sampler (:meth:`greedy`'s loop). Returns ``(tok/s, ids)``:
        ``(tokens - 1)`` over the seconds from the first token chosen to the last, as :meth:`greedy` after a
        prompt is timed. The kept context must hold ``capacity`` + 1 + ``tokens`` positions."""
        cache = self._kept_context()
        self._load_into(cache, path, capacity)
        box = (self.lib.llama_token * 1)(token)
        if self.lib.llama_decode(cache.ctx, self.lib.llama_batch_get_one(box, 1)) != 0:
            raise LlamaCppError("llama_decode failed after the state load")
        sampler = self.lib.llama_sampler_init_greedy()
        chosen = []
        try:
            for i in range(tokens):
                if i == 1:
                    started = time.perf_counter()
                box[0] = self.lib.llama_sampler_sample(sampler, cache.ctx, -1)
                chosen.append(int(box[0]))
                if self.lib.llama_decode(cache.ctx, self.lib.llama_batch_get_one(box, 1)) != 0:
                    raise LlamaCppError("llama_decode failed while decoding")
        finally:
            self.lib.llama_sampler_free(sampler)
        return (tokens - 1) / (time.perf_counter() - started), chosen

    def close(self) -> None:
        """Free the kept context."""
        if self._kept is not None:
            self._kept.close()
            self._kept = None


def load_model_alone_s(gguf_path: str) -> float:
    """Seconds of llama.cpp's own load of ``gguf_path`` and nothing else: the default model parameters (extra
    buffers off, as the engine loads), ``llama_model_load_from_file``, then ``llama_model_free``, all timed."""
    started = time.perf_counter()
    lib = bindings()
    params = lib.llama_model_default_params()
    params.use_extra_bufts = False
    model_ptr = lib.llama_model_load_from_file(gguf_path.encode(), params)
    lib.llama_model_free(model_ptr)
    return time.perf_counter() - started


class RawSamples:
    """llama.cpp's own N-sequence decode on ``engine``'s model, in contexts made with the engine's parameters."""

    def __init__(self, engine: LlamaCppEngine):
        self.engine, self.lib = engine, bindings()

    def run(self, prefix, width: int, tokens: int) -> dict:
        """``prefix`` (a :class:`graftbench.bench.llama_samples.Prefix`: its ``state`` and the query's ``last`` token)
        put into ``width`` sequences of a fresh context of the engine's parameters (each sequence's
        stream as :func:`graftbench.engine.llama_cpp.fanout.fan_out` sizes it), the query's last token for every
        sequence as one batch, then ``tokens`` greedy tokens per sequence, one batch of ``width`` tokens per step.
        Returns seconds (``decode_s`` from the first token chosen to the last, ``total_s`` from the load) and the
        tokens per sequence. Raises :class:`LlamaCppError` when llama.cpp refuses a call."""
        lib, engine = self.lib, self.engine
        cells = stream_cells(len(prefix.state.token_ids) + 1 + tokens)
        data = in_streams(prefix.state.state, width) if width > 1 else prefix.state.state
        buffer = np.frombuffer(data, dtype=np.uint8)
        pointer = buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        ctx = engine._new_context(engine.chunk_size, n_ctx=cells * width, sequences=width)
        batch, sampler = lib.llama_batch_init(width, 0, 1), lib.llama_sampler_init_greedy()
        chosen: list[list[int]] = [[] for _ in range(width)]
        try:
            started = time.perf_counter()
            for seq in range(width):
                if lib.llama_state_seq_set_data(ctx, pointer, len(data), seq) != len(data):
                    raise LlamaCppError(f"llama_state_seq_set_data refused the state for sequence {seq}")
            position = len(prefix.state.token_ids)
            self._decode(ctx, batch, [prefix.last] * width, position)
            for step in range(tokens):
                picks = [int(lib.llama_sampler_sample(sampler, ctx, seq)) for seq in range(width)]
                for seq, token in enumerate(picks):
                    chosen[seq].append(token)
                if step == 0:
                    decode_start = time.perf_counter()
                if step + 1 < tokens:
                    self._decode(ctx, batch, picks, position + 1 + step)
            ended = time.perf_counter()
        finally:
            lib.llama_sampler_free(sampler)
            lib.llama_batch_free(batch)
            lib.llama_free(ctx)
        return {"decode_s": ended - decode_start, "total_s": ended - started, "tokens": chosen}

    def _decode(self, ctx, batch, picks: list[int], position: int) -> None:
        batch.n_tokens = len(picks)
        for seq, token in enumerate(picks):
            batch.token[seq], batch.pos[seq], batch.n_seq_id[seq] = token, position, 1
            batch.seq_id[seq][0], batch.logits[seq] = seq, True
        if self.lib.llama_decode(ctx, batch) != 0:
            raise LlamaCppError(f"llama_decode failed at position {position}")
