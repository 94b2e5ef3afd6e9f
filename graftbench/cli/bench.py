"""The benchmark commands: ``bench`` (graft against prefill and more), ``bench-isa`` (what ``--isa avx2`` costs),
``bench-portable`` (what the portable pins cost on each engine), ``bench-llama`` (the llama.cpp engine against raw
llama.cpp) and ``bench-long-context`` (a store far larger than the window)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..engine.registry import DEFAULT_ENGINE
from ..results.layout import dtype_marker
from ..util.provenance import code_version
from ..settings import (CERTIFIED_KERNELS, DEFAULT_CHUNK_SIZE, DEFAULT_MODEL, DTYPE_NAMES, BatchedSettings,
                        BenchSettings, ModelOptions)
from .common import (BENCH, BENCH_OUT, apply_isa, console, fail, int_list, load_problem_set, model_label,
                     name_list, open_model, progress_bar)
from .options import (BenchOutArg, ChunkSizeArg, DecodeTokensArg, DeviceArg, DtypeArg, IsaArg, KernelsArg, ModelArg,
                      ProblemsArg, PromptTokensArg, RepeatsArg, SizesArg, ThreadsArg)

BATCHED = BatchedSettings()
PROBLEMS = "../shared/data/aime2024.jsonl"  # the problem file every benchmark cuts its text from by default


class BenchSection(str, Enum):
    """Sections of ``graftbench bench`` that run alone."""

    batched_samples = "batched-samples"
    energy = "energy"
    head_to_head = "head-to-head"
    load_decode = "load-decode"
    sample_counts = "sample-counts"
    store_scale = "store-scale"
    ttft = "ttft"


def _problem_file(source: str) -> str:
    """The file to read for ``--problems source`` (:func:`graftbench.problems.sources.data_file`: a
    ``../shared/data/`` file is also found beside the checkout, so the defaults work from any folder); fails naming
    ``--problems builtin`` when it is in neither place."""
    from ..problems.sources import MissingDataFile, data_file

    try:
        return data_file(source)
    except MissingDataFile as exc:
        fail(str(exc))


def bench(
    model: ModelArg = DEFAULT_MODEL, dtype: DtypeArg = "auto", chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE,
    isa: IsaArg = None, device: DeviceArg = "auto", kernels: KernelsArg = CERTIFIED_KERNELS,
    problems: ProblemsArg = PROBLEMS, sizes: SizesArg = ",".join(map(str, BENCH.sizes)),
    repeats: RepeatsArg = BENCH.repeats,
    graft_repeats: int = typer.Option(BENCH.graft_repeats, "--graft-repeats", min=1, help="timed repetitions of each graft"),
    decode_tokens: DecodeTokensArg = BENCH.decode_tokens,
    store_sizes: str = typer.Option(",".join(map(str, BENCH.store_sizes)), "--store-sizes", help="artifact counts for the store scale test"),
    cold_load: bool = typer.Option(True, "--cold-load/--no-cold-load", help="also time a cold (de-quantizing) load"),
    peer_python: Optional[Path] = typer.Option(BENCH.peer_python, "--peer-python",
                                               help="a Python with llama-cpp-python for the peer row (make bench-peer-env)"),
    out: BenchOutArg = BENCH_OUT, threads: ThreadsArg = None,
    batch_samples: int = typer.Option(BATCHED.samples, "--batch-samples", min=1, max=256, metavar="N",
                                      help="samples decoded as one batch after one graft, against one at a time"),
    batch_tokens: int = typer.Option(BATCHED.tokens, "--batch-tokens", min=2, max=4096, metavar="N",
                                     help="tokens decoded per sample in the batched-samples row (EOS ignored)"),
    batch_artifact_tokens: int = typer.Option(BATCHED.artifact_tokens, "--batch-artifact-tokens", min=1, max=1_000_000,
                                              metavar="N",
                                              help="tokens of the artifact grafted in the batched-samples row"),
    only: Optional[BenchSection] = typer.Option(None, "--only", metavar="SECTION", help="run one section alone: batched-samples "
                                                "(writes batched-samples-<model>.json and .md, '-<N>-tokens' added "
                                                "for a --batch-artifact-tokens other than the default) or "
                                                "load-decode (decode against generate and model load: "
                                                "load-decode-<model>.json and .md) or head-to-head (the graft "
                                                "against llama.cpp's state load at the largest --sizes, one "
                                                "repetition of each in turn: head-to-head-<model>.json and .md) "
                                                "or ttft (graft against chunked prefill at --sizes: "
                                                "ttft-<model>.json and .md) or energy (joules per prefill token, "
                                                "decode token and graft at the largest --sizes, idle power "
                                                "subtracted: energy-<model>.json and .md) or sample-counts (decode "
                                                "tokens/s of 1, 4 and 16 samples after one graft of the largest "
                                                "--sizes under --kernels: sample-counts-<model>[-fast].json and "
                                                ".md) or store-scale (router "
                                                "lookups at --store-sizes artifacts, no model: store-scale.json "
                                                "and .md)"),
    smoke: bool = typer.Option(False, "--smoke", help="tiny sizes, one repetition, no cold load or peer: checks it runs"),
    memory_probes: bool = typer.Option(True, "--memory-probes/--no-memory-probes", help="TTFT rows: measure a "
                                       "graft's memory in two fresh processes, each loading the model again"),
) -> None:
    """Measure graft against prefill (TTFT), restore throughput, decode, batched samples, model load, store scale and
    llama.cpp on problems with worked solutions (the text the artifacts are cut from). Writes bench-MODEL.json, .md
    and bench-MODEL-ttft.png into --out (a section alone: the files --only names)."""
    apply_isa(isa)  # before the imports below bring in torch
    from ..bench.report import markdown, only_markdown, write_json_and_markdown, write_outputs
    from ..bench.run import run_bench

    code = code_version()  # the code that starts the benchmark is what its result names
    settings = BenchSettings(sizes=sorted(int_list(sizes, "--sizes")), repeats=repeats, graft_repeats=graft_repeats,
                             decode_tokens=decode_tokens, store_sizes=int_list(store_sizes, "--store-sizes"),
                             cold_load=cold_load, peer_python=peer_python, memory_probes=memory_probes)
    batched = BatchedSettings(samples=batch_samples, tokens=batch_tokens, artifact_tokens=batch_artifact_tokens,
                              repeats=repeats)
    if smoke:
        settings, batched = BenchSettings.smoke_run(), BatchedSettings.smoke_run()
    problem_list = load_problem_set(_problem_file(problems), None, "id", "problem", "answer", "solution")
    session = open_model(ModelOptions(engine=DEFAULT_ENGINE, model=model, dtype=dtype, chunk_size=chunk_size,
                                      threads=threads, isa=isa, device=device, kernels=kernels), architecture_only=True)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            result = run_bench(session, model, problem_list, problems, settings, progress, batched,
                               only.value if only else None)
    except ValueError as exc:
        fail(str(exc))
    stem = _stem(only, model, session.config.dtype, batched, smoke, kernels)
    if only:
        text = only_markdown(result)
        paths = write_json_and_markdown(result, text, out, stem, code)
        console.print(text)
    else:
        paths = write_outputs(result, out, stem, code)
        console.print(markdown(result))
    console.print("wrote " + ", ".join(str(p) for p in paths))


def _stem(only: BenchSection | None, model: str, dtype: str, batched: BatchedSettings, smoke: bool,
          kernels: str = CERTIFIED_KERNELS) -> str:
    """The result files' name: ``bench-<model>[-bf16]``, ``<section>-<model>[-bf16]`` for a section alone
    (``-<N>-tokens`` for a batched-samples artifact size other than the default), ``store-scale`` (no model);
    ``-fast`` for sample-counts under ``kernels`` other than the certified ones; ``-smoke`` for a smoke run. The dtype part is the naming scheme's
    (:func:`graftbench.results.layout.dtype_marker`)."""
    if only == BenchSection.store_scale:
        return "store-scale" + ("-smoke" if smoke else "")
    other_size = (only == BenchSection.batched_samples and batched.artifact_tokens != BATCHED.artifact_tokens
                  and not smoke)
    fast = "-fast" if only == BenchSection.sample_counts and kernels != CERTIFIED_KERNELS else ""
    return (f"{only.value if only else 'bench'}-{model_label(model)}" + dtype_marker(dtype) + fast
            + (f"-{batched.artifact_tokens}-tokens" if other_size else "") + ("-smoke" if smoke else ""))


def bench_isa(
    model: ModelArg = DEFAULT_MODEL,
    dtypes: str = typer.Option(",".join(DTYPE_NAMES), "--dtypes", help="dtypes to measure, comma-separated"),
    problems: ProblemsArg = PROBLEMS, prompt_tokens: PromptTokensArg = 512, decode_tokens: DecodeTokensArg = 64,
    threads: ThreadsArg = 1, repeats: RepeatsArg = 3, out: BenchOutArg = BENCH_OUT,
) -> None:
    """Measure what the within-vendor pin (--isa avx2) costs against native kernels in torch: prefill and decode
    tokens/s per dtype (bench-portable measures the portable pins), each repetition one fresh process per (pin,
    dtype). Writes isa-cost-MODEL.json and .md into --out."""
    from ..bench.isa_cost import markdown, measure, write_outputs

    code = code_version()  # the code that starts the benchmark is what its result names
    names = name_list(dtypes)
    if not names or any(d not in DTYPE_NAMES for d in names):
        fail(f"--dtypes must list {' and/or '.join(DTYPE_NAMES)}, got {dtypes!r}")
    problem_file = _problem_file(problems)
    load_problem_set(problem_file, None, "id", "problem", "answer", "solution")  # a bad problem file is named before any probe
    try:
        with progress_bar("fresh processes", 2 * repeats * len(names)) as advance:
            result = measure(model, names, problem_file, prompt_tokens, decode_tokens, threads, repeats, advance)
    except RuntimeError as exc:
        fail(str(exc))
    paths = write_outputs(result, out, f"isa-cost-{model_label(model)}", code)
    console.print(markdown(result))
    console.print("wrote " + ", ".join(str(p) for p in paths))


def bench_portable(
    rows: Optional[list[str]] = typer.Argument(None, metavar="ENGINE:MODEL",
                                               help="engine and model of each row (default: llama.cpp:smollm2-135m "
                                                    "torch:smollm2-135m)"),
    problems: ProblemsArg = PROBLEMS, prompt_tokens: PromptTokensArg = 512, decode_tokens: DecodeTokensArg = 32,
    threads: ThreadsArg = 1, repeats: RepeatsArg = 3, out: BenchOutArg = BENCH_OUT,
) -> None:
    """Measure what the portable pins cost against native on each engine (torch --isa portable, llama.cpp's portable
    build): prefill and decode tokens/s and, on llama.cpp, a graft plus one token, the pins alternating in fresh
    processes, each repetition one fresh process per (row, pin). Writes portable-cost.json and .md into --out."""
    from ..bench.portable_cost import DEFAULT_ROWS, markdown, measure, parse_rows, write_outputs

    from ..engine.models import ModelError, resolve_model

    code = code_version()  # the code that starts the benchmark is what its result names
    try:
        parsed = parse_rows(rows or DEFAULT_ROWS)
        for _, model in parsed:  # a model no probe could load is named before any probe starts
            resolve_model(model)
    except (ValueError, ModelError) as exc:
        fail(f"bench-portable: {exc}")
    problem_file = _problem_file(problems)
    load_problem_set(problem_file, None, "id", "problem", "answer", "solution")  # a bad problem file is named before any probe
    try:
        with progress_bar("fresh processes", 2 * repeats * len(parsed)) as advance:
            result = measure(parsed, problem_file, prompt_tokens, decode_tokens, threads, repeats,
                             on_probe=lambda _probe: advance())
    except RuntimeError as exc:
        fail(str(exc))
    paths = write_outputs(result, out, code)
    console.print(markdown(result), markup=False, highlight=False)
    console.print("wrote " + ", ".join(str(p) for p in paths), markup=False, highlight=False)


def bench_llama(
    model: ModelArg = DEFAULT_MODEL,
    problems: ProblemsArg = PROBLEMS, sizes: SizesArg = "4096,8192",
    kv_types: str = typer.Option("f16,f16+fa,q8_0", "--kv-types",
                                 help="KV cache variants for decode after a graft: f16 first, then f16+fa (flash "
                                      "attention on), q8_0, q4_0 (flash attention on)"),
    threads: ThreadsArg = 1, repeats: RepeatsArg = 3,
    prefill_tokens: int = typer.Option(512, "--prefill-tokens", min=1, help="tokens in the prefill row"),
    decode_tokens: DecodeTokensArg = 64,
    torch_sizes: Optional[str] = typer.Option(None, "--torch-sizes",
                                              help="sizes for the torch engine's rows beside them (default: --sizes; "
                                                   "'none': its decode row only)"),
    no_torch: bool = typer.Option(False, "--no-torch", help="no torch engine rows"),
    only: Optional[str] = typer.Option(None, "--only", help="'samples': only the N-samples rows (batched, "
                                       "sequential and llama.cpp's own N-sequence decode after a graft of the "
                                       "largest --sizes and after a short prompt, --decode-tokens per sample)"),
    widths: str = typer.Option("1,4,8", "--widths", help="with --only samples: samples per state, comma-separated"),
    out: BenchOutArg = BENCH_OUT,
) -> None:
    """Measure graftbench's llama.cpp engine against raw llama.cpp on one GGUF file, torch's rows beside them, each
    side and row repeated --repeats times.
    Writes llama-engine-MODEL.json and .md into --out (llama-samples-MODEL with --only samples), named -threads-N
    after the model for another thread count."""
    from ..bench.overhead import markdown, parse_variants, run_engine_bench, steps
    from ..bench.history import write_json_and_markdown
    from ..bench.llama_overhead import LlamaBenchSettings, result_name

    code = code_version()  # the code that starts the benchmark is what its result names
    if only is not None:
        if only != "samples":
            fail(f"--only {only!r}: the one section of bench-llama that runs alone is 'samples'")
        return _bench_llama_samples(model, problems, max(int_list(sizes, "--sizes")), int_list(widths, "--widths"),
                                    decode_tokens, repeats, threads, out, code)
    try:
        kinds = parse_variants(kv_types)
    except ValueError as exc:
        fail(str(exc))
    settings = LlamaBenchSettings(tuple(int_list(sizes, "--sizes")), prefill_tokens, decode_tokens, repeats)
    extra = None if no_torch else settings.sizes if torch_sizes is None else \
        () if torch_sizes == "none" else tuple(int_list(torch_sizes, "--torch-sizes"))
    problem_list = load_problem_set(_problem_file(problems), None, "id", "problem", "answer", "solution")
    try:
        with progress_bar("rows", steps(settings, kinds, extra)) as advance:
            result = run_engine_bench(model, problem_list, problems, settings, threads, kinds, extra,
                                      lambda name: advance())
    except (ImportError, RuntimeError, ValueError, FileNotFoundError) as exc:
        fail(f"bench-llama: {exc}")
    paths = write_json_and_markdown(result, markdown(result), out, result_name(model_label(model), threads), code)
    console.print(markdown(result), markup=False, highlight=False)
    console.print("wrote " + ", ".join(str(p) for p in paths))


def _bench_llama_samples(model: str, problems: str, graft_tokens: int, widths: list[int], tokens: int, repeats: int,
                         threads: int, out: Path, code: dict) -> None:
    """bench-llama --only samples (:mod:`graftbench.bench.llama_samples`): parse, run, print, write (naming
    ``code``, the code version read when the command started)."""
    from ..bench.history import write_json_and_markdown
    from ..bench.llama_samples import SamplesBenchSettings, markdown, result_name, run_samples_bench
    from ..settings import cache_root

    settings = SamplesBenchSettings(tuple(widths), graft_tokens, tokens, repeats)
    problem_list = load_problem_set(problems, None, "id", "problem", "answer", "solution")
    try:
        with progress_bar("rows", 1 + 2 * len(widths)) as advance:
            result = run_samples_bench(model, problem_list, problems, settings, threads,
                                       on_row=lambda name: advance(), keep=cache_root() / "bench-llama-samples")
    except (ImportError, RuntimeError, ValueError, FileNotFoundError) as exc:
        fail(f"bench-llama --only samples: {exc}")
    paths = write_json_and_markdown(result, markdown(result), out, result_name(model_label(model), threads), code)
    console.print(markdown(result), markup=False, highlight=False)
    console.print("wrote " + ", ".join(str(p) for p in paths))


def bench_long_context(
    model: ModelArg = "gemma3-270m",
    dtype: DtypeArg = "auto", chunk_size: ChunkSizeArg = DEFAULT_CHUNK_SIZE, isa: IsaArg = None,
    device: DeviceArg = "auto",
    problems: list[str] = typer.Option([PROBLEMS, "../shared/data/aime2025.jsonl"], "--problems",
                                       "-p", help="problems with solutions (repeatable): the text the artifacts are cut from"),
    tokens: int = typer.Option(1_000_000, "--tokens", min=1, help="tokens of KV state to hold in the store"),
    artifact_tokens: int = typer.Option(4096, "--artifact-tokens", min=1, help="tokens per artifact"),
    probes: int = typer.Option(20, "--probes", min=1, help="random artifacts reached (each warm and cold)"),
    store: Path = typer.Option(Path("store-long-context"), "--store", help="store folder (resumable; large)"),
    out: BenchOutArg = BENCH_OUT,
) -> None:
    """Hold far more KV state than the window in the store and time reaching any artifact (a benchmark run).
    Writes long-context-MODEL.json and .md into --out."""
    apply_isa(isa)  # before the imports below bring in torch
    from ..bench.long_context import measure
    from ..bench.report import long_context_markdown, write_long_context
    from ..bench.workload import corpus_ids

    code = code_version()  # the code that starts the benchmark is what its result names
    problem_list = [p for source in problems
                    for p in load_problem_set(_problem_file(source), None, "id", "problem", "answer", "solution")]
    session = open_model(ModelOptions(engine=DEFAULT_ENGINE, model=model, dtype=dtype, chunk_size=chunk_size, isa=isa,
                                      device=device), architecture_only=True)
    try:
        corpus = corpus_ids(session, problem_list)
        query = session.query_ids(problem_list[0].problem)
        with progress_bar("depositing long-context artifacts", -(-tokens // artifact_tokens)) as advance:
            result = measure(session, model, store, corpus, artifact_tokens, tokens, probes, query, advance)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    result["problems"] = problems
    paths = write_long_context(result, out, f"long-context-{model_label(model)}", code)
    console.print(long_context_markdown(result))
    console.print("wrote " + ", ".join(str(p) for p in paths))
