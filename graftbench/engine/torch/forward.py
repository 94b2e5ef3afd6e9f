"""Prefill in a fixed chunk schedule, greedy decode under a budget, and logits hashing.

Every forward here runs under ``torch.inference_mode`` on graftbench's KV cache (:mod:`graftbench.engine.torch.kv_cache`:
preallocated full-attention layers, ``transformers``' sliding-window layers). The chunk schedule
is the one thing besides the weights that fixes the matmul shapes, so it is explicit: a segment of n tokens is
prefilled in forwards of ``chunk_size`` tokens from the segment's own first token (boundaries restart at each
segment: artifact, chained artifact, query).
"""

from __future__ import annotations

import inspect
import re
import time

import torch
from transformers import DynamicCache

from ...results.samples import Decoded
from ...store.tensor_hashing import tensors_sha256
from .kv_cache import new_cache, reserve

__all__ = ["new_cache", "reserve", "chunk_bounds", "forward", "forward_batch", "prefill", "greedy_decode",
           "pin_threads"]

# The intra-op thread count a model's pin recorded (:attr:`graftbench.engine.pin.PinnedConfig.threads`), held on
# the model: a matmul's reduction split follows the thread count, so the bytes of a forward do too.
PINNED_THREADS = "graftbench_pinned_threads"
# The keyword its forward takes the KV cache under (:func:`cache_keyword`), found once per model and held on it.
CACHE_KEYWORD = "graftbench_cache_keyword"


def model_device(model) -> torch.device:
    """The device ``model``'s weights live on (the CPU for a model that does not say)."""
    return getattr(model, "device", None) or torch.device("cpu")


def chunk_bounds(n_tokens: int, chunk_size: int) -> list[tuple[int, int]]:
    """Half-open ``(start, end)`` token ranges of a segment of ``n_tokens`` prefilled in ``chunk_size`` chunks.

    >>> chunk_bounds(5, 2)
    [(0, 2), (2, 4), (4, 5)]
    """
    if chunk_size < 1:
        raise ValueError(f"chunk size must be positive, got {chunk_size}")
    return [(s, min(s + chunk_size, n_tokens)) for s in range(0, n_tokens, chunk_size)]


def pin_threads(model, threads: int) -> None:
    """Every later forward of ``model`` runs at ``threads`` intra-op threads, the count its pin recorded, whatever
    another session or caller set in between (one process may hold sessions pinned at different counts)."""
    setattr(model, PINNED_THREADS, int(threads))


def cache_keyword(model) -> str:
    """The name under which ``model``'s forward takes the KV cache: ``cache`` in the transformers releases that
    renamed it, ``past_key_values`` in the earlier 5.x ones (5.17 among them, the GPU host's). Any other keyword
    would vanish into the forward's ``**kwargs`` and the model would run without the cache, silently.

    Read from the forward's signature the first time and held on ``model`` (:data:`CACHE_KEYWORD`): a signature
    costs about 50 µs, a decode step's share worth keeping off every step.

    Raises ``TypeError`` when the forward takes neither.
    """
    keyword = getattr(model, CACHE_KEYWORD, None)
    if keyword is None:
        keyword = _cache_keyword_of(type(model))
        setattr(model, CACHE_KEYWORD, keyword)
    return keyword


def _cache_keyword_of(model_class: type) -> str:
    parameters = inspect.signature(model_class.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in parameters:
            return name
    raise TypeError(f"{model_class.__name__}.forward takes neither 'cache' nor 'past_key_values'")


def _hold_threads(model) -> None:
    """Set torch's intra-op threads to ``model``'s pinned count where it differs (a model never pinned: as is)."""
    threads = getattr(model, PINNED_THREADS, None)
    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@torch.inference_mode()
def forward(model, cache: DynamicCache, ids: list[int], all_logits: bool = False, offset: int = 0) -> torch.Tensor:
    """One forward of ``ids`` after what ``cache`` holds; the cache grows in place.

    Returns logits of shape ``[len(ids), vocab]`` when ``all_logits`` else ``[1, vocab]`` (last position),
    in the model's dtype. Positions continue from ``cache.get_seq_length()``; a non-zero ``offset`` adds that
    many positions for RoPE only (the shifted-graft control), the attention mask still follows the cache.
    """
    _hold_threads(model)
    device = model_device(model)
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    kwargs = {}
    if offset:
        start = cache.get_seq_length() + offset
        kwargs["position_ids"] = torch.arange(start, start + len(ids), device=device).unsqueeze(0)
    kwargs[cache_keyword(model)] = cache
    out = model(input_ids=input_ids, use_cache=True, logits_to_keep=0 if all_logits else 1, **kwargs)
    return out.logits[0]


@torch.inference_mode()
def forward_batch(model, cache: DynamicCache, last_tokens: list[int]) -> torch.Tensor:
    """One decode step for a batch: row i of ``cache`` gets ``last_tokens[i]``. Every row holds the same number of
    positions (no padding), so positions follow the cache. Returns logits ``[len(last_tokens), vocab]``."""
    _hold_threads(model)
    input_ids = torch.tensor(last_tokens, dtype=torch.long, device=model_device(model)).unsqueeze(1)
    out = model(input_ids=input_ids, use_cache=True, logits_to_keep=1, **{cache_keyword(model): cache})
    return out.logits[:, -1]


def stop_reached(tokenizer, tokens: list[int], stop: str | re.Pattern | None) -> bool:
    """Whether the decoded ``tokens`` end the generation: a string ``stop`` occurring in the text after its first
    non-space character (the answer layout's newline), or a compiled pattern found in the text (the solve layout's
    completed final-answer line)."""
    if not stop:
        return False
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    if isinstance(stop, str):
        return stop in text.lstrip()
    return stop.search(text) is not None


def finish_reason(tokenizer, tokens: list[int], eos_ids: set[int], stop: str | re.Pattern | None) -> str | None:
    """Why a decode ends after ``tokens``: ``eos`` when the last one is an EOS id, ``stop`` when ``stop`` is
    reached (:func:`stop_reached`), else ``None`` (go on)."""
    if tokens[-1] in eos_ids:
        return "eos"
    if stop_reached(tokenizer, tokens, stop):
        return "stop"
    return None


def prefill(model, cache: DynamicCache, ids: list[int], chunk_size: int, all_logits: bool = False,
            offset: int = 0) -> torch.Tensor:
    """Prefill one segment in the pinned chunk schedule.

    Returns the last position's logits ``[1, vocab]``, or with ``all_logits`` every position's ``[len(ids), vocab]``.
    Raises ``ValueError`` for an empty segment.
    """
    if not ids:
        raise ValueError("cannot prefill an empty segment")
    reserve(cache, cache.get_seq_length() + len(ids))
    pieces = [forward(model, cache, ids[start:end], all_logits=all_logits, offset=offset)
              for start, end in chunk_bounds(len(ids), chunk_size)]
    return torch.cat(pieces) if all_logits else pieces[-1]


def logits_sha256(logits: torch.Tensor) -> str:
    """SHA-256 of the raw bytes of ``logits`` (any shape) in their own dtype (float32: 4 bytes per value,
    bfloat16: 2; :func:`graftbench.store.tensor_hashing.tensor_bytes`)."""
    return tensors_sha256([logits])


def greedy_decode(
    model,
    tokenizer,
    cache: DynamicCache,
    first_logits: torch.Tensor,
    max_new_tokens: int,
    eos_ids: set[int],
    stop: str | re.Pattern | None = None,
    started: float | None = None,
) -> Decoded:
    """Greedy (argmax) decode from ``first_logits`` (``[1, vocab]``, the logits after the prompt).

    Stops at an EOS token (``eos``), when ``stop`` is reached (``stop``, see :func:`stop_reached`), or after ``max_new_tokens`` tokens (``budget``). ``started`` is the ``perf_counter`` time the
    problem started, for time to first token.
    """
    started = time.perf_counter() if started is None else started
    reserve(cache, cache.get_seq_length() + max_new_tokens)
    return run_decode(first_logits, lambda logits: int(torch.argmax(logits[-1]).item()),
                      lambda token: forward(model, cache, [token]), tokenizer, max_new_tokens, eos_ids, stop, started)


def run_decode(first_logits, choose, step, tokenizer, max_new_tokens: int, eos_ids: set[int],
               stop: str | re.Pattern | None = None, started: float | None = None) -> Decoded:
    """The decode loop of every engine: ``choose(logits)`` picks each token id from the current logits (starting
    from ``first_logits``), ``step(token)`` feeds it and returns the next logits. Stops as :func:`greedy_decode`
    says; ``started`` is the ``perf_counter`` time the problem started, for time to first token."""
    started = time.perf_counter() if started is None else started
    tokens: list[int] = []
    logits = first_logits
    first_token_s = 0.0
    decode_start = time.perf_counter()
    reason = "budget"
    while len(tokens) < max_new_tokens:
        tokens.append(choose(logits))
        if len(tokens) == 1:
            first_token_s = time.perf_counter() - started
        reason = finish_reason(tokenizer, tokens, eos_ids, stop) or reason
        if reason != "budget":
            break
        if len(tokens) < max_new_tokens:
            logits = step(tokens[-1])
    text_ids = tokens[:-1] if reason == "eos" else tokens
    return Decoded(
        token_ids=tokens,
        text=tokenizer.decode(text_ids, skip_special_tokens=True),
        finish_reason=reason,
        first_token_s=first_token_s,
        decode_s=time.perf_counter() - decode_start,
    )


def eos_token_ids(model, tokenizer) -> set[int]:
    """Token ids that end a generation: the tokenizer's EOS plus the generation config's (chat end tokens)."""
    ids = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    end_turn = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
    if end_turn is not None:
        ids.add(end_turn)
    return ids
