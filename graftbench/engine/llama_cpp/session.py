"""A GGUF model on the llama.cpp engine, as solve, eval and deposit use it: the run-level operations of
:class:`graftbench.engine.torch.session.TorchSession` (the torch engine's), on :class:`graftbench.engine.llama_cpp.engine.LlamaCppEngine`.

Invariants:

- prompts are graftbench's token ids (:class:`graftbench.engine.prompt_ids.PromptIds`, graftbench's tokenizer of the
  model), fed to llama.cpp as ids; every prefill runs in batches of the pinned chunk size from its segment's first
  token, so a graft (a state restored, then the query) and a fresh recompute (the example's ids, then the query)
  cut the same batches: what ``check-exact --engine llama.cpp`` certifies;
- an artifact is a whole sequence (positions ``0..n``, no parent), written and read through the store like a torch
  artifact and restored only under the pin it was written with (:func:`graftbench.engine.llama_cpp.codec.check_pin`);
- decoding is graftbench's own token choice on the float32 logits llama.cpp returns
  (:mod:`graftbench.engine.llama_cpp.decode`); N samples of one problem decode together: the prompt's state put into
  N sequences of one context, one batch per step (:mod:`graftbench.engine.llama_cpp.fanout`), each sample's logits
  byte-equal to its decode alone (non-unified streams).

Needs llama-cpp-python (the ``llama`` extra); imports no torch until a sampled token is drawn.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar

from . import decode as llama_decode
from ..base import Grafted
from .codec import check_pin, encode_llama_artifact
from .engine import DEFAULT_N_CTX, LlamaCache, LlamaCppEngine, LlamaState, pinned_config
from .exactness import deposit_state
from . import CAPABILITIES, NAME
from ..pin import PinnedConfig
from ..prompt_ids import PromptIds


@dataclass
class LlamaSession(PromptIds):
    """The llama.cpp engine of a model, graftbench's tokenizer of it, the pin of runs on it and its EOS ids."""

    engine: LlamaCppEngine
    tokenizer: object
    config: PinnedConfig
    eos_ids: set[int] = field(default_factory=set)
    read_buffer: bytearray = field(default_factory=bytearray, repr=False)  # a graft's file is read into it
    engine_name: ClassVar[str] = NAME
    capabilities: ClassVar[frozenset[str]] = CAPABILITIES

    @property
    def context_window(self) -> int:
        """Tokens a cache (one llama.cpp context) holds: the pinned ``n_ctx``."""
        return self.engine.n_ctx

    def prefill_prompt(self, ids: list[int]):
        """A fresh cache holding ``ids``; returns ``(cache, logits)``, the last position's float32 logits
        ``[vocab]``. Raises ``ValueError`` for no ids or ids that do not fit the context."""
        cache = self.engine.new_cache()
        return cache, self.engine.prefill(cache, ids)

    def prefill_after(self, cache: LlamaCache, ids: list[int]):
        """Append ``ids`` (a graft's query) to ``cache``; the last position's logits ``[vocab]``."""
        return self.engine.prefill(cache, ids)

    def graft(self, store, artifact_id: str, room: int = 0, timing: dict | None = None) -> Grafted:
        """Read the state ``artifact_id`` from ``store`` (:meth:`graftbench.store.folder.Store.read_state`: size,
        the file's XXH3-128 indexed at deposit, layout and header checked; read into the session's buffer), check
        its pin, and restore it into an empty context. The empty context (a closed one with its memory cleared and
        zeroed, else a fresh one: :meth:`graftbench.engine.llama_cpp.engine.LlamaCppEngine.cleared_cache`) is made on a
        second thread while the file is read and hashed; nothing is restored before the hash and the pin check
        pass. ``room`` (tokens: the query and the decode budget) must fit after it.

        ``timing`` (when given) gets the read's ``read_s``, ``integrity_s`` and ``parse_s``, then ``checks_s`` (the
        pin), ``clear_s`` (the empty context, on the second thread, beside the read) and ``rebuild_s`` (waiting for
        that context, then ``llama_state_seq_set_data``), in seconds. Raises
        :class:`graftbench.store.codec.ArtifactError` naming the refused check (``config`` for another pin, no
        room, or a state longer than a sliding-window model's window, ``read`` when llama.cpp refuses the state or
        cannot make a context); on any failure the empty context goes back to the engine."""
        from ...store.codec import ArtifactError
        from .engine import LlamaCppError

        timing = {} if timing is None else timing
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="graftbench-clear") as beside:
            emptied = beside.submit(self._timed_empty_cache, timing)
            try:
                header, token_ids, state = store.read_state(artifact_id, timing=timing, buffer=self.read_buffer)
                checked = time.perf_counter()
                self._check_graft(artifact_id, header, len(token_ids), room)
                rebuilt = time.perf_counter()
                timing["checks_s"] = rebuilt - checked
                cache = emptied.result()
            except LlamaCppError as exc:  # no empty context could be made: nothing to hand back
                raise ArtifactError(artifact_id, "read", str(exc)) from exc
            except BaseException:
                _close_when_made(emptied)
                raise
        try:
            cache = self.engine.restore(LlamaState(state, token_ids, (0, len(token_ids))), cache)
        except BaseException as exc:
            cache.close()
            if isinstance(exc, LlamaCppError):
                raise ArtifactError(artifact_id, "read", str(exc)) from exc
            raise
        timing["rebuild_s"] = time.perf_counter() - rebuilt
        return Grafted(cache, [header], [token_ids])

    def _timed_empty_cache(self, timing: dict) -> LlamaCache:
        started = time.perf_counter()
        cache = self.engine.cleared_cache()
        timing["clear_s"] = time.perf_counter() - started
        return cache

    def _check_graft(self, artifact_id: str, header: dict, tokens: int, room: int) -> None:
        """The state's pin, the sliding window and the room after it. Raises ``ArtifactError`` (``config``)."""
        from ...store.codec import ArtifactError

        check_pin(artifact_id, header, self.config)
        window = self.engine.n_swa
        if window and tokens > window:  # certified only within the window (docs/llama-cpp.md)
            raise ArtifactError(artifact_id, "config", f"{tokens} tokens exceed the model's "
                                                       f"{window}-token sliding window: a restore past it is not "
                                                       "byte-exact on llama.cpp")
        if tokens + room > self.engine.n_ctx:
            raise ArtifactError(artifact_id, "config", f"{tokens} tokens and {room} more do not fit the "
                                                       f"context of {self.engine.n_ctx}")

    def prefill_chain(self, segments: list[list[int]], query: list[int]):
        """A fresh cache with each segment then ``query`` prefilled (the pinned chunk schedule from each one's first
        token): ``(cache, the query's last logits [vocab])``."""
        cache = self.engine.new_cache()
        for ids in segments:
            self.engine.prefill(cache, ids)
        return cache, self.engine.prefill(cache, query)

    def recompute(self, segments: list[list[int]], query: list[int]):
        """The query's last logits ``[vocab]`` from a fresh prefill of ``segments`` and ``query``: the independent
        reference a graft is certified against (shares no state with a grafted cache)."""
        cache, logits = self.prefill_chain(segments, query)
        cache.close()
        return logits

    def logits_sha256(self, logits) -> str:
        """SHA-256 of the logits' raw little-endian float32 bytes."""
        return self.engine.logits_sha256(logits)

    def decode(self, cache: LlamaCache, logits, budget: int, sampling, seeds: list[int] | None, stop,
               started: float) -> tuple:
        """Decode from ``logits`` (the prompt's last, ``[vocab]``) on ``cache``: greedy when ``seeds`` is ``None``,
        else one sample per seed with ``sampling`` (:class:`graftbench.engine.base.SamplingSettings`). The budget
        (tokens) is cut to the room left in the context. Two samples or more decode together: the prompt's state is
        captured once and put into one sequence per sample of a new context
        (:func:`graftbench.engine.llama_cpp.fanout.fan_out`), then one batch per step holds a token of every sample
        still going (:func:`graftbench.engine.llama_cpp.decode.decode_samples`); ``cache`` is left as it was. A
        sample's ``first_token_s`` counts the prompt's time, the fan-out and its first token. Returns one
        :class:`graftbench.engine.torch.forward.Decoded` per sample."""
        from .fanout import fan_out

        budget = max(0, min(budget, cache.n_ctx - cache.n_past))
        if seeds is None or len(seeds) == 1:
            seed = None if seeds is None else seeds[0]
            return (llama_decode.decode(self.engine, self.tokenizer, cache, logits, budget, self.eos_ids, stop,
                                        settings=None if seeds is None else sampling, seed=seed, started=started),)
        sequences = fan_out(self.engine, self.engine.capture(cache), len(seeds), budget)
        try:
            return tuple(llama_decode.decode_samples(self.tokenizer, sequences, logits, budget, self.eos_ids, stop,
                                                     sampling, seeds, started))
        finally:
            sequences.close()

    def build_artifact(self, ids: list[int], meta: dict) -> bytes:
        """Prefill ``ids`` in a fresh context with the pinned chunk schedule, capture the sequence state and encode
        it as an artifact with the header fields ``meta`` (:func:`graftbench.engine.llama_cpp.codec.encode_llama_artifact`)."""
        return encode_llama_artifact(self.config, deposit_state(self, ids), meta)

    def exactness(self):
        """check-exact's deposit, graft, fresh prefill and controls on this session
        (:class:`graftbench.engine.llama_cpp.exactness.LlamaExactness`)."""
        from .exactness import LlamaExactness

        return LlamaExactness(self)

    def layer_trace(self, artifact: list[int], query: list[int]) -> list[dict]:
        """The steps of one (artifact, query) pair under this session's pin
        (:func:`graftbench.engine.llama_cpp.layer_trace.trace_pair`: each ggml op's output hashes, each layer's K
        and V after the artifact, the query's logits). Raises ``ValueError`` for an empty artifact or query."""
        from .layer_trace import trace_pair

        return trace_pair(self.engine, artifact, query)

    def describe(self, model: str) -> str:
        """The line naming the loaded model: the llama.cpp build, KV cache type, flash attention, threads, pin."""
        return (f"model {model} on llama.cpp {self.config.engine['llama_cpp_python']} · KV {self.engine.kv_type} · "
                f"flash attention {'on' if self.engine.flash_attn else 'off'} · {self.engine.threads} threads · "
                f"config {self.config.fingerprint[:12]}")


def open_llama_session(spec: str, chunk_size: int = 256, threads: int | None = None, kv_type: str = "f16",
                       flash_attn: bool = False, n_ctx: int = DEFAULT_N_CTX) -> LlamaSession:
    """Load the GGUF model ``spec`` (alias or ``.gguf`` path) on llama.cpp with graftbench's tokenizer and pin it.

    Raises :class:`graftbench.engine.models.ModelError` for a spec that is not a GGUF model, ``ValueError`` for a bad
    engine option and :class:`graftbench.engine.llama_cpp.engine.LlamaCppError` when llama.cpp cannot load it.
    """
    from ..models import load_gguf_tokenizer

    resolved, tokenizer, digest = load_gguf_tokenizer(spec)
    engine = LlamaCppEngine(resolved.path, n_ctx=n_ctx, chunk_size=chunk_size, threads=threads, kv_type=kv_type,
                            flash_attn=flash_attn, tokenizer=tokenizer, weights_sha256=resolved.sha256)
    session = LlamaSession(engine, tokenizer, pinned_config(engine, spec, digest))
    session.eos_ids = llama_decode.eos_ids_of(engine, tokenizer)
    return session


def _close_when_made(emptied: Future) -> None:
    """Hand back the empty context made beside a graft that failed before its restore. A failure to make it is
    dropped: the graft's own error is the one raised."""
    try:
        emptied.result().close()
    except Exception:  # the read's or the check's error propagates instead
        pass
