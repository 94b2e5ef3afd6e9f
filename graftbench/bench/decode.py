"""Greedy decode throughput: graftbench's engine against ``transformers``' own ``generate`` (same model and prompt),
and after a long graft against an empty cache."""

from __future__ import annotations

from ..engine.base import EngineSession
from ..engine.registry import benchmark_ops
from .stats import summary, timed


def _engine_decode(session: EngineSession, prompt: list[int], new_tokens: int) -> tuple[float, list[int]]:
    ops = benchmark_ops(session.engine_name)
    cache = ops.new_cache(session)
    logits = ops.prefill(session, cache, prompt)
    decoded = ops.greedy_decode(session, cache, logits, new_tokens, session.eos_ids)
    return decoded.decode_s, decoded.token_ids


def _generate(session: EngineSession, prompt: list[int], new_tokens: int) -> tuple[float, list[int]]:
    return benchmark_ops(session.engine_name).generate(session, prompt, new_tokens, timed)


def measure_decode(session: EngineSession, prompt: list[int], new_tokens: int, repeats: int) -> dict:
    """Decode tokens per second, median of ``repeats``, for both engines on ``prompt``.

    graftbench: ``(tokens - 1) / decode_s``, where ``decode_s`` runs from the prompt's logits to the last token
    (one forward per token after the first). ``generate``: ``(tokens - 1) / (t_N - t_1)``, where ``t_N`` and
    ``t_1`` are whole ``generate`` calls for N and for 1 new token, so that its prefill cancels out.
    Both stop at EOS; ``same_tokens`` says whether they produced the same greedy tokens.
    """
    ours, theirs, theirs_one = [], [], []
    for _ in range(repeats):
        seconds, tokens = _engine_decode(session, prompt, new_tokens)
        ours.append((len(tokens) - 1) / seconds)
        seconds_n, generated = _generate(session, prompt, new_tokens)
        seconds_1, _ = _generate(session, prompt, 1)
        theirs.append((len(generated) - 1) / (seconds_n - seconds_1))
        theirs_one.append(seconds_1)
    ours_s, theirs_s = summary(ours), summary(theirs)
    return {
        "prompt_tokens": len(prompt), "new_tokens": {"graftbench": len(tokens), "generate": len(generated)},
        "same_tokens": tokens == generated,
        "graftbench_tok_per_s": ours_s, "generate_tok_per_s": theirs_s,
        "ratio": ours_s["median"] / theirs_s["median"],
        "method": "greedy, EOS stops both; graftbench engine.greedy_decode vs model.generate(do_sample=False)",
    }


def _decode_tok_per_s(session: EngineSession, cache, query: list[int], tokens: int) -> float:
    ops = benchmark_ops(session.engine_name)
    logits = ops.prefill(session, cache, query)
    decoded = ops.greedy_decode(session, cache, logits, tokens, set())
    return (len(decoded.token_ids) - 1) / decoded.decode_s


def measure_decode_after_graft(session: EngineSession, store, artifact_id: str, context_tokens: int, query: list[int],
                               tokens: int, repeats: int) -> dict:
    """Greedy decode tokens per second after grafting ``artifact_id`` (``context_tokens`` long) and prefilling
    ``query``, against the same decode after ``query`` alone in an empty cache; medians of ``repeats``, the two
    sides alternating.

    Both decode ``tokens`` tokens (no EOS stop, so the counts are equal); tok/s = (tokens - 1) / decode seconds
    (one forward per token after the first). The graft is read with room for the query and the decode, as
    ``eval --graft`` reads it, so its cache never moves while decoding. ``ratio`` = after graft / empty cache:
    every decode step after a graft also reads the artifact's keys and values (the attention's cost grows with
    the positions held).
    """
    ops = benchmark_ops(session.engine_name)

    def grafted():
        artifact = store.read(artifact_id, room=len(query) + tokens)
        return _decode_tok_per_s(session, ops.restore(session, artifact), query, tokens)

    def alone():
        return _decode_tok_per_s(session, ops.new_cache(session), query, tokens)

    after, empty = [], []
    for i in range(repeats):
        for side in ((grafted, alone) if i % 2 == 0 else (alone, grafted)):
            (after if side is grafted else empty).append(side())
    after_s, empty_s = summary(after), summary(empty)
    return {"context_tokens": context_tokens, "query_tokens": len(query), "decode_tokens": tokens,
            "after_graft_tok_per_s": after_s, "empty_cache_tok_per_s": empty_s,
            "ratio": after_s["median"] / empty_s["median"],
            "method": "greedy, no EOS stop; tok/s = (tokens - 1) / decode seconds; sides alternate; graft read "
                      "with room for the query and the decode (as eval --graft)"}
