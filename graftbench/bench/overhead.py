"""``graftbench bench-llama``: the llama.cpp engine against raw llama.cpp on one GGUF file (:mod:`.llama_overhead`),
the torch engine's rows beside them (:mod:`.torch_rows`), one result with its machine, and its markdown tables."""

from __future__ import annotations

import os
import platform
import tempfile
import time
from pathlib import Path

from ..engine.registry import DEFAULT_ENGINE, benchmark_ops
from ..util import isa
from .llama_overhead import LlamaBenchSettings, PROMPT_TOKENS, _workload_ids, load_row, run_llama_rows
from .llama_raw import ENGINE
from ..util.checkout import checkout_commit

CHUNK = 256
TORCH_ROWS = "torch"  # the result's key of the torch engine's rows, opened as the registry's default engine
# Context in tokens: the largest state, its query and the decode after it fit.
def context_for(settings: LlamaBenchSettings) -> int:
    """Context (tokens) for the runs: the largest size, a query token and the decode, rounded up to 256."""
    need = max(settings.sizes) + 1 + settings.decode_tokens
    return -(-need // 256) * 256


def parse_variants(text: str) -> list[str]:
    """The KV cache variants of ``--kv-types``: comma-separated, ``f16`` first (the state rows run on it), then any of
    ``f16+fa`` (f16 with flash attention on) and the quantized types (flash attention always on). Raises
    ``ValueError`` naming what was wrong."""
    kv_types = benchmark_ops(ENGINE, "bench-llama --kv-types").KV_TYPES
    names = [k.strip() for k in text.split(",") if k.strip()]
    offered = ("f16", "f16+fa", *kv_types[1:])
    if not names or names[0] != "f16" or any(k not in offered for k in names) or len(set(names)) != len(names):
        raise ValueError(f"--kv-types must start with f16 and list each of {', '.join(offered)} at most once, "
                         f"got {text!r}")
    return names


def llama_sessions(model: str, settings: LlamaBenchSettings, threads: int, variants: list[str]) -> list:
    """One llama.cpp session per KV cache variant (:func:`parse_variants`; ``f16`` first, flash attention off)."""
    ops = benchmark_ops(ENGINE, "bench-llama")
    sessions = []
    for name in variants:
        kv = name.removesuffix("+fa")
        sessions.append(ops.open_for_benchmark(model, chunk_size=CHUNK, threads=threads, kv_type=kv,
                                               flash_attn=kv != "f16" or name.endswith("+fa"),
                                               n_ctx=context_for(settings)))
    return sessions


def run_torch_rows(model: str, problems, settings: LlamaBenchSettings, sizes: tuple[int, ...], threads: int,
                   on_step) -> dict:
    """The torch engine's rows (float32, ``threads`` intra-op threads) at ``sizes`` (none: the decode row only)."""
    from . import torch_rows

    ops = benchmark_ops(DEFAULT_ENGINE, "bench-llama's torch rows")
    session = ops.open_for_benchmark(model, "float32", chunk_size=CHUNK, threads=threads)
    corpus = _workload_ids(session, problems, max(settings.sizes) + 1)
    prompt = corpus[:PROMPT_TOKENS]
    rows = {"dtype": "float32", "decode": torch_rows.decode_row(session, prompt, settings.decode_tokens,
                                                                 settings.repeats)}
    on_step("torch decode")
    with tempfile.TemporaryDirectory(prefix="graftbench-torch-bench-") as tmp:
        rows["state"] = []
        for size in sizes:
            rows["state"].append(torch_rows.state_row(session, Path(tmp) / str(size), corpus[:size],
                                                      corpus[max(settings.sizes)], settings.repeats))
            on_step(f"torch state {size}")
        if sizes:
            rows["decode_after_graft"] = torch_rows.decode_after_graft_row(
                session, Path(tmp), corpus[:max(sizes)], prompt, settings.decode_tokens, settings.repeats)
            on_step("torch decode after graft")
    return rows


def run_engine_bench(model: str, problems, problems_source: str, settings: LlamaBenchSettings, threads: int,
                     kv_types: list[str], torch_sizes: tuple[int, ...] | None, on_step=lambda name: None) -> dict:
    """Every row for ``model``: load, then the llama.cpp rows for each KV cache type, then (unless
    ``torch_sizes`` is ``None``) the torch engine's rows. Returns the result with its environment (its
    ``graftbench_commit`` read before the first row)."""
    commit = checkout_commit()  # at the start: the checkout may move while the rows run
    ops = benchmark_ops(ENGINE, "bench-llama")
    load = load_row(model, threads, CHUNK, context_for(settings))
    on_step("load")
    sessions = llama_sessions(model, settings, threads, kv_types)
    llama = run_llama_rows(sessions[0], problems, settings, sessions[1:], on_step)
    llama["load"] = load
    config = sessions[0].config
    for session in sessions:
        session.engine.close()
    result = {"model": model, "threads": threads, "chunk_size": CHUNK, "n_ctx": context_for(settings),
              "settings": {"sizes": list(settings.sizes), "prefill_tokens": settings.prefill_tokens,
                           "decode_tokens": settings.decode_tokens, "repeats": settings.repeats,
                           "kv_types": kv_types, "problems": problems_source},
              "llama_cpp": llama,
              "environment": {"machine": platform.platform(), "processor": isa.cpu_model() or platform.processor(),
                              "cpu_count": os.cpu_count(), "python": platform.python_version(),
                              "llama_cpp_python": ops.binding_version(), "system_info": ops.system_info(),
                              "weights_sha256": config.weights_sha256,
                              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "graftbench_commit": commit}}
    if torch_sizes is not None:
        result[TORCH_ROWS] = run_torch_rows(model, problems, settings, torch_sizes, threads, on_step)
    return result


def steps(settings: LlamaBenchSettings, kv_types: list[str], torch_sizes: tuple[int, ...] | None) -> int:
    """How many times :func:`run_engine_bench` calls ``on_step`` (a progress bar's total)."""
    llama = 3 + len(settings.sizes) + len(kv_types)  # a sliding-window model ends early (the bar is not filled)
    torch = 0 if torch_sizes is None else 1 + len(torch_sizes) + (1 if torch_sizes else 0)
    return llama + torch


def markdown(result: dict) -> str:
    """The result as markdown tables, the machine and settings in the caption."""
    env, llama, s = result["environment"], result["llama_cpp"], result["settings"]
    lines = [f"# graftbench's llama.cpp engine against raw llama.cpp: {result['model']}", "",
             f"CPU: {env['processor']} ({env['cpu_count']} cores), {result['threads']} thread(s), llama-cpp-python "
             f"{env['llama_cpp_python']}, chunk {result['chunk_size']}, context {result['n_ctx']}; medians of "
             f"{s['repeats']} repetitions per side, the sides alternating; {env['date']}, graftbench "
             f"{(env['graftbench_commit'] or 'outside git')[:12]}. Both sides are the same llama.cpp build on the "
             "same weights in memory: the ratios are what graftbench adds on top of llama.cpp.", "",
             "| row | graftbench (llama.cpp engine) | raw llama.cpp | ratio |", "|---|---:|---:|---:|"]
    load, pre, dec = llama["load"], llama["prefill"], llama["decode"]
    lines.append(f"| load (s) | {load['graftbench_s']:.2f} | {load['llama_cpp_s']:.2f} | "
                 f"{load['graftbench_s'] / load['llama_cpp_s']:.2f}× |")
    lines.append(f"| prefill {pre['tokens']} tokens (tok/s) | {pre['graftbench_tok_per_s']['median']:.1f} | "
                 f"{pre['llama_cpp_tok_per_s']['median']:.1f} | {pre['ratio']:.2f}× |")
    lines.append(f"| decode {dec['decode_tokens']} tokens (tok/s) | {dec['graftbench_tok_per_s']['median']:.1f} | "
                 f"{dec['llama_cpp_tok_per_s']['median']:.1f} | {dec['ratio']:.2f}× |")
    if "skipped" in llama:
        lines += ["", f"Not measured: {llama['skipped']}."]
        return "\n".join(lines + (_torch_lines(result[TORCH_ROWS]) if TORCH_ROWS in result else [])) + "\n"
    for row in llama["state"]:
        lines.append(f"| graft + 1 token vs state load + 1 token at {row['tokens']:,} (ms) | "
                     f"{row['graft_1tok_s']['median'] * 1e3:.1f} | {row['llama_cpp_load_1tok_s']['median'] * 1e3:.1f} "
                     f"| {row['ratio']:.2f}× |")
    for row in llama["state"]:
        lines.append(f"| the context's clear (zeroed) at {row['tokens']:,} (ms) | "
                     f"{row['graft_parts']['clear_s']['median'] * 1e3:.1f}, on a second thread during the read | "
                     f"{row['llama_cpp_clear_s']['median'] * 1e3:.1f}, inside the load | |")
    lines += ["", "Time to first token on the llama.cpp engine: graft + 1 token against a chunked prefill + 1 token.",
              "", "| tokens | prefill (s) | graft (ms) | prefill / graft | logits equal |", "|---:|---:|---:|---:|---|"]
    for row in llama["state"]:
        lines.append(f"| {row['tokens']:,} | {row['prefill_1tok_s']['median']:.2f} | "
                     f"{row['graft_1tok_s']['median'] * 1e3:.1f} | {row['ttft_ratio']:.0f}× | {row['logits_equal']} |")
    lines += ["", "Decode after a graft: graftbench after its graft, llama.cpp after its own state load, graftbench on "
              "an empty cache; bound = empty-cache tok/s × weight bytes / (weight bytes + cache bytes), what the "
              "bytes read per token allow.", "",
              "| KV cache | tokens grafted | empty tok/s | after graft tok/s | llama.cpp after load tok/s | "
              "graftbench / llama.cpp | bound tok/s | of bound | llama.cpp of bound |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in llama["decode_after_graft"]:
        kind = row["kv_type"] + (" (flash attention)" if row["flash_attn"] else "")
        raw = row.get("llama_cpp_after_load_tok_per_s")
        raw_cells = (f"{raw['median']:.1f} | {row['ratio_to_llama_cpp']:.2f}×" if raw else "not measured | –")
        raw_bound = f"{row['llama_cpp_of_bound']:.2f}" if raw else "–"
        lines.append(f"| {kind} | {row['context_tokens']:,} | {row['empty_cache_tok_per_s']['median']:.1f} "
                     f"| {row['after_graft_tok_per_s']['median']:.1f} | {raw_cells} | {row['bound_tok_per_s']:.1f} | "
                     f"{row['of_bound']:.2f} | {raw_bound} |")
    if TORCH_ROWS in result:
        lines += _torch_lines(result[TORCH_ROWS])
    return "\n".join(lines) + "\n"


def _torch_lines(torch_rows: dict) -> list[str]:
    dec = torch_rows["decode"]
    lines = ["", f"The torch engine beside it ({torch_rows['dtype']}, the GGUF de-quantized).", "",
             "| row | torch engine |", "|---|---:|",
             f"| decode {dec['decode_tokens']} tokens (tok/s) | {dec['tok_per_s']['median']:.1f} |"]
    for row in torch_rows["state"]:
        lines.append(f"| graft + 1 token at {row['tokens']:,} (ms) | {row['graft_1tok_s']['median'] * 1e3:.1f} |")
        lines.append(f"| prefill + 1 token at {row['tokens']:,} (s) | {row['prefill_1tok_s']:.2f} |")
    if "decode_after_graft" in torch_rows:
        after = torch_rows["decode_after_graft"]
        lines.append(f"| decode after a {after['context_tokens']:,}-token graft (tok/s) | "
                     f"{after['after_graft_tok_per_s']['median']:.1f} |")
    return lines
