"""Sampled decoding: N samples of one problem decoded as one batch after one shared prefill or graft.

Each sample draws from its own ``torch.Generator`` seeded by :func:`graftbench.util.seeds.sample_seed` (run seed,
problem id, sample index), so a resumed run draws the same tokens as an uninterrupted one, and a sample's tokens do not
depend on which other problems the run holds. Temperature and nucleus (top-p) sampling follow Holtzman et al., "The
Curious Case of Neural Text Degeneration" (ICLR 2020): keep the smallest set of most likely tokens whose probability
reaches ``top_p``, renormalize, draw.

The draw is made on the CPU, in float32, whatever device computed the logits: each step's logits are copied to the
host as they are (a bfloat16 or float16 row is copied in its own dtype and widened there, which is exact), and the
temperature, the nucleus and the draw all run on the copy (:func:`host_float32`). So the tokens drawn depend only on
the seeds and the logits' values, never on the device's kernels for division, ``exp``, ``topk`` or ``cumsum``, and a
CPU ``torch.Generator`` draws for a CUDA model (torch refuses a CPU generator for CUDA tensors). On the CPU the copy is
no copy, and widening before or after it gives the same float32 values, so the tokens a CPU run draws are the ones it
drew before the draw moved to the host.
"""

from __future__ import annotations

import re
import time

import torch

from ...results.samples import Decoded
from ..base import SamplingSettings  # the draw's settings, the same for every engine
from .forward import forward_batch, stop_reached
from .kv_cache import reserve


NUCLEUS_CANDIDATES = 256  # most likely tokens looked at first; the nucleus rarely needs more at top-p 0.95


def host_float32(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` (any shape, any float dtype, any device) as the draw reads them: on the CPU, in float32.

    Copied to the host first, in the dtype the device computed (no arithmetic on the device), then widened on the
    host: bfloat16 and float16 widen to float32 exactly, so the result depends only on the logits' values. Temperature
    and the nucleus come after this (:func:`nucleus`): applied on the device they would run the device's kernels,
    whose last bits may differ from the CPU's, and a draw near a boundary of the cumulative distribution would then
    depend on the device. A CPU float32 tensor is returned as it is (no copy).
    """
    return logits.detach().to(device="cpu").float()


def nucleus(logits: torch.Tensor, settings: SamplingSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-p nucleus of ``logits`` (``[vocab]``) at ``settings.temperature``: ``(token_ids, probs)``, most likely
    first (every token in vocabulary order when ``top_p`` is 1), with each token's probability under the whole tempered distribution (float32; not renormalized).

    The smallest prefix of most likely tokens whose probability reaches ``top_p`` (the first token always kept), as
    a full sort finds it, but from ``torch.topk`` of :data:`NUCLEUS_CANDIDATES` tokens, widened 4× at a time when
    they do not reach ``top_p``: on a 262,144-token vocabulary a full sort costs tens of milliseconds a token.
    ``logits`` is read through :func:`host_float32`, so the nucleus is computed on the CPU in float32.
    """
    scaled = host_float32(logits) / settings.temperature
    if settings.top_p >= 1.0:
        return torch.arange(scaled.numel()), torch.softmax(scaled, dim=-1)
    log_total = torch.logsumexp(scaled, dim=-1)
    k = min(NUCLEUS_CANDIDATES, scaled.numel())
    while True:
        top, ids = torch.topk(scaled, k)
        probs = torch.exp(top - log_total)
        before = torch.cumsum(probs, dim=-1) - probs
        if k == scaled.numel() or before[-1] + probs[-1] >= settings.top_p:
            kept = int((before < settings.top_p).sum())
            return ids[:kept], probs[:kept]
        k = min(4 * k, scaled.numel())


def next_token(logits: torch.Tensor, settings: SamplingSettings, generator: torch.Generator) -> int:
    """Draw one token id from ``logits`` (``[vocab]``, any float dtype on any device; read on the CPU in float32,
    :func:`host_float32`) at ``settings.temperature`` within the ``settings.top_p`` nucleus (:func:`nucleus`,
    renormalized), with ``generator`` (a CPU generator)."""
    ids, probs = nucleus(logits, settings)
    if len(ids) == 1:
        return int(ids[0])
    return int(ids[torch.multinomial(probs, 1, generator=generator)].item())


def sample_decode(model, tokenizer, cache, first_logits: torch.Tensor, max_new_tokens: int, eos_ids: set[int],
                  settings: SamplingSettings, seeds: list[int], stop: str | re.Pattern | None = None,
                  started: float | None = None) -> list[Decoded]:
    """Decode ``len(seeds)`` samples from one prefix as a batch: ``cache`` (batch 1, holding the prompt or the
    graft and query) is repeated to one row per sample, each row draws its first token from ``first_logits``
    (``[1, vocab]``) and then from its own logits, each step's logits copied to the host and drawn from there in
    float32 (:func:`host_float32`: the tokens do not depend on the device). A row that ends (EOS, ``stop``, budget) leaves the batch.

    Returns one :class:`~graftbench.results.samples.Decoded` per seed, in order; ``first_token_s`` is the same for all
    (the shared prefix and the first draw), ``decode_s`` is the batch's decode time. ``cache`` is consumed.
    """
    started = time.perf_counter() if started is None else started
    n = len(seeds)
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    tokens: list[list[int]] = [[] for _ in range(n)]
    reasons = ["budget"] * n
    active = list(range(n))
    logits = host_float32(first_logits).expand(n, -1)
    decode_start = time.perf_counter()
    first_token_s = 0.0
    reserve(cache, cache.get_seq_length() + max_new_tokens)
    if n > 1:
        cache.batch_repeat_interleave(n)
    while active:
        still = []
        for row, i in enumerate(active):
            token = next_token(logits[row], settings, generators[i])
            tokens[i].append(token)
            if token in eos_ids:
                reasons[i] = "eos"
            elif stop_reached(tokenizer, tokens[i], stop):
                reasons[i] = "stop"
            elif len(tokens[i]) < max_new_tokens:
                still.append(row)
        if not first_token_s:
            first_token_s = time.perf_counter() - started
        if len(still) < len(active) and still:
            cache.batch_select_indices(torch.tensor(still, device=cache.layers[0].keys.device))
        active = [active[row] for row in still]
        if active:
            # one copy to the host per step, for every row (the draw reads CPU float32: host_float32)
            logits = host_float32(forward_batch(model, cache, [tokens[i][-1] for i in active]))
    decode_s = time.perf_counter() - decode_start
    return [Decoded(token_ids=t, text=tokenizer.decode(t[:-1] if r == "eos" else t, skip_special_tokens=True),
                    finish_reason=r, first_token_s=first_token_s, decode_s=decode_s)
            for t, r in zip(tokens, reasons)]
