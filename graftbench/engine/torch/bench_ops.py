"""The torch engine's operations as ``graftbench bench`` times them (the :data:`graftbench.engine.base.BENCHMARK`
capability, reached through :func:`graftbench.engine.registry.benchmark_ops`): a chunked prefill into a cache, a
restore of an artifact read from the store, greedy and sampled decode, an artifact's bytes, and ``transformers``'
own ``generate``, each the call the benchmark measures and nothing around it; and the probe of the portable pin's
cost (:func:`portable_cost_probe`). The load probe imports the engine's loading code alone
(:func:`graftbench.engine.registry.benchmark_loader`).

``session`` is a :class:`graftbench.engine.torch.session.TorchSession`; ``ids`` are token ids; logits are the
float rows ``[positions, vocab]`` of :func:`graftbench.engine.torch.forward.prefill`; seconds from
``time.perf_counter``.
"""

from __future__ import annotations

import copy
import time
from typing import Callable

import torch

from . import forward, graft
from .sampling import sample_decode
from .session import TorchSession, open_session
from ..base import SamplingSettings


def new_cache(session: TorchSession):
    """An empty KV cache for the session's model."""
    return forward.new_cache(session.model)


def copy_cache(cache):
    """An independent copy of ``cache`` (another query on the same prefix)."""
    return copy.deepcopy(cache)


def prefill(session: TorchSession, cache, ids: list[int]) -> torch.Tensor:
    """Prefill ``ids`` into ``cache`` in the pinned chunk schedule; the logits of every position."""
    return forward.prefill(session.model, cache, ids, session.config.chunk_size)


def first_token(session: TorchSession, cache, query: list[int]) -> tuple[int, str]:
    """Prefill ``query`` into ``cache`` and take the argmax of its last logits: that token and the logits' SHA-256."""
    logits = prefill(session, cache, query)
    return int(torch.argmax(logits[-1]).item()), forward.logits_sha256(logits)


def restore(session: TorchSession, artifact, timing: dict | None = None):
    """A fresh cache rebuilt from ``artifact`` (what :meth:`graftbench.store.folder.Store.read` returned), at its own
    positions; ``timing`` receives ``copy_s`` on a GPU (:func:`graftbench.engine.torch.graft.restore`)."""
    return graft.restore(session.model, session.config, artifact, timing=timing)


def artifact_bytes(session: TorchSession, ids: list[int], meta: dict) -> bytes:
    """The artifact bytes of ``ids`` under the session's pin, with the header fields ``meta``."""
    return graft.build_artifact(session.model, session.config, ids, meta)[0]


def greedy_decode(session: TorchSession, cache, logits: torch.Tensor, tokens: int, eos_ids: set[int]):
    """Greedy decode of up to ``tokens`` tokens after ``logits``, stopping at ``eos_ids`` (empty: never): a
    :class:`graftbench.results.samples.Decoded` whose ``decode_s`` runs from the first token to the last."""
    return forward.greedy_decode(session.model, session.tokenizer, cache, logits, tokens, eos_ids)


def sampled_decode(session: TorchSession, cache, logits: torch.Tensor, tokens: int, sampling: SamplingSettings,
                   seeds: list[int]) -> list:
    """``len(seeds)`` samples of ``tokens`` tokens after ``logits``, decoded as one batch (no EOS stop): one
    :class:`graftbench.results.samples.Decoded` per seed."""
    return sample_decode(session.model, session.tokenizer, cache, logits, tokens, set(), sampling, seeds)


def cache_kv_bytes(cache) -> int:
    """Bytes of keys and values ``cache`` holds (every row)."""
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


def generate(session: TorchSession, prompt: list[int], new_tokens: int,
             timer: Callable[[Callable[[], object]], tuple[float, object]]) -> tuple[float, list[int]]:
    """``transformers``' own greedy ``generate`` of ``new_tokens`` tokens after ``prompt``, the call alone timed by
    ``timer`` (``(seconds, result)`` of a function): its seconds and the generated token ids."""
    input_ids = torch.tensor([prompt], device=session.model.device)
    kwargs = {"attention_mask": torch.ones_like(input_ids), "do_sample": False, "num_beams": 1,
              "max_new_tokens": new_tokens, "pad_token_id": session.tokenizer.eos_token_id or 0}
    with torch.inference_mode():
        seconds, out = timer(lambda: session.model.generate(input_ids, **kwargs))
    return seconds, out[0, len(prompt):].tolist()


def synchronize(session: TorchSession) -> None:
    """Wait for the device's queued work (a CUDA device); nothing on the CPU."""
    if session.device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(session.device))


def intra_op_threads() -> int:
    """torch's intra-op thread count in this process."""
    return torch.get_num_threads()


def fresh_buffer(n_bytes: int) -> memoryview:
    """``n_bytes`` of newly allocated memory, as a restore allocates the cache it reads into (a ``torch.empty``)."""
    return memoryview(torch.empty(n_bytes, dtype=torch.uint8).numpy())


def open_for_benchmark(model: str, dtype: str, chunk_size: int | None = None, threads: int | None = None,
                       kv_pool_tokens: int = 0) -> TorchSession:
    """A session on the CPU as a benchmark's fresh-process probe opens one (``kv_pool_tokens`` > 0: a KV pool
    reserved at open; ``None``: the default chunk size and threads)."""
    extra = {"chunk_size": chunk_size} if chunk_size is not None else {}
    return open_session(model, dtype=dtype, threads=threads, kv_pool_tokens=kv_pool_tokens, **extra)


def portable_cost_probe(model: str, decode_tokens: int, threads: int,
                        prompt_ids: Callable[[TorchSession], list[int]]) -> dict:
    """One probe of :mod:`graftbench.bench.portable_cost` in this process's instruction-set pin (``GRAFTBENCH_ISA``):
    ``model`` in float32 on ``threads`` threads, ``prompt_ids(session)`` prefilled (tokens/s) and ``decode_tokens``
    greedy tokens after it (tokens/s, one forward a token); no graft row (``graft_plus_one_s`` ``None``)."""
    session = open_session(model, dtype="float32", threads=threads)
    ids = prompt_ids(session)
    cache = new_cache(session)
    started = time.perf_counter()
    logits = prefill(session, cache, ids)
    prefill_s = time.perf_counter() - started
    decoded = greedy_decode(session, cache, logits, decode_tokens, set())
    return {"pin": session.config.isa, "cpu_capability": session.config.cpu_capability, "prompt_tokens": len(ids),
            "prefill_tok_per_s": len(ids) / prefill_s,
            "decode_tok_per_s": (len(decoded.token_ids) - 1) / decoded.decode_s, "graft_plus_one_s": None}
