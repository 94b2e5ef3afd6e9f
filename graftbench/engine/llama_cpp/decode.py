"""Decoding on the llama.cpp engine's logits: greedy (argmax), or graftbench's seeded nucleus sampling.

The token choice is graftbench's own, made on the float32 logits llama.cpp returns (:mod:`graftbench.engine.torch.sampling`
for a sampled token), never llama.cpp's sampler; the stops and the result are those of the torch engine's decode
(:class:`graftbench.engine.torch.forward.Decoded`). N samples of one prompt decode together
(:func:`decode_samples`), one batch per step.
"""

from __future__ import annotations

import re
import time

import numpy as np

from ..torch.forward import Decoded, finish_reason, run_decode
from .engine import LlamaCache, LlamaCppEngine
from .fanout import Sequences


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


def decode_samples(tokenizer, sequences: Sequences, first_logits: np.ndarray, max_new_tokens: int,
                   eos_ids: set[int], stop: str | re.Pattern | None, settings, seeds: list[int],
                   started: float | None = None) -> list[Decoded]:
    """Decode one sample per seed together on ``sequences`` (:class:`graftbench.engine.llama_cpp.fanout.Sequences`,
    one sequence per seed, each holding the prompt): sample i draws its first token from ``first_logits``
    (``[vocab]``, the prompt's last, or ``[seeds, vocab]``, a row per sample) and each later one from its own
    sequence's logits, with :class:`graftbench.engine.base.SamplingSettings` ``settings`` and a generator seeded
    with ``seeds[i]`` (greedy when ``settings`` is ``None``). Each step is one ``llama_decode`` holding the last token of every sample
    still going; a sample stops on its own at an EOS token (``eos``), at ``stop`` (``stop``) or after
    ``max_new_tokens`` tokens (``budget``), and leaves the batch.

    Returns one :class:`graftbench.engine.torch.forward.Decoded` per seed, in order: ``first_token_s`` from
    ``started`` (``perf_counter`` seconds) to the sample's first token, ``decode_s`` from the first draw to its
    last token. Raises ``ValueError`` for a seed count other than the sequence count or a budget past a stream."""
    if len(seeds) != sequences.count:
        raise ValueError(f"{len(seeds)} seeds for {sequences.count} sequences")
    if sequences.lengths and max(sequences.lengths) + max_new_tokens > sequences.cells:
        raise ValueError(f"{max(sequences.lengths)} cached + {max_new_tokens} new tokens exceed a stream of "
                         f"{sequences.cells} cells")
    started = time.perf_counter() if started is None else started
    choosers = [_chooser(settings, seed) for seed in seeds]
    tokens: list[list[int]] = [[] for _ in seeds]
    reasons, first_s, decode_s = ["budget"] * len(seeds), [0.0] * len(seeds), [0.0] * len(seeds)
    rows = first_logits if np.ndim(first_logits) == 2 else [first_logits] * len(seeds)
    logits = dict(enumerate(rows)) if max_new_tokens > 0 else {}
    decode_start = time.perf_counter()
    while logits:
        going = []
        for i, row in logits.items():
            tokens[i].append(choosers[i](row))
            if len(tokens[i]) == 1:
                first_s[i] = time.perf_counter() - started
            reasons[i] = finish_reason(tokenizer, tokens[i], eos_ids, stop) or "budget"
            if reasons[i] == "budget" and len(tokens[i]) < max_new_tokens:
                going.append(i)
            else:
                decode_s[i] = time.perf_counter() - decode_start
        logits = dict(zip(going, sequences.step({i: tokens[i][-1] for i in going}) if going else []))
    return [Decoded(token_ids=t, text=tokenizer.decode(t[:-1] if r == "eos" else t, skip_special_tokens=True),
                    finish_reason=r, first_token_s=f, decode_s=d)
            for t, r, f, d in zip(tokens, reasons, first_s, decode_s)]
