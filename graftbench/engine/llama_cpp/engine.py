"""The llama.cpp engine: a GGUF file run by llama.cpp (llama-cpp-python's low-level bindings), quantized weights as
stored, the KV cache in f16, q8_0 or q4_0.

It offers the same calls as the torch engine (``name``, ``pin_fields``, ``tokenize``, ``new_cache``, ``prefill``,
``decode_step``, ``capture``, ``restore``, ``logits_sha256``), on numpy float32 logits.

Invariants:

- a cache is one llama.cpp context holding one sequence (id 0); a new cache is a new context, so a restore always
  lands in a fresh context;
- the context's batch and micro-batch sizes (``n_batch``, ``n_ubatch``) equal the chunk size, and a segment of n
  tokens is decoded in ``llama_decode`` calls of ``chunk_size`` tokens from the segment's first token, so llama.cpp's
  batch boundaries are graftbench's chunk schedule;
- token ids are fed as ids: the caller tokenizes with graftbench's own tokenizer (the prompts' ids); llama.cpp's
  tokenizer is used only to check that it agrees (:meth:`LlamaCppEngine.llama_tokenize`);
- a captured state is llama.cpp's per-sequence state (``llama_state_seq_get_data``: the KV cells with their
  positions) plus the token ids and positions it covers; it holds no model or build hash, which the caller's pin
  (:meth:`LlamaCppEngine.pin_fields`) must carry.

Importing this module needs llama-cpp-python (the ``llama`` extra); it imports no torch.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import sys
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from . import portable_build

ENGINE_NAME = "llama.cpp"
KV_TYPES = ("f16", "q8_0", "q4_0")  # the KV cache types offered (K and V alike)
DEFAULT_N_CTX = 8192  # tokens: the default context of a cache
SEQ = 0  # the one sequence id of every context


class LlamaCppError(RuntimeError):
    """llama.cpp refused a call (a model that does not load, a context that cannot be made, a decode or a state
    restore that fails); the message names the call and its status."""


GGML_LOG_LEVEL_ERROR = 4  # ggml's log levels: 1 debug, 2 info, 3 warn, 4 error, 5 continuation
_LOG_CALLBACK = None  # the installed callback, kept alive as long as llama.cpp may call it


def _lib():
    """The llama_cpp bindings module, imported on first use with llama.cpp's own log limited to its errors (on
    stderr; the binding's own logger maps ggml's current levels one off and prints warnings).

    The build loaded is the one :func:`graftbench.engine.llama_cpp.portable_build.select` picks (``native`` unless
    ``GRAFTBENCH_LLAMA_BUILD`` says ``portable``), chosen at the first import.

    Raises ``ImportError`` naming the extra to install when llama-cpp-python is absent, and :class:`LlamaCppError`
    when the build asked for cannot be loaded (the message says why and how to build it)."""
    global _LOG_CALLBACK
    if "llama_cpp.llama_cpp" not in sys.modules:
        _select_build()
    try:
        import llama_cpp
    except ImportError as exc:
        raise ImportError("the llama.cpp engine needs llama-cpp-python: pip install -e '.[llama]'") from exc
    if _LOG_CALLBACK is None:
        def errors_only(level, text, _user_data):
            if level == GGML_LOG_LEVEL_ERROR:
                sys.stderr.write(text.decode("utf-8", "replace"))

        _LOG_CALLBACK = llama_cpp.llama_log_callback(errors_only)
        llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
    return llama_cpp


def _select_build() -> str:
    """:func:`graftbench.engine.llama_cpp.portable_build.select`, its refusal raised as :class:`LlamaCppError`."""
    try:
        return portable_build.select()
    except portable_build.LlamaBuildError as exc:
        raise LlamaCppError(str(exc)) from exc


def _ggml_type(kv_type: str) -> int:
    lib = _lib()
    return {"f16": lib.GGML_TYPE_F16, "q8_0": lib.GGML_TYPE_Q8_0, "q4_0": lib.GGML_TYPE_Q4_0}[kv_type]


def system_info() -> str:
    """llama.cpp's ``llama_print_system_info``: the CPU features the ggml CPU backend was built for and detected
    (e.g. ``CPU : SSE3 = 1 | AVX2 = 1 | ...``), one line, trailing separators stripped."""
    return _lib().llama_print_system_info().decode("utf-8", "replace").strip().rstrip("|").strip()


def bindings():
    """llama-cpp-python's low-level bindings (the ``llama_cpp`` module), loaded once with llama.cpp's log quieted
    to errors: what the benchmark's raw llama.cpp side calls directly."""
    return _lib()


def default_threads() -> int:
    """Threads when none are given: ``OMP_NUM_THREADS`` where it is a positive integer (as torch reads it, so one
    setting pins both engines' thread count), else every core."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else max(1, os.cpu_count() or 1)


def binding_version() -> str:
    """The installed llama-cpp-python version (it vendors one llama.cpp commit, so it names the llama.cpp code)."""
    return metadata.version("llama-cpp-python")


@dataclass
class LlamaState:
    """A captured sequence: llama.cpp's state bytes (``llama_state_seq_get_data`` of sequence 0), the token ids it
    holds, and its positions ``[start, end)`` (``start`` is 0: the whole sequence)."""

    state: bytes
    token_ids: list[int]
    positions: tuple[int, int]


@dataclass(frozen=True)
class ContextVariant:
    """Context parameters that differ from an engine's pin, for the negative controls: each field set replaces the
    engine's (``n_ctx`` tokens, ``threads``, ``kv_type`` for keys and values alike, ``flash_attn``); ``None`` keeps
    the engine's."""

    n_ctx: int | None = None
    threads: int | None = None
    kv_type: str | None = None
    flash_attn: bool | None = None


@dataclass
class LlamaCache:
    """One llama.cpp context with one sequence: ``token_ids`` hold the ids fed so far (their positions are
    ``0..len-1``), ``chunk_size`` its ``n_batch`` = ``n_ubatch``. Free it with :meth:`close` (also on garbage
    collection)."""

    ctx: object
    n_ctx: int
    chunk_size: int
    token_ids: list[int] = field(default_factory=list)
    shift: int = 0  # positions added to every later token (the shifted-positions control only)
    recycle: object = field(default=None, repr=False, compare=False)  # takes the context back instead of a free

    @property
    def n_past(self) -> int:
        """Tokens the sequence holds (the next token's position, before any shift)."""
        return len(self.token_ids)

    def close(self) -> None:
        """Free the context, or hand it back to its engine's spare (idempotent)."""
        if self.ctx is not None:
            ctx, self.ctx = self.ctx, None
            if self.recycle is not None:
                self.recycle(ctx)
            else:
                _lib().llama_free(ctx)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


class LlamaCppEngine:
    """A GGUF file loaded by llama.cpp, making contexts of ``n_ctx`` tokens with ``n_batch`` = ``n_ubatch`` =
    ``chunk_size``, ``threads`` threads for prefill and decode, a KV cache of ``kv_type`` (``f16``, ``q8_0`` or
    ``q4_0``, keys and values alike) and flash attention on or off (a quantized V cache needs it on).

    ``extra_buffers`` is llama.cpp's weight repacking (``use_extra_bufts``); it is off by default because its AMX
    matrix product crashes on some Intel CPUs, and it is part of the pin. ``tokenizer`` is graftbench's tokenizer
    of this model (used by :meth:`tokenize`); ``weights_sha256`` the GGUF file's SHA-256 when already known.

    Raises ``ValueError`` for a bad argument (the message names it), ``FileNotFoundError`` for a missing file and
    :class:`LlamaCppError` when llama.cpp cannot load the model or the build asked for (``GRAFTBENCH_LLAMA_BUILD``,
    :mod:`graftbench.engine.llama_cpp.portable_build`) cannot be loaded.
    """

    name = ENGINE_NAME

    def __init__(self, gguf_path: str, n_ctx: int = DEFAULT_N_CTX, chunk_size: int = 256, threads: int | None = None,
                 kv_type: str = "f16", flash_attn: bool = False, extra_buffers: bool = False, tokenizer=None,
                 weights_sha256: str = ""):
        _check_options(n_ctx, chunk_size, threads, kv_type, flash_attn)
        if not os.path.isfile(gguf_path):
            raise FileNotFoundError(f"GGUF file '{gguf_path}' does not exist")
        self.gguf_path, self.n_ctx, self.chunk_size = str(gguf_path), n_ctx, chunk_size
        self.threads = threads or default_threads()
        self.kv_type, self.flash_attn, self.extra_buffers = kv_type, flash_attn, extra_buffers
        self.tokenizer, self._weights_sha256 = tokenizer, weights_sha256
        self._spare: list = []  # at most one closed context of the engine's chunk size, kept for a restore
        self.build = _select_build()
        self.build_identity = portable_build.identity() if self.build == "portable" else {}  # checked by the select
        lib = _lib()
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        params.use_extra_bufts = extra_buffers
        self.model = lib.llama_model_load_from_file(self.gguf_path.encode(), params)
        if not self.model:
            raise LlamaCppError(f"llama.cpp could not load '{gguf_path}' (llama_model_load_from_file returned NULL)")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.n_swa = int(lib.llama_model_n_swa(self.model))

    @property
    def weights_sha256(self) -> str:
        """SHA-256 of the GGUF file (computed once when not given)."""
        if not self._weights_sha256:
            from ...util.hashing import sha256_file

            self._weights_sha256 = sha256_file(self.gguf_path)
        return self._weights_sha256

    def pin_fields(self) -> dict:
        """This engine's own pin fields (the pin's ``engine`` dict; the GGUF file's SHA-256, threads and the machine
        are the pin's own fields, see :func:`pinned_config`): the engine's name, the binding's version (which fixes
        the vendored llama.cpp code), llama.cpp's system info (the CPU features of the build), batch and micro-batch
        sizes (tokens), context size (tokens), flash attention, the KV cache types, weight repacking and the
        sliding-window cache mode. On the portable build (:mod:`graftbench.engine.llama_cpp.portable_build`) the
        build's identity (``build``, ``build_cmake_args``, ``build_library_sha256``, ``build_compiler``) stands in
        place of the system info; the native build's fields are unchanged."""
        built = ({"system_info": system_info()} if not self.build_identity else
                 {f"build_{k}" if k != "build" else k: v for k, v in self.build_identity.items()
                  if k != "llama_cpp_python"})
        return {
            "engine": ENGINE_NAME,
            "llama_cpp_python": binding_version(),
            **built,
            "n_batch": self.chunk_size,
            "n_ubatch": self.chunk_size,
            "n_ctx": self.n_ctx,
            "flash_attn": self.flash_attn,
            "type_k": self.kv_type,
            "type_v": self.kv_type,
            "extra_buffers": self.extra_buffers,
            "swa_full": True,
        }

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` by graftbench's tokenizer (no start tokens). Raises ``ValueError`` without one."""
        if self.tokenizer is None:
            raise ValueError("this engine was made without graftbench's tokenizer (pass tokenizer=)")
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def llama_tokenize(self, text: str, add_special: bool = False) -> list[int]:
        """Token ids of ``text`` by llama.cpp's own tokenizer (the GGUF's vocabulary), for the agreement check."""
        lib, raw = _lib(), text.encode("utf-8")
        capacity = len(raw) + 16
        out = (lib.llama_token * capacity)()
        n = lib.llama_tokenize(self.vocab, raw, len(raw), out, capacity, add_special, True)
        if n < 0:
            out = (lib.llama_token * -n)()
            n = lib.llama_tokenize(self.vocab, raw, len(raw), out, -n, add_special, True)
        return list(out[:n])

    def new_cache(self, chunk_size: int | None = None, variant: ContextVariant | None = None,
                  eval_callback=None) -> LlamaCache:
        """A fresh context (empty sequence) with ``n_batch`` = ``n_ubatch`` = ``chunk_size`` (default: the
        engine's). A context of the engine's own parameters goes back to the engine's spare when its cache is
        closed (:meth:`cleared_cache` reuses it), unless it has an ``eval_callback``.

        ``eval_callback``: a ggml eval callback (``llama_cpp.ggml_backend_sched_eval_callback``) set as the
        context's ``cb_eval``, which sees each graph node computed (the layer trace only,
        :mod:`graftbench.engine.llama_cpp.layer_trace`); the caller keeps it alive until the cache is closed.

        ``variant`` makes a context that differs from the pin in the fields it sets (flash attention, KV cache
        type, threads, context size): the negative controls only, never a run. Raises ``ValueError`` for a variant
        llama.cpp does not allow (a quantized cache without flash attention, a context smaller than the chunk) and
        :class:`LlamaCppError` when llama.cpp cannot make it."""
        chunk = chunk_size or self.chunk_size
        own = variant is None or variant == ContextVariant()
        params = self._context_params(variant or ContextVariant())
        _check_options(params["n_ctx"], chunk, params["threads"], params["kv_type"], params["flash_attn"])
        return LlamaCache(self._new_context(chunk, **params, eval_callback=eval_callback), params["n_ctx"], chunk,
                          recycle=self._recycle if own and chunk == self.chunk_size and eval_callback is None
                          else None)

    def _context_params(self, variant: ContextVariant) -> dict:
        """The engine's context parameters with ``variant``'s fields in place of those it sets."""
        own = {"n_ctx": self.n_ctx, "threads": self.threads, "kv_type": self.kv_type, "flash_attn": self.flash_attn}
        return {name: own[name] if getattr(variant, name) is None else getattr(variant, name) for name in own}

    def cleared_cache(self) -> LlamaCache:
        """An empty cache of the engine's chunk size for a restore: the spare context of a closed cache, its
        memory cleared (``llama_memory_clear`` with its data: every cell emptied and the whole KV buffer zeroed, so
        no value of an earlier sequence, finite or not, stays in a masked cell), else a fresh one. Making a context
        costs about as much as restoring a state into it; zeroing one is a pass over its whole KV buffer (20 ms of
        the 69 ms llama.cpp takes to clear and load an 8,192-token state of ``smollm2-135m`` on the Intel Xeon:
        ``llama_cpp_clear_s`` in its bench-llama results), which is why
        :meth:`graftbench.engine.llama_cpp.session.LlamaSession.graft` runs it beside the file's read. Raises
        :class:`LlamaCppError` as :meth:`new_cache`."""
        if not self._spare:
            return self.new_cache()
        ctx = self._spare.pop()
        lib = _lib()
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        return LlamaCache(ctx, self.n_ctx, self.chunk_size, recycle=self._recycle)

    def _recycle(self, ctx) -> None:
        """Keep one closed context as the spare (while the model is loaded); free any other."""
        if getattr(self, "model", None) and not self._spare:
            self._spare.append(ctx)
        else:
            _lib().llama_free(ctx)

    def _new_context(self, chunk: int, n_ctx: int | None = None, threads: int | None = None,
                     kv_type: str | None = None, flash_attn: bool | None = None, sequences: int = 1,
                     unified: bool = False, eval_callback=None):
        """A llama.cpp context of ``chunk``-token batches; the other parameters default to the engine's.
        ``sequences`` > 1 makes a context of that many sequences, each in its own stream of ``n_ctx / sequences``
        cells (a non-unified cache: a sequence attends to its own stream only), or with ``unified`` all in one
        stream of ``n_ctx`` cells (llama.cpp's unified cache: a measurement only, never a run). ``eval_callback``:
        the context's ``cb_eval`` (:meth:`new_cache`)."""
        n_ctx, threads = n_ctx or self.n_ctx, threads or self.threads
        kv_type = kv_type or self.kv_type
        flash_attn = self.flash_attn if flash_attn is None else flash_attn
        lib = _lib()
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = n_ctx, chunk, chunk, sequences
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = (lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                                  else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        params.type_k = params.type_v = _ggml_type(kv_type)
        params.swa_full, params.kv_unified, params.no_perf = True, unified, True
        if eval_callback is not None:
            params.cb_eval = eval_callback
        ctx = lib.llama_init_from_model(self.model, params)
        if not ctx:
            raise LlamaCppError(f"llama.cpp could not make a context (n_ctx {n_ctx}, chunk {chunk}, "
                                f"kv {kv_type}, flash attention {flash_attn})")
        return ctx

    def prefill(self, cache: LlamaCache, ids: list[int], chunk_size: int | None = None,
                all_logits: bool = False, logits_from: int = 0) -> np.ndarray:
        """Append ``ids`` at the cache's next positions, in ``llama_decode`` calls of ``chunk_size`` tokens (default:
        the cache's) from the segment's first token.

        Returns float32 logits: the last position's ``[vocab]``, or with ``all_logits`` those of every position
        from ``logits_from`` (an index into ``ids``) on, ``[len(ids) - logits_from, vocab]`` (then each of those
        tokens is an output of its batch, and no earlier one). Raises ``ValueError`` for an empty segment, a chunk
        larger than the cache's ``n_batch``, ids outside the vocabulary, a segment that does not fit the context or
        a ``logits_from`` outside ``ids``; :class:`LlamaCppError` when a decode fails.
        """
        chunk = chunk_size or cache.chunk_size
        self._check_segment(cache, ids, chunk)
        if not 0 <= logits_from < len(ids):
            raise ValueError(f"logits from token {logits_from} of a segment of {len(ids)}")
        pieces = []
        for start in range(0, len(ids), chunk):
            part = ids[start:start + chunk]
            last = start + chunk >= len(ids)
            outputs = ([start + i >= logits_from for i in range(len(part))] if all_logits
                       else [False] * (len(part) - 1) + [last])
            self._decode(cache, part, outputs)
            if any(outputs) and all_logits:
                pieces.append(self._logits(cache, sum(outputs)))
        if all_logits:
            return np.concatenate(pieces)
        return self._last_logits(cache)

    def decode_step(self, cache: LlamaCache, token: int) -> np.ndarray:
        """One token after the cache's positions; returns its float32 logits ``[vocab]``."""
        return self.prefill(cache, [int(token)], 1)

    def capture(self, cache: LlamaCache, start: int = 0) -> LlamaState:
        """The cache's sequence state with its token ids and positions. ``start`` must be 0: llama.cpp's sequence
        state holds every position, so a segment after a parent (a chained artifact) cannot be captured alone.
        Raises ``ValueError`` for another ``start`` or an empty cache, :class:`LlamaCppError` when llama.cpp
        writes fewer bytes than it sized."""
        if start != 0:
            raise ValueError(f"the llama.cpp engine captures whole sequences (start 0), not from position {start}")
        if not cache.n_past:
            raise ValueError("cannot capture an empty cache")
        lib = _lib()
        size = lib.llama_state_seq_get_size(cache.ctx, SEQ)
        buffer = np.empty(size, dtype=np.uint8)
        written = lib.llama_state_seq_get_data(cache.ctx, buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                               size, SEQ)
        if written != size:
            raise LlamaCppError(f"llama_state_seq_get_data wrote {written} bytes of {size}")
        return LlamaState(buffer.tobytes(), list(cache.token_ids), (0, cache.n_past))

    def restore(self, payload: LlamaState, cache: LlamaCache | None = None) -> LlamaCache:
        """Load ``payload`` into a fresh context (``cache`` must be ``None`` or empty). Returns the cache, holding
        the payload's tokens at its positions. Raises ``ValueError`` for a non-empty ``cache`` or a payload whose
        positions do not match its tokens, :class:`LlamaCppError` when llama.cpp refuses the state or restores
        other positions."""
        if cache is not None and cache.n_past:
            raise ValueError(f"a llama.cpp state restores into an empty cache, this one holds {cache.n_past} tokens")
        start, end = payload.positions
        if start != 0 or end != len(payload.token_ids):
            raise ValueError(f"state positions {start}..{end} do not match its {len(payload.token_ids)} tokens")
        cache = cache or self.new_cache()
        lib = _lib()
        data = np.frombuffer(payload.state, dtype=np.uint8)
        read = lib.llama_state_seq_set_data(cache.ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                            len(payload.state), SEQ)
        if read != len(payload.state):
            raise LlamaCppError(f"llama_state_seq_set_data read {read} bytes of {len(payload.state)}")
        top = lib.llama_memory_seq_pos_max(lib.llama_get_memory(cache.ctx), SEQ)
        if top != end - 1:
            raise LlamaCppError(f"the restored sequence ends at position {top}, its state says {end - 1}")
        cache.token_ids = list(payload.token_ids)
        return cache

    def shift_positions(self, cache: LlamaCache, delta: int) -> None:
        """Move every cached position by ``delta`` (llama.cpp re-rotates the keys by RoPE at the next decode), and
        every later token with them: the shifted-positions control only."""
        lib = _lib()
        lib.llama_memory_seq_add(lib.llama_get_memory(cache.ctx), SEQ, 0, -1, delta)
        cache.shift += delta

    @staticmethod
    def logits_sha256(logits: np.ndarray) -> str:
        """SHA-256 of the raw little-endian float32 bytes of ``logits`` (any shape, C order)."""
        return hashlib.sha256(np.ascontiguousarray(logits, dtype="<f4").tobytes()).hexdigest()

    def close(self) -> None:
        """Free the spare context and the model (idempotent); caches made from it must be closed first."""
        while self._spare:
            _lib().llama_free(self._spare.pop())
        if getattr(self, "model", None):
            _lib().llama_model_free(self.model)
            self.model = None

    def _check_segment(self, cache: LlamaCache, ids: list[int], chunk: int) -> None:
        if not ids:
            raise ValueError("cannot prefill an empty segment")
        if chunk < 1 or chunk > cache.chunk_size:
            raise ValueError(f"chunk of {chunk} tokens: must be 1..{cache.chunk_size} (the context's n_batch)")
        if cache.n_past + len(ids) > cache.n_ctx:  # cells, not positions: a shift needs no cells
            raise ValueError(f"{cache.n_past} cached + {len(ids)} new tokens exceed the context of {cache.n_ctx}")
        bad = [t for t in ids if not 0 <= int(t) < self.n_vocab]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the GGUF's vocabulary of {self.n_vocab}")

    def _decode(self, cache: LlamaCache, ids: list[int], outputs: list[bool]) -> None:
        """One ``llama_decode`` of ``ids`` at the next positions, with the given tokens marked as outputs."""
        lib = _lib()
        batch = lib.llama_batch_init(len(ids), 0, 1)
        try:
            batch.n_tokens = len(ids)
            for i, (token, out) in enumerate(zip(ids, outputs)):
                batch.token[i] = int(token)
                batch.pos[i] = cache.n_past + cache.shift + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = SEQ
                batch.logits[i] = out
            status = lib.llama_decode(cache.ctx, batch)
        finally:
            lib.llama_batch_free(batch)
        if status != 0:
            raise LlamaCppError(f"llama_decode returned {status} at position {cache.n_past} ({len(ids)} tokens)")
        cache.token_ids.extend(int(t) for t in ids)

    def _logits(self, cache: LlamaCache, rows: int) -> np.ndarray:
        pointer = _lib().llama_get_logits(cache.ctx)
        return np.ctypeslib.as_array(pointer, shape=(rows, self.n_vocab)).astype(np.float32, copy=True)

    def _last_logits(self, cache: LlamaCache) -> np.ndarray:
        pointer = _lib().llama_get_logits_ith(cache.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,)).astype(np.float32, copy=True)


def _check_options(n_ctx: int, chunk_size: int, threads: int | None, kv_type: str, flash_attn: bool) -> None:
    """Raise ``ValueError`` naming the first bad engine option."""
    if kv_type not in KV_TYPES:
        raise ValueError(f"KV cache type '{kv_type}' is not one of {', '.join(KV_TYPES)}")
    if kv_type != "f16" and not flash_attn:
        raise ValueError(f"a {kv_type} KV cache needs flash attention on (llama.cpp quantizes V only with it)")
    if chunk_size < 1:
        raise ValueError(f"chunk size must be a positive number of tokens, got {chunk_size}")
    if n_ctx < chunk_size:
        raise ValueError(f"context of {n_ctx} tokens is smaller than the chunk size {chunk_size}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be positive, got {threads}")


PINNED_LIBRARIES = ("llama-cpp-python", "numpy", "tokenizers", "transformers")  # the last two make the token ids


def build_capability(engine: LlamaCppEngine) -> str:
    """The pin's ``cpu_capability`` of ``engine``'s build: the native build's :func:`system_info` (the CPU features it
    was compiled for and found), the portable build's fixed instruction sets (``portable: SSE42 AVX AVX2 ...``)."""
    if not engine.build_identity:
        return system_info()
    return "portable: " + " ".join(portable_build.instruction_sets(engine.build_identity["cmake_args"]))


def pinned_config(engine: LlamaCppEngine, spec: str, tokenizer_sha256: str, layout=None):
    """The :class:`graftbench.engine.pin.PinnedConfig` of runs on ``engine`` for the model ``spec``: the GGUF file's
    SHA-256, graftbench's tokenizer digest, ``dtype`` ``gguf`` (the weights as stored), threads, the chunk size,
    the prompt layout (default: graftbench's), library versions, the machine, the build (``isa``: ``native`` or
    ``portable``; :func:`build_capability`), and :meth:`LlamaCppEngine.pin_fields` as ``engine`` (so its
    fingerprint differs from every torch pin's)."""
    from ...problems.prompts import PromptLayout, reasoning_delimiters
    from ..pin import PinnedConfig, library_versions

    return PinnedConfig(
        model=spec, weights_sha256=engine.weights_sha256, tokenizer_sha256=tokenizer_sha256, dtype="gguf",
        device="cpu", threads=engine.threads, attn_implementation=ENGINE_NAME, chunk_size=engine.chunk_size,
        layout=layout or PromptLayout(reasoning=reasoning_delimiters(spec)),
        libraries=library_versions(PINNED_LIBRARIES), cpu_capability=build_capability(engine),
        machine=platform.machine(), isa=engine.build, cache_class=f"{ENGINE_NAME} {engine.kv_type}",
        engine=engine.pin_fields(),
    )
