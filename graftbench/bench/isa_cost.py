"""What the portable instruction-set pin costs: prefill and decode speed under ``--isa native`` and ``--isa avx2``.

The pin must be set before torch is imported, so each (pin, dtype) is measured in a fresh Python process, the pins
alternating so that both see the same machine state. Prefill: ``prompt_tokens`` of real AIME text in the pinned
chunk schedule, tokens per second; decode: greedy tokens per second after that prompt (one forward per token).
Ratios are avx2 over native from the same run.

Run as ``python -m graftbench.bench.isa_cost MODEL DTYPE PROMPT_TOKENS DECODE_TOKENS THREADS PROBLEMS`` (under
``GRAFTBENCH_ISA``): prints one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .history import write_json_and_markdown
from .portable_cost import emulated_note, prompt_ids
from .stats import alternating, speed_cell


def _probe(model: str, dtype: str, prompt_tokens: int, decode_tokens: int, threads: int, problems: str) -> dict:
    from ..engine.registry import DEFAULT_ENGINE, benchmark_ops

    ops = benchmark_ops(DEFAULT_ENGINE)  # the engine whose instruction-set pins (GRAFTBENCH_ISA) are compared
    session = ops.open_for_benchmark(model, dtype, threads=threads)
    ids = prompt_ids(session, problems, prompt_tokens)
    cache = ops.new_cache(session)
    started = time.perf_counter()
    logits = ops.prefill(session, cache, ids)
    prefill_s = time.perf_counter() - started
    decoded = ops.greedy_decode(session, cache, logits, decode_tokens, set())
    return {"isa": session.config.isa, "cpu_capability": session.config.cpu_capability, "dtype": dtype,
            "prompt_tokens": len(ids), "prefill_s": prefill_s, "prefill_tok_per_s": len(ids) / prefill_s,
            "decode_tokens": len(decoded.token_ids),
            "decode_tok_per_s": (len(decoded.token_ids) - 1) / decoded.decode_s}


def probe_in_subprocess(isa: str, model: str, dtype: str, prompt_tokens: int, decode_tokens: int, threads: int,
                        problems: str) -> dict:
    """One measurement in a fresh process under ``GRAFTBENCH_ISA=isa``. Raises ``RuntimeError`` with the probe's
    stderr when it fails."""
    env = {**os.environ, "GRAFTBENCH_ISA": isa}
    args = [model, dtype, str(prompt_tokens), str(decode_tokens), str(threads), problems]
    done = subprocess.run([sys.executable, "-m", "graftbench.bench.isa_cost", *args], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"isa probe ({isa}, {dtype}) failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(model: str, dtypes: list[str], problems: str, prompt_tokens: int = 512, decode_tokens: int = 64,
            threads: int = 1, repeats: int = 3, on_probe=None) -> dict:
    """Median prefill and decode tokens/s per (dtype, pin) over ``repeats`` alternating fresh processes, and the
    avx2/native ratios. ``on_probe`` is called after each process."""
    from ..util.isa import environment

    rows, after = [], (lambda _: on_probe()) if on_probe else None
    for dtype in dtypes:
        runs = alternating(("native", "avx2"), repeats, lambda isa: probe_in_subprocess(
            isa, model, dtype, prompt_tokens, decode_tokens, threads, problems), after)
        row = {"dtype": dtype, **{isa: speed_cell(probes) for isa, probes in runs.items()}}
        row["prefill_ratio"] = row["avx2"]["prefill_tok_per_s"] / row["native"]["prefill_tok_per_s"]
        row["decode_ratio"] = row["avx2"]["decode_tok_per_s"] / row["native"]["decode_tok_per_s"]
        rows.append(row)
    return {"model": model, "threads": threads, "prompt_tokens": prompt_tokens, "decode_tokens": decode_tokens,
            "repeats": repeats, "problems": problems, "environment": environment(), "rows": rows,
            "method": "fresh process per (pin, dtype, repeat), pins alternating; medians; ratio = avx2 / native"}


def markdown(result: dict) -> str:
    """The figures as a markdown table."""
    env = result["environment"]
    lines = [f"# Cost of the portable pin: {result['model']}", "",
             f"CPU: {env['cpu_model']} (native {env['cpu_capability_native']}){emulated_note(env)}, "
             f"{result['threads']} thread(s); "
             f"prefill of {result['prompt_tokens']} tokens of AIME text, then {result['decode_tokens']} greedy "
             f"tokens; median of {result['repeats']} fresh processes per cell.", "",
             "| dtype | prefill tok/s native | prefill tok/s avx2 | ratio | decode tok/s native | decode tok/s avx2 "
             "| ratio |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        n, a = row["native"], row["avx2"]
        lines.append(f"| {row['dtype']} | {n['prefill_tok_per_s']:.1f} | {a['prefill_tok_per_s']:.1f} "
                     f"| {row['prefill_ratio']:.2f}× | {n['decode_tok_per_s']:.1f} | {a['decode_tok_per_s']:.1f} "
                     f"| {row['decode_ratio']:.2f}× |")
    return "\n".join(lines) + "\n"


def write_outputs(result: dict, out: Path, stem: str, code: dict | None = None) -> list[Path]:
    """Write ``stem.json`` and ``stem.md`` under ``out`` atomically, naming ``code``, the code version read when the
    measurement started (:func:`graftbench.bench.history.write_json_and_markdown`); returns their paths."""
    return write_json_and_markdown(result, markdown(result), out, stem, code)


if __name__ == "__main__":
    from ..util.allocator import set_allocator_for_grafts

    set_allocator_for_grafts()  # as the command line that starts this probe
    model, dtype, prompt, decode, threads, problems = sys.argv[1:7]
    print(json.dumps(_probe(model, dtype, int(prompt), int(decode), int(threads), problems)))
