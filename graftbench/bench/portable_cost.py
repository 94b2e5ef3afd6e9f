"""What the portable pins cost, on both engines, side by side in one run: prefill and decode tokens/s and the graft
plus one token, native against portable.

- llama.cpp: the native build (``-march=native``) against the portable build (:mod:`graftbench.engine.llama_cpp.
  portable_build`), chosen per process by ``GRAFTBENCH_LLAMA_BUILD``; KV cache f16, flash attention off, chunk 256.
- torch: ``--isa native`` against ``--isa portable`` (:mod:`graftbench.util.isa`), float32.

Each (engine, pin, repeat) is one fresh process, the pins alternating so both see the same machine state; cells are
medians. Prefill: ``prompt_tokens`` of AIME text in the pin's chunk schedule (tokens/s); decode: greedy tokens after
it, one forward a token (tokens/s); graft + 1 token: the prefilled state captured, restored into a fresh cache and one
token decoded after it (seconds; llama.cpp only: the torch graft's cost is in docs/performance.md).

Run as ``python -m graftbench.bench.portable_cost probe ENGINE MODEL PROMPT DECODE THREADS PROBLEMS`` (under the
pin's variable) to print one probe's JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from .history import write_json_and_markdown
from .stats import alternating, speed_cell

PINS = ("native", "portable")


def prompt_ids(session, problems: str, prompt_tokens: int) -> list[int]:
    """The first ``prompt_tokens`` token ids of the deposit texts of ``problems``' problems with a solution."""
    from ..problems.loading import load_problems

    ids: list[int] = []
    for problem in (p for p in load_problems(problems) if p.solution):
        ids += session.deposit_ids(problem.problem, problem.answer, problem.solution)
        if len(ids) >= prompt_tokens:
            break
    return ids[:prompt_tokens]


def _probe(engine: str, model: str, prompt_tokens: int, decode_tokens: int, threads: int, problems: str) -> dict:
    """One probe in this process's pin: the engine's own prefill, decode and graft timed by its benchmark operations
    (:func:`graftbench.engine.registry.benchmark_ops`), on the first ``prompt_tokens`` tokens of ``problems``."""
    from ..engine.registry import benchmark_ops

    return benchmark_ops(engine, "the portable pins' cost").portable_cost_probe(
        model, decode_tokens, threads, lambda session: prompt_ids(session, problems, prompt_tokens))


def probe_in_subprocess(engine: str, pin: str, model: str, prompt_tokens: int, decode_tokens: int, threads: int,
                        problems: str) -> dict:
    """One probe in a fresh process with ``engine``'s pin variable set to ``pin``. Raises ``RuntimeError`` with the
    probe's stderr when it fails."""
    from ..engine.registry import get

    env = {**os.environ, get(engine).isa_variable: pin, "OMP_NUM_THREADS": str(threads)}
    args = ["probe", engine, model, str(prompt_tokens), str(decode_tokens), str(threads), problems]
    done = subprocess.run([sys.executable, "-m", "graftbench.bench.portable_cost", *args], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:  # the probe's last line is its exception; the whole stderr is no message
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RuntimeError(f"the {engine} probe of {model} ({pin}) failed: {last[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


DEFAULT_ROWS = ("llama.cpp:smollm2-135m", "torch:smollm2-135m")


def parse_rows(specs: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """``ENGINE:MODEL`` specs as ``(engine, model)`` rows, in order. Raises ``ValueError`` naming the spec when it is
    not ``ENGINE:MODEL``, names no registered engine, or names an engine without a portable pin (no ``isa_variable``
    in its factory) or without benchmark operations (:data:`graftbench.engine.base.BENCHMARK`)."""
    from ..engine.base import BENCHMARK
    from ..engine.registry import engine_names, get

    rows = []
    for spec in specs:
        engine, _, model = spec.partition(":")
        if not engine or not model:
            raise ValueError(f"{spec!r} is not ENGINE:MODEL (e.g. llama.cpp:smollm2-135m)")
        if engine not in engine_names():
            raise ValueError(f"{spec!r}: no engine {engine!r} (engines: {', '.join(engine_names())})")
        factory = get(engine)
        if not getattr(factory, "isa_variable", None) or BENCHMARK not in factory.capabilities:
            raise ValueError(f"{spec!r}: the {engine} engine has no portable pin to measure")
        rows.append((engine, model))
    return rows


def measure(rows: list[tuple[str, str]], problems: str, prompt_tokens: int = 512, decode_tokens: int = 32,
            threads: int = 1, repeats: int = 3, on_probe=None) -> dict:
    """Median figures per (engine, model) in ``rows`` and pin over ``repeats`` alternating fresh processes, with
    the portable/native ratios (tokens/s; for the graft, seconds, so above 1 is slower). ``on_probe`` is called
    with each probe's result."""
    from ..util.isa import environment

    out = []
    for engine, model in rows:
        runs = alternating(PINS, repeats, lambda pin: probe_in_subprocess(
            engine, pin, model, prompt_tokens, decode_tokens, threads, problems), on_probe)
        row = {"engine": engine, "model": model}
        for pin, probes in runs.items():
            graft = [p["graft_plus_one_s"] for p in probes if p["graft_plus_one_s"] is not None]
            row[pin] = {**speed_cell(probes), "graft_plus_one_s": statistics.median(graft) if graft else None}
        for key in ("prefill_tok_per_s", "decode_tok_per_s", "graft_plus_one_s"):
            n, p = row["native"][key], row["portable"][key]
            row[f"{key}_ratio"] = p / n if n and p is not None else None
        out.append(row)
    return {"threads": threads, "prompt_tokens": prompt_tokens, "decode_tokens": decode_tokens, "repeats": repeats,
            "problems": problems, "environment": environment(), "rows": out,
            "method": "fresh process per (engine, pin, repeat), pins alternating; medians; ratio = portable / native"}


def emulated_note(env: dict) -> str:
    """``, emulated as <CPU>`` for a run on an emulated CPU, ``, emulation not checked (<why>)`` for one where that
    could not be checked (:func:`graftbench.util.cpuid.emulation_fields`), else ``""``; markdown-escaped."""
    from ..util.display_text import markdown_text

    seen = (env.get("emulated") or {}).get("seen")
    if seen:
        return f", emulated as {markdown_text(seen)}"
    unchecked = env.get("emulation_unchecked")
    return f", emulation not checked ({markdown_text(unchecked)})" if unchecked else ""


def markdown(result: dict) -> str:
    """The figures as a markdown table."""
    env = result["environment"]
    lines = ["# Cost of the portable pins", "",
             f"CPU: {env['cpu_model']} (native {env['cpu_capability_native']}){emulated_note(env)}, "
             f"{result['threads']} thread(s); "
             f"prefill of {result['prompt_tokens']} tokens of AIME text, then {result['decode_tokens']} greedy "
             f"tokens; graft + 1 token on llama.cpp; median of {result['repeats']} fresh processes per cell.", "",
             "| engine | model | prefill tok/s native | portable | ratio | decode tok/s native | portable | ratio "
             "| graft + 1 token native (s) | portable (s) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def cell(value, fmt):
        return "n/a" if value is None else format(value, fmt)

    for row in result["rows"]:
        n, p = row["native"], row["portable"]
        lines.append(f"| {row['engine']} | {row['model']} | {n['prefill_tok_per_s']:.1f} | "
                     f"{p['prefill_tok_per_s']:.1f} | {row['prefill_tok_per_s_ratio']:.2f}× | "
                     f"{n['decode_tok_per_s']:.1f} | {p['decode_tok_per_s']:.1f} | "
                     f"{row['decode_tok_per_s_ratio']:.2f}× | {cell(n['graft_plus_one_s'], '.3f')} | "
                     f"{cell(p['graft_plus_one_s'], '.3f')} |")
    return "\n".join(lines) + "\n"


def write_outputs(result: dict, out_dir: Path, code: dict | None = None) -> list[Path]:
    """``portable-cost.json`` and ``portable-cost.md`` under ``out_dir`` (:func:`graftbench.bench.history.
    write_json_and_markdown`: an earlier pair is kept under ``runs/``; ``code`` is the code version read when the
    measurement started). Raises OSError when they cannot be written."""
    return write_json_and_markdown(result, markdown(result), out_dir, "portable-cost", code)


def main(argv: list[str]) -> int:
    """``probe ENGINE MODEL PROMPT DECODE THREADS PROBLEMS``: print one probe; ``run OUT_DIR PROBLEMS
    ENGINE:MODEL...``: measure and write ``portable-cost.{json,md}`` under ``OUT_DIR``."""
    if argv[:1] == ["probe"]:
        engine, model, prompt, decode, threads, problems = argv[1:7]
        print(json.dumps(_probe(engine, model, int(prompt), int(decode), int(threads), problems)))
        return 0
    if argv[:1] == ["run"]:
        out, problems, specs = Path(argv[1]), argv[2], argv[3:]
        result = measure(parse_rows(specs), problems, on_probe=lambda r: print(json.dumps(r), flush=True))
        for path in write_outputs(result, out):
            print(path)
        return 0
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
