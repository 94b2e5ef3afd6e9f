"""N samples from one state on the llama.cpp engine: graftbench's batched decode against its sequential path and
against llama.cpp's own N-sequence decode, side by side in one process, after a long graft and after a short prompt.

Every side starts from the same captured state (the graft's or the prompt's tokens, the query's last token still to
come), on the model graftbench's engine has loaded (the same build, the same weights in memory, the same threads):

- ``batched`` (graftbench, what a sampled run does): the state put into N sequences of one context
  (:func:`graftbench.engine.llama_cpp.fanout.fan_out`), the query's last token as one batch of N, then
  :func:`graftbench.engine.llama_cpp.decode.decode_samples`: graftbench's seeded nucleus sampling per sample (logits
  copied out, the draw in torch), one ``llama_decode`` per step holding a token of every sample;
- ``batched_greedy``: the same with graftbench's greedy choice (argmax in numpy) in place of the draw: the batching
  itself against the reference, whose choice is greedy too;
- ``sequential`` (graftbench's path before): per sample, the state restored into its own context, the query's last
  token, then its own decode loop (:func:`graftbench.engine.llama_cpp.decode.decode`);
- ``reference`` (llama.cpp alone, :class:`RawSamples`): the same N-sequence context made with the same parameters, the
  state put into each sequence by ``llama_state_seq_set_data``, then one ``llama_batch`` of N tokens per step, each
  token llama.cpp's greedy choice in C (``llama_sampler_sample``), a fixed count of tokens.

No side stops early (no EOS, no stop string): each decodes ``tokens`` tokens per sample. Decode tokens/s =
N × (tokens − 1) / the seconds from the first token chosen to the last (summed over the samples on the sequential
side); samples/s = N / the seconds from the state's load to the last token. The sides rotate which runs first in
each repetition; the machine's load average is recorded before and after every row.

The bound: a decode step reads every weight and each sequence's cached keys and values, so N sequences run at most at
N × r × W / (W + N × C) tokens/s, with r the reference's one-sequence rate after the short prompt, W the weights'
bytes (``llama_model_size``) and C one sequence's cache bytes after the prefix (its state's size): the roofline
argument (Williams, Waterman and Patterson, "Roofline", CACM 52(4), 2009) of :mod:`graftbench.bench.llama_overhead`.

The batch-width measurement: after the short prompt, W sequences (1 to 8) each fed its own tokens for 6 steps in one
``llama_decode`` per step, each row compared with the same sequence decoded alone in the engine's own context, for
the non-unified cache (one stream per sequence: what runs use) and llama.cpp's unified one (a measurement only).
graftbench's batched side decodes at most :data:`graftbench.engine.llama_cpp.fanout.MAX_BATCH` sequences per call.

Needs llama-cpp-python (the ``llama`` extra); the draw imports torch.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.base import EngineSession, SamplingSettings
from ..engine.registry import benchmark_ops
from ..util.seeds import sample_seed
from .llama_overhead import rotate
from .llama_raw import ENGINE, RawSamples
from .stats import summary

SIDES = ("batched", "batched_greedy", "sequential", "reference")


@dataclass(frozen=True)
class SamplesBenchSettings:
    """What the rows measure: ``widths`` (samples decoded from one state), ``graft_tokens`` (the long prefix),
    ``tokens`` decoded per sample, ``repeats`` per side and row, and the draw's ``temperature``, ``top_p`` and
    run ``seed`` (sample i's seed: :func:`graftbench.util.seeds.sample_seed` of it, the bench's problem id and i)."""

    widths: tuple[int, ...] = (1, 4, 8)
    graft_tokens: int = 8192
    tokens: int = 32
    repeats: int = 2
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0


@dataclass
class Prefix:
    """A state to decode from: ``state`` holds every token but the query's last (``last``), ``kind`` names it."""

    kind: str
    state: Any  # the engine's captured state: its token_ids and state bytes
    last: int


def _sampling(settings: SamplesBenchSettings) -> SamplingSettings:
    return SamplingSettings(settings.temperature, settings.top_p, settings.seed)


def batched(session: EngineSession, prefix: Prefix, width: int, settings: SamplesBenchSettings,
            seeds: list[int], greedy: bool = False) -> dict:
    """graftbench's batched side once (see the module docstring; ``greedy``: argmax in place of the draw): seconds
    and each sample's tokens."""
    ops = benchmark_ops(session.engine_name)
    return ops.batched_samples(session, prefix.state, prefix.last, width, settings.tokens,
                               None if greedy else _sampling(settings), seeds)


def sequential(session: EngineSession, prefix: Prefix, width: int, settings: SamplesBenchSettings,
               seeds: list[int]) -> dict:
    """graftbench's sequential side once: per sample its own restore and decode; seconds summed."""
    ops = benchmark_ops(session.engine_name)
    return ops.sequential_samples(session, prefix.state, prefix.last, width, settings.tokens, _sampling(settings),
                                  seeds)


def width_dependence(session: EngineSession, prefix: Prefix, steps: int = 6, width: int = 8) -> dict:
    """Whether a sequence's logits depend on how many others share its batch: ``width`` sequences fed their own
    tokens for ``steps`` steps, each row against the same sequence decoded alone in the engine's own context, for the
    non-unified cache and the unified one. Returns per cache kind ``rows_equal`` (every row byte-equal) and the
    largest absolute difference."""
    return benchmark_ops(session.engine_name).width_dependence(session, prefix.state, steps, width)


def prefixes(session: EngineSession, context: list[int], settings: SamplesBenchSettings, query: list[int],
             keep: Path | None = None) -> list:
    """The two prefixes (untimed): ``graft`` (``settings.graft_tokens`` of ``context``, then ``query``) and
    ``prompt`` (``query`` alone), each captured without its last token. With ``keep`` (a folder), each state is
    written there as an artifact of the session's pin, named by its token ids and the pin, and read back (its id,
    payload and pin checked) by a later run instead of a prefill. Raises ``ValueError`` for too short a context."""
    if len(context) < settings.graft_tokens:
        raise ValueError(f"the problems' text holds {len(context)} tokens, fewer than the {settings.graft_tokens} "
                         "of the graft")
    out = []
    for kind, ids in (("graft", context[:settings.graft_tokens] + query), ("prompt", query)):
        out.append(Prefix(kind, _captured(session, ids[:-1], keep), ids[-1]))
    return out


def _captured(session: EngineSession, ids: list[int], keep: Path | None):
    """The state after prefilling ``ids``: read from ``keep`` when a run under this pin left it there, else
    prefilled (and left there when ``keep`` is given)."""
    return benchmark_ops(session.engine_name).captured_state(session, ids, keep)


def measure_width(session: EngineSession, raw: RawSamples, prefix: Prefix, width: int,
                  settings: SamplesBenchSettings, seeds: list[int]) -> dict:
    """One row: ``width`` samples from ``prefix``, every side ``settings.repeats`` times, rotating."""
    load_before = os.getloadavg()
    runs = rotate(settings.repeats, lambda: batched(session, prefix, width, settings, seeds[:width]),
                  lambda: batched(session, prefix, width, settings, seeds[:width], greedy=True),
                  lambda: sequential(session, prefix, width, settings, seeds[:width]),
                  lambda: raw.run(prefix, width, settings.tokens))
    row = {"prefix": prefix.kind, "prefix_tokens": len(prefix.state.token_ids) + 1, "width": width,
           "load_average_before": [round(x, 2) for x in load_before],
           "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    for side, results in zip(SIDES, runs):
        row[side] = {"decode_tok_per_s": summary([width * (settings.tokens - 1) / r["decode_s"] for r in results]),
                     "samples_per_s": summary([width / r["total_s"] for r in results])}
    tokens = [r["tokens"] for r in runs[0]]
    row["batched_repeats_equal"] = all(t == tokens[0] for t in tokens)
    row["batched_equals_sequential"] = tokens[0] == runs[2][0]["tokens"]
    row["greedy_equals_reference"] = runs[1][0]["tokens"] == runs[3][0]["tokens"]
    ref = row["reference"]["decode_tok_per_s"]["median"]
    row["batched_of_reference"] = row["batched"]["decode_tok_per_s"]["median"] / ref
    row["batched_greedy_of_reference"] = row["batched_greedy"]["decode_tok_per_s"]["median"] / ref
    row["batched_over_sequential"] = (row["batched"]["decode_tok_per_s"]["median"]
                                      / row["sequential"]["decode_tok_per_s"]["median"])
    row["samples_batched_over_sequential"] = (row["batched"]["samples_per_s"]["median"]
                                              / row["sequential"]["samples_per_s"]["median"])
    row["kv_bytes_batched"], cells = benchmark_ops(session.engine_name).batched_kv_bytes(
        session, prefix.state, width, row["prefix_tokens"] + settings.tokens)
    per_cell = row["kv_bytes_batched"] // (width * cells)
    row["kv_bytes_sequential"] = per_cell * session.engine.n_ctx  # one context of the engine's own at a time
    return row


def run_model(session: EngineSession, context: list[int], query: list[int], settings: SamplesBenchSettings,
              on_row=lambda name: None, keep: Path | None = None) -> dict:
    """Every row for the loaded model: the width measurement, then per prefix and width the three sides, and the
    bound. Returns the model's result (rows in order)."""
    raw = RawSamples(session.engine)
    seeds = [sample_seed(settings.seed, "bench-llama-samples", i) for i in range(max(settings.widths))]
    found = prefixes(session, context, settings, query, keep)
    dependence = [width_dependence(session, found[1], width=width) for width in range(1, 9)]
    on_row("width dependence")
    rows = []
    for prefix in found:
        for width in settings.widths:
            rows.append(measure_width(session, raw, prefix, width, settings, seeds))
            on_row(f"{prefix.kind} N={width}")
    weights = benchmark_ops(session.engine_name).weight_bytes(session)
    one = next(r for r in rows if r["prefix"] == "prompt" and r["width"] == 1)["reference"]["decode_tok_per_s"]
    for row, prefix in ((r, next(p for p in found if p.kind == r["prefix"])) for r in rows):
        cache = len(prefix.state.state)
        row["bound_tok_per_s"] = row["width"] * one["median"] * weights / (weights + row["width"] * cache)
        row["batched_of_bound"] = row["batched"]["decode_tok_per_s"]["median"] / row["bound_tok_per_s"]
        row["reference_of_bound"] = row["reference"]["decode_tok_per_s"]["median"] / row["bound_tok_per_s"]
    return {"weights_bytes": weights, "state_bytes": {p.kind: len(p.state.state) for p in found},
            "width_dependence": dependence, "rows": rows}


def result_name(label: str, threads: int) -> str:
    """The results files' name (without suffix) for the model ``label`` at ``threads`` threads."""
    return f"llama-samples-{label}" + ("" if threads == 1 else f"-threads-{threads}")


def run_samples_bench(model: str, problems, problems_source: str, settings: SamplesBenchSettings, threads: int,
                      chunk: int = 256, on_row=lambda name: None, keep: Path | None = None) -> dict:
    """Every row for ``model`` on the llama.cpp engine (f16 KV cache, flash attention off, ``chunk``-token batches,
    ``threads`` threads), with the machine named and its load recorded. The prefixes are cut from the text of
    ``problems`` (their problems and solutions); the query is graftbench's solve prompt of the first problem.
    ``keep``: a folder where the prefixes' states are kept for a later run (:func:`prefixes`). Raises
    ``ValueError`` when the text is shorter than the graft."""
    import platform

    from ..util import isa
    from ..util.checkout import checkout_commit
    from .llama_overhead import _workload_ids

    commit = checkout_commit()  # at the start: the checkout may move while the rows run
    ops = benchmark_ops(ENGINE, "bench-llama --only samples")
    n_ctx = ops.stream_cells(settings.graft_tokens + 256 + settings.tokens)
    session = ops.open_for_samples(model, chunk, threads, n_ctx)  # the draw's threads: as many as llama.cpp's
    try:
        query = session.solve_prompt_ids(problems[0].problem)
        context = _workload_ids(session, problems, settings.graft_tokens)
        rows = run_model(session, context, query, settings, on_row, keep)
        config = session.config
    finally:
        session.engine.close()
    return {"model": model, "threads": threads, "chunk_size": chunk, "n_ctx": n_ctx, "kv_type": "f16",
            "flash_attn": False, "query_tokens": len(query),
            "settings": {"widths": list(settings.widths), "graft_tokens": settings.graft_tokens,
                         "tokens": settings.tokens, "repeats": settings.repeats,
                         "temperature": settings.temperature, "top_p": settings.top_p, "seed": settings.seed,
                         "problems": problems_source},
            "llama_cpp": rows,
            "environment": {"machine": platform.platform(), "processor": isa.cpu_model() or platform.processor(),
                            "cpu_count": os.cpu_count(), "python": platform.python_version(),
                            "llama_cpp_python": ops.binding_version(), "system_info": ops.system_info(),
                            "weights_sha256": config.weights_sha256, "config_fingerprint": config.fingerprint,
                            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "graftbench_commit": commit}}


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def markdown(result: dict) -> str:
    """The result as markdown tables, the machine, its load and the settings in the caption."""
    env, s, llama = result["environment"], result["settings"], result["llama_cpp"]
    deps = llama["width_dependence"]
    equal = [d["width"] for d in deps if d["non_unified"]["rows_equal"]]
    unified = [d["width"] for d in deps if d["unified"]["rows_equal"]]
    lines = [f"# N samples from one state on the llama.cpp engine: {result['model']}", "",
             f"CPU: {env['processor']} ({env['cpu_count']} cores; {env['system_info']}), {result['threads']} "
             f"thread(s), llama-cpp-python {env['llama_cpp_python']}, chunk {result['chunk_size']}, KV f16, flash "
             f"attention off; {s['tokens']} tokens per sample, no early stop; medians of {s['repeats']} "
             f"repetitions per side, the sides rotating which runs first; {env['date']}, graftbench "
             f"{(env['graftbench_commit'] or 'outside git')[:12]}. The machine is shared: each row gives the load "
             "average (1 min) before and after it. batched = graftbench's N samples as one batch per step "
             "(seeded nucleus sampling, temperature "
             f"{s['temperature']}, top-p {s['top_p']}); batched greedy = the same with graftbench's argmax in place "
             "of the draw; sequential = graftbench, one sample after another, each after "
             "its own restore; reference = llama.cpp alone, one llama_batch of N tokens per step, greedy in C; "
             "bound = N × the reference's one-sequence rate after the short prompt × W / (W + N × C).", "",
             "| prefix | N | batched tok/s | batched greedy tok/s | sequential tok/s | reference tok/s | "
             "batched / reference | batched greedy / reference | batched / sequential | bound tok/s | "
             "batched samples/s | sequential samples/s | KV MiB batched | KV MiB sequential | load before → after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in llama["rows"]:
        tok = {side: row[side]["decode_tok_per_s"]["median"] for side in SIDES}
        lines.append(f"| {row['prefix']} ({row['prefix_tokens']:,} tokens) | {row['width']} | {tok['batched']:.1f} | "
                     f"{tok['batched_greedy']:.1f} | {tok['sequential']:.1f} | {tok['reference']:.1f} | "
                     f"{row['batched_of_reference']:.2f}× | {row['batched_greedy_of_reference']:.2f}× | "
                     f"{row['batched_over_sequential']:.2f}× | {row['bound_tok_per_s']:.1f} | "
                     f"{row['batched']['samples_per_s']['median']:.2f} | "
                     f"{row['sequential']['samples_per_s']['median']:.2f} | {_mib(row['kv_bytes_batched'])} | "
                     f"{_mib(row['kv_bytes_sequential'])} | {row['load_average_before'][0]:.1f} → "
                     f"{row['load_average_after'][0]:.1f} |")
    lines += ["", f"Batch width and the logits (after the short prompt, W sequences in one llama_decode per step, "
              f"{deps[0]['steps']} steps, each row against the same sequence decoded alone): non-unified cache (one "
              f"stream per sequence, what runs use): rows byte-equal at W = {equal or 'none'} of 1..{len(deps)} "
              f"(max |Δ| {max(d['non_unified']['max_abs_diff'] for d in deps):.3g}); unified cache: rows byte-equal "
              f"at W = {unified or 'none'} (max |Δ| {max(d['unified']['max_abs_diff'] for d in deps):.3g}). "
              "graftbench's batched side decodes at most 4 sequences per llama_decode. Sampled tokens of "
              "the batched side equal the sequential side's in every row: "
              f"{all(r['batched_equals_sequential'] for r in llama['rows'])}; greedy tokens of the batched side "
              f"equal the reference's in every row: {all(r['greedy_equals_reference'] for r in llama['rows'])}.", ""]
    return "\n".join(lines)
