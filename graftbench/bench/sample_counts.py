"""Decode throughput by batch size after one graft (``bench --only sample-counts``): 1, 4 and 16 samples decoded as
one batch, each after its own graft of the same artifact, under the session's kernels (``--kernels certified`` or
``fast``: run the section once under each to compare them; the pin's ``kernels`` field says which ran).

Every sample runs the full budget (no EOS), so a batch of N decodes exactly ``N × tokens`` tokens. Decode tokens/s =
N × (tokens − 1) / decode seconds (the first token of each sample is drawn from the query's logits, as in
:mod:`.batched`).
"""

from __future__ import annotations

from pathlib import Path

from ..engine.base import EngineSession, SamplingSettings
from ..engine.registry import benchmark_ops
from ..store.folder import Store
from ..util.seeds import sample_seed
from .stats import summary
from .ttft import deposit_tokens

SAMPLE_COUNTS = (1, 4, 16)


def measure_sample_counts(session: EngineSession, store_root: Path, context: list[int], query: list[int],
                          query_problem: str, artifact_tokens: int, tokens: int = 32,
                          counts: tuple[int, ...] = SAMPLE_COUNTS, repeats: int = 2, on_step=lambda: None) -> dict:
    """Deposit ``context[:artifact_tokens]`` (untimed), then for each N in ``counts``, ``repeats`` times: graft it,
    prefill ``query``, decode N samples of ``tokens`` tokens as one batch. One untimed batch of 2 tokens per N
    first (new shapes' first-call costs). Returns the kernels, the sizes, and per N the decode seconds and tokens/s
    (medians over the repeats). Raises ``ValueError`` when ``context`` is shorter than the artifact or ``tokens`` < 2.
    """
    if len(context) < artifact_tokens or tokens < 2:
        raise ValueError(f"sample-counts needs {artifact_tokens} context tokens (the problems give {len(context)}) and "
                         f"at least 2 tokens per sample (got {tokens})")
    store = Store(store_root)
    artifact_id = deposit_tokens(session, store, context[:artifact_tokens])
    sampling = SamplingSettings()
    rows = []
    for n in counts:
        seeds = [sample_seed(sampling.seed, query_problem, i) for i in range(n)]
        runs = [_batch(session, store, artifact_id, query, seeds, budget) for budget in [2] + [tokens] * repeats][1:]
        decode = summary(runs)
        rows.append({"samples": n, "decode_s": decode,
                     "decode_tokens_per_s": n * (tokens - 1) / decode["median"]})
        on_step()
    return {"kernels": session.config.kernels, "artifact_tokens": artifact_tokens, "query_tokens": len(query),
            "tokens_per_sample": tokens, "repeats": repeats, "rows": rows}


def _batch(session: EngineSession, store: Store, artifact_id: str, query: list[int], seeds: list[int], budget: int) -> float:
    """Graft, prefill the query, decode ``len(seeds)`` samples of ``budget`` tokens as one batch: decode seconds."""
    ops = benchmark_ops(session.engine_name)
    cache = ops.restore(session, store.read(artifact_id, room=len(query) + budget + 1))
    logits = ops.prefill(session, cache, query)
    decoded = ops.sampled_decode(session, cache, logits, budget, SamplingSettings(), seeds)
    return decoded[0].decode_s


def sample_counts_markdown(result: dict) -> str:
    """The section as markdown: decode tokens/s per batch size, with the kernels it ran under."""
    s = result["sample_counts"]
    lines = [f"# Decode after one graft by batch size: {result['environment'].get('model')}, kernels {s['kernels']}",
             "", f"A {s['artifact_tokens']:,}-token artifact grafted, a {s['query_tokens']}-token query, "
             f"{s['tokens_per_sample']} tokens per sample (no EOS), median of {s['repeats']}.", "",
             "| samples | decode s | decode tokens/s |", "|---:|---:|---:|"]
    lines += [f"| {r['samples']} | {r['decode_s']['median']:.3f} | {r['decode_tokens_per_s']:.1f} |" for r in s["rows"]]
    return "\n".join(lines)
