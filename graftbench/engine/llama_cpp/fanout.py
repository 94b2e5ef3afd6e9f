"""N sequences from one state on llama.cpp: a prompt's (or a graft's) sequence state copied into N sequences of one
context, then one ``llama_decode`` per step holding one token per live sequence.

Invariants:

- the context is llama.cpp's non-unified cache: each sequence has its own stream of cells, and a token attends to its
  own stream only, so what one sequence computes does not depend on how many others share its batch (measured: the
  rows of an N-sequence step are byte-equal to the same sequence decoded alone, docs/llama-cpp.md);
- each stream holds :func:`stream_cells` cells (a multiple of llama.cpp's 256-cell padding of the attended cells), so
  a stream attends to as many cells as the engine's own context attends to after the same tokens;
- the state goes into every sequence by ``llama_state_seq_set_data`` (a cross-stream ``llama_memory_seq_cp`` defers
  its copy to the next decode), its layout widened to the context's stream count
  (:func:`graftbench.engine.llama_cpp.state_layout.in_streams`): the same cells, positions, keys and values;
- a step decodes at most :data:`MAX_BATCH` sequences per ``llama_decode`` (more samples take several calls): the width
  up to which a row's bytes were measured not to depend on the others;
- a sequence that stops leaves the batch; the others keep their positions.

Needs llama-cpp-python (the ``llama`` extra); imports no torch.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .engine import LlamaCppEngine, LlamaCppError, LlamaState, _lib
from .state_layout import in_streams

CELL_PAD = 256  # llama.cpp pads the cells a step attends to (n_kv) to a multiple of 256 (llama_kv_cache::get_n_kv)
# The most sequences one llama_decode holds. A row's bytes did not depend on the width up to it: measured, each row of
# a step of W sequences against its sequence decoded alone, equal for W = 1..7 on qwen2.5-coder-1.5b (Q4_K_M) and
# 1..16 on smollm2-135m, unequal from W = 8 on qwen2.5-coder-1.5b (docs/llama-cpp.md). More samples than this decode
# in several calls per step.
MAX_BATCH = 4


def stream_cells(tokens: int) -> int:
    """Cells of one sequence's stream holding ``tokens`` tokens: ``tokens`` rounded up to :data:`CELL_PAD`."""
    return max(CELL_PAD, -(-tokens // CELL_PAD) * CELL_PAD)


class Sequences:
    """One llama.cpp context of ``count`` sequences (ids ``0..count-1``), each in its own stream of ``cells``
    cells, each holding the same ``prefix`` tokens (positions ``0..len(prefix)-1``) and then its own tokens
    (``lengths[i]`` tokens in all). Free it with :meth:`close` (also on garbage collection).

    ``unified`` puts every sequence in one stream of ``count × cells`` cells (llama.cpp's unified cache, where a
    sequence's attention spans the others' cells, masked): for the measurement of what that changes, never a run.

    Made by :func:`fan_out`. Raises ``ValueError`` for a count outside 1..the engine's chunk size and
    :class:`graftbench.engine.llama_cpp.engine.LlamaCppError` when llama.cpp cannot make the context."""

    def __init__(self, engine: LlamaCppEngine, count: int, cells: int, unified: bool = False):
        if not 0 < count <= engine.chunk_size:
            raise ValueError(f"{count} sequences: must be 1..{engine.chunk_size} (one batch of the chunk size)")
        self.engine, self.count, self.cells, self.unified = engine, count, cells, unified
        self.lib = _lib()
        self.ctx = engine._new_context(engine.chunk_size, n_ctx=cells * count, sequences=count, unified=unified)
        self.batch = self.lib.llama_batch_init(count, 0, 1)
        self.prefix: list[int] = []
        self.lengths = [0] * count

    def load(self, state: LlamaState) -> None:
        """Put ``state`` (a whole sequence from position 0, of any context with one stream) into every sequence.
        Raises ``ValueError`` when it does not fit a stream, :class:`LlamaCppError` when llama.cpp refuses it or
        restores other positions."""
        tokens = len(state.token_ids)
        if tuple(state.positions) != (0, tokens):
            raise ValueError(f"state positions {state.positions} do not hold its {tokens} tokens from position 0")
        if tokens > self.cells:
            raise ValueError(f"a state of {tokens} tokens does not fit a stream of {self.cells} cells")
        wide = self.count > 1 and not self.unified
        data = np.frombuffer(in_streams(state.state, self.count) if wide else state.state, np.uint8)
        pointer = data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        memory = self.lib.llama_get_memory(self.ctx)
        for seq in range(self.count):
            read = self.lib.llama_state_seq_set_data(self.ctx, pointer, len(data), seq)
            if read != len(data):
                raise LlamaCppError(f"llama_state_seq_set_data read {read} bytes of {len(data)} into sequence {seq}")
            top = self.lib.llama_memory_seq_pos_max(memory, seq)
            if top != tokens - 1:
                raise LlamaCppError(f"sequence {seq} ends at position {top} after the restore, its state says "
                                    f"{tokens - 1}")
        self.prefix, self.lengths = list(state.token_ids), [tokens] * self.count

    def state(self, seq: int) -> bytes:
        """Sequence ``seq``'s state bytes (``llama_state_seq_get_data``; they name ``seq`` and list every stream of
        the context). Raises :class:`LlamaCppError` when llama.cpp writes fewer bytes than it sized."""
        size = self.lib.llama_state_seq_get_size(self.ctx, seq)
        buffer = np.empty(size, dtype=np.uint8)
        written = self.lib.llama_state_seq_get_data(self.ctx, buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                                    size, seq)
        if written != size:
            raise LlamaCppError(f"llama_state_seq_get_data wrote {written} bytes of {size}")
        return buffer.tobytes()

    def step(self, tokens: dict[int, int], width: int = MAX_BATCH) -> np.ndarray:
        """One token per sequence in ``tokens`` (sequence id to token id), each at its sequence's next position, in
        ``llama_decode`` calls of at most ``width`` sequences (:data:`MAX_BATCH`), in that order. Returns their
        float32 logits ``[len(tokens), vocab]`` in the same order. Raises ``ValueError`` for an unknown sequence, a
        full stream or a token outside the vocabulary, :class:`LlamaCppError` when a decode fails."""
        if not tokens:
            raise ValueError("a step needs at least one sequence")
        items = list(tokens.items())
        return np.concatenate([self._decode(dict(items[start:start + width]))
                               for start in range(0, len(items), width)])

    def _decode(self, tokens: dict[int, int]) -> np.ndarray:
        """One ``llama_decode`` of one token per sequence in ``tokens``; their logits ``[len(tokens), vocab]``."""
        batch, n_vocab = self.batch, self.engine.n_vocab
        batch.n_tokens = len(tokens)
        for row, (seq, token) in enumerate(tokens.items()):
            if not 0 <= seq < self.count:
                raise ValueError(f"sequence {seq} is not one of this context's {self.count}")
            if self.lengths[seq] >= self.cells:
                raise ValueError(f"sequence {seq} fills its stream of {self.cells} cells")
            if not 0 <= int(token) < n_vocab:
                raise ValueError(f"token id {token} is outside the GGUF's vocabulary of {n_vocab}")
            batch.token[row], batch.pos[row] = int(token), self.lengths[seq]
            batch.n_seq_id[row], batch.seq_id[row][0], batch.logits[row] = 1, seq, True
        status = self.lib.llama_decode(self.ctx, batch)
        if status != 0:
            raise LlamaCppError(f"llama_decode returned {status} for {len(tokens)} sequences")
        for seq in tokens:
            self.lengths[seq] += 1
        pointer = self.lib.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(pointer, shape=(len(tokens), n_vocab)).astype(np.float32, copy=True)

    def kv_bytes(self, state: LlamaState) -> int:
        """Bytes of keys and values the context allocates: every stream's cells at the bytes per cell of
        ``state`` (its key rows twice: keys and values alike, as in an f16, q8_0 or q4_0 cache whose keys and values
        are of one width)."""
        from .state_layout import parse_state

        return self.count * self.cells * 2 * sum(rows.row_bytes for rows in parse_state(state.state))

    def close(self) -> None:
        """Free the batch and the context (idempotent)."""
        if self.ctx is not None:
            ctx, self.ctx = self.ctx, None
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(ctx)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


def fan_out(engine: LlamaCppEngine, state: LlamaState, count: int, room: int, unified: bool = False) -> Sequences:
    """A context of ``count`` sequences, each holding ``state`` with ``room`` more tokens of its own (its stream:
    :func:`stream_cells` of the state's tokens and ``room``; ``unified``: see :class:`Sequences`). Raises what
    :class:`Sequences` and :meth:`Sequences.load` raise; the context is freed on any failure."""
    sequences = Sequences(engine, count, stream_cells(len(state.token_ids) + room), unified)
    try:
        sequences.load(state)
    except BaseException:
        sequences.close()
        raise
    return sequences
