"""Decoding on the llama.cpp engine's logits: greedy (argmax), or graftbench's seeded nucleus sampling.

The token choice is graftbench's own, made on the float32 logits llama.cpp returns (:mod:`graftbench.engine.torch.sampling`
for a sampled token), never llama.cpp's sampler; the stops and the result are those of the torch engine's decode
(:class:`graftbench.engine.torch.forward.Decoded`).
"""

from __future__ import annotations

import re

import numpy as np

from ..torch.forward import Decoded, run_decode
from .engine import LlamaCache, LlamaCppEngine


def eos_ids_of(engine: LlamaCppEngine, tokenizer) -> set[int]:
    """Token ids that end a generation: the tokenizer's EOS, the GGUF's EOS and end-of-turn tokens, and
    ``<|im_end|>`` where the vocabulary has it."""
    from .engine import _lib

    lib, ids = _lib(), set()
    for token in (lib.llama_vocab_eos(engine.vocab), lib.llama_vocab_eot(engine.vocab)):
        if token >= 0:
            ids.add(int(token))
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        ids.add(tokenizer.eos_token_id)
    if "<|im_end|>" in tokenizer.get_vocab():
        ids.add(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    return ids


def _chooser(settings, seed: int | None):
    """argmax, or a draw with ``settings`` from a generator seeded with ``seed`` (graftbench's sampling)."""
    if settings is None:
        return lambda logits: int(np.argmax(logits))
    import torch

    from ..torch.sampling import next_token

    generator = torch.Generator().manual_seed(int(seed or 0))
    return lambda logits: next_token(torch.from_numpy(logits), settings, generator)


def decode(engine: LlamaCppEngine, tokenizer, cache: LlamaCache, first_logits: np.ndarray, max_new_tokens: int,
           eos_ids: set[int], stop: str | re.Pattern | None = None, settings=None, seed: int | None = None,
           started: float | None = None) -> Decoded:
    """Decode from ``first_logits`` (``[vocab]``, the logits after the prompt) one token at a time on ``cache``:
    greedy when ``settings`` is ``None``, else drawn with :class:`graftbench.engine.torch.sampling.SamplingSettings`
    from a generator seeded with ``seed``. Stops at an EOS token (``eos``), when ``stop`` is reached (``stop``), or
    after ``max_new_tokens`` tokens (``budget``); ``started`` is the ``perf_counter`` time the problem started.
    Raises ``ValueError`` when the tokens would not fit the cache's context."""
    if cache.n_past + max_new_tokens > cache.n_ctx:
        raise ValueError(f"{cache.n_past} cached + {max_new_tokens} new tokens exceed the context of {cache.n_ctx}")
    return run_decode(first_logits, _chooser(settings, seed), lambda token: engine.decode_step(cache, token),
                      tokenizer, max_new_tokens, eos_ids, stop, started)
