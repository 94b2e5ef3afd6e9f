"""Every option two or more commands share, defined once as a typed alias (``Annotated[type, typer.Option(...)]``).

A command lists each option it takes by name in its own signature, with its default there
(``model: ModelArg = DEFAULT_MODEL``), so a reader or a tool follows any option from the command line into the
command, and from there as a value: the model and engine options become one
:class:`graftbench.settings.ModelOptions`, the decoding ones one
:class:`graftbench.settings.EvalSettings`. The callbacks here only check a value; nothing is remembered between
invocations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..scale.dispatch import RAY_EXTRA, ClusterOptions
from ..settings import DTYPE_NAMES, KERNEL_CONFIGS, SAMPLED_TEMPERATURE, SAMPLED_TOP_P, EvalSettings

EVAL, CLUSTER = EvalSettings(), ClusterOptions()
KV_TYPES = ("f16", "q8_0", "q4_0")


def _check_device(value: str) -> str:
    from ..engine.device import DeviceError, check_name

    try:
        return check_name(value)
    except DeviceError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _check_engine(value: str) -> str:
    from ..engine.registry import engine_names

    if value not in engine_names():
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(engine_names())}")
    return value


def _one_of(choices: tuple[str, ...]):
    def check(value: str | None) -> str | None:
        if value is not None and value not in choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}")
        return value
    return check


# ---- the model and its engine: together one ModelOptions ----
ModelArg = Annotated[str, typer.Option("--model", "-m", help="alias (smollm2-135m, gemma3-270m; after make models "
                                       "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b), hub id, folder or .gguf")]
EngineArg = Annotated[str, typer.Option("--engine", callback=_check_engine, help=(
    "torch, or llama.cpp (the GGUF file run by llama.cpp with its weights as stored: needs the llama extra; "
    "docs/llama-cpp.md), or an engine registered from outside; an option the engine does not take (--dtype, "
    "--device, --kernels or --isa on llama.cpp, --kv-type or --flash-attn on torch) is refused (docs/engines.md)"))]
DtypeArg = Annotated[str, typer.Option("--dtype", help="auto (float32 on the CPU, bfloat16 on CUDA), "
                                       + " or ".join(DTYPE_NAMES) + "; part of the pinned config")]
ChunkSizeArg = Annotated[int, typer.Option("--chunk-size", min=1,
                                           help="prefill chunk size in tokens (part of the pinned config)")]
IsaArg = Annotated[Optional[str], typer.Option("--isa", help=escape(
    "instruction-set pin: native (fastest), avx2 (the same bytes on AVX-512 and AVX2 CPUs of one vendor) or "
    "portable (avx2 with MKL's COMPATIBLE branch: the candidate across vendors); part of the pinned config; "
    "with --expect (check-exact, trace-pair) the expectation's pin unless given "
    "[default: native, or $GRAFTBENCH_ISA]"))]
ThreadsArg = Annotated[Optional[int], typer.Option("--threads", min=1, help=(
    "threads the engine runs on (torch's intra-op threads, llama.cpp's n_threads), part of the pinned config; a "
    "benchmark sets them in each measuring process, for every engine measured; with no default shown, the "
    "engine's own count ($OMP_NUM_THREADS where set)"))]
DeviceArg = Annotated[str, typer.Option("--device", envvar="GRAFTBENCH_DEVICE", callback=_check_device, help=(
    "auto (CUDA when torch sees a GPU, else the CPU), cpu, cuda or cuda:N; on CUDA the CUDA pin is set and "
    "recorded (docs/gpu.md)"))]
KernelsArg = Annotated[str, typer.Option("--kernels", envvar="GRAFTBENCH_KERNELS", callback=_one_of(KERNEL_CONFIGS),
                                         help=escape(
    "certified: the kernels check-exact certifies (on CUDA deterministic algorithms and the math attention "
    "kernel); fast: torch's own choice (flash or memory-efficient attention on CUDA, no deterministic algorithms; "
    "on the CPU the same kernels), recorded in the pin as uncertified: check-exact and --certify refuse it, and "
    "certified runs refuse its artifacts (docs/gpu.md)"))]
KvTypeArg = Annotated[str, typer.Option("--kv-type", callback=_one_of(KV_TYPES),
                                        help="llama.cpp KV cache type: f16, q8_0 or q4_0 (pinned)")]
FlashAttnArg = Annotated[Optional[bool], typer.Option(
    "--flash-attn/--no-flash-attn",
    help="llama.cpp flash attention (pinned) [default: on for a quantized KV cache, else off]")]

# ---- problems ----
ProblemsArg = Annotated[str, typer.Option("--problems", "-p",
                                          help="'builtin', a local jsonl/json/parquet/csv, or a hub id")]
LimitArg = Annotated[Optional[int], typer.Option("--limit", min=1, help="use only the first N problems")]
ShardArg = Annotated[Optional[str], typer.Option("--shard", help=(
    "run only shard i of N (i/N, from 0): a problem's shard is SHA-256 of its id mod N, whatever the file's order; "
    "merge the shards with graftbench merge"))]
IdFieldArg = Annotated[str, typer.Option("--id-field", help="problem set column holding each problem's id")]
ProblemFieldArg = Annotated[str, typer.Option("--problem-field", help="problem set column holding the problem text")]
AnswerFieldArg = Annotated[str, typer.Option("--answer-field", help="problem set column holding the answer key")]
SolutionFieldArg = Annotated[str, typer.Option("--solution-field",
                                               help="problem set column holding a worked solution (optional)")]
ModeArg = Annotated[str, typer.Option("--mode", help=(
    "text (the model's own final answer is judged) or program (the model writes a Python program, run in the "
    "sandbox; the last line it prints is judged)"))]

# ---- decoding: together (with the graft settings) one EvalSettings ----
MaxNewTokensArg = Annotated[int, typer.Option("--max-new-tokens", min=1,
                                              help="decode budget per problem, for each of its samples (tokens)")]
TokenBudgetArg = Annotated[Optional[int], typer.Option("--token-budget", min=1,
                                                       help="decode budget for the whole run (tokens)")]
SamplesArg = Annotated[int, typer.Option("--samples", min=1, max=1024, help=(
    "samples per problem, decoded as one batch after one prefill or graft (N > 1 needs --temperature above 0)"))]
TemperatureArg = Annotated[float, typer.Option("--temperature", min=0.0, max=10.0,
                                               help=f"0 decodes greedily; above 0 samples (e.g. {SAMPLED_TEMPERATURE})")]
TopPArg = Annotated[float, typer.Option("--top-p", min=0.01, max=1.0, help=(
    f"nucleus: sample among the most likely tokens holding this much probability (e.g. {SAMPLED_TOP_P})"))]
SeedArg = Annotated[int, typer.Option("--seed", min=0, max=2**31 - 1,
                                      help="run seed; each sample's seed derives from (run seed, problem id, sample index)")]

# ---- graft and store ----
StoreArg = Annotated[str, typer.Option("--store", envvar="GRAFTBENCH_STORE", help=(
    "artifact store: a folder, or a URL (s3://bucket/prefix, file:///path, memory://name)"))]
LayoutArg = Annotated[str, typer.Option("--layout", help=(
    "query layout after a graft: answer (the answer cue), solve (a full solution), or auto (answer on exact routes, "
    "solve on similar ones)"))]
GraftFromArg = Annotated[str, typer.Option("--graft-from", help=(
    "nearest (the router's choice), other-family (the control: the nearest deposit of another family, no "
    "similarity gate) or top-ranked (the gate off: the top-ranked deposit of the whole library for every problem)"))]
MinSimilarityArg = Annotated[float, typer.Option("--min-similarity", min=0.0, max=1.0, help=(
    "the router's confidence gate for a route that is not exact: the difflib ratio of the top candidate (0-1)"))]
ExampleAsArg = Annotated[str, typer.Option("--example-as", help=(
    "with --graft: graft (the routed example's KV restored) or prompt (the control: the same example's tokens "
    "prefilled as plain prompt text, then the same query; its first logits equal the graft's)"))]

# ---- an exactness expectation (check-exact, trace-pair) ----
ExpectArg = Annotated[Optional[Path], typer.Option("--expect", help=(
    "an expectation (a manifest written by check-exact --write-expect), run under its pin (engine, model, chunk "
    "size, threads, problem set; torch's dtype and --isa, llama.cpp's build and cache options): check-exact "
    "replays its pairs instead of measuring (a bare file name: the one recorded for this kind of CPU), trace-pair "
    "traces one of them; --model, when given, is opened in place of the recorded model (its weights must be the "
    "recorded ones), and is needed when the recorded model is a path or hub id, which is never opened"))]

# ---- the flywheel (run, flywheel) ----
RunPrefixArg = Annotated[str, typer.Option("--prefix", help=(
    "prefix of the names of the runs written: run's <prefix>-baseline and <prefix>-graft; flywheel's "
    "<prefix>-r<round>-<arm> and <prefix>-summary.json"))]

# ---- benchmarks (bench, bench-isa, bench-portable, bench-llama, bench-long-context, route-quality); each command
# gives its own default ----
PromptTokensArg = Annotated[int, typer.Option("--prompt-tokens", min=1,
                                              help="tokens of problem text prefilled as the prompt")]
DecodeTokensArg = Annotated[int, typer.Option("--decode-tokens", min=2, help=(
    "greedy tokens decoded per measurement (tok/s counts the steps after the first, so at least 2)"))]
SizesArg = Annotated[str, typer.Option("--sizes", help=(
    "sizes in tokens of the KV states cut from the problems' text and grafted, comma-separated"))]
RepeatsArg = Annotated[int, typer.Option("--repeats", min=1,
                                         help="repetitions of each measurement (medians reported)")]
BenchOutArg = Annotated[Path, typer.Option("--out", help=(
    "folder the result files are written into (the command's help names them)"))]

# ---- output ----
RunsDirArg = Annotated[str, typer.Option("--runs-dir", envvar="GRAFTBENCH_RUNS_DIR",
                                         help="folder holding one folder per run")]
RunArg = Annotated[Optional[str], typer.Option("--run", help="run name (resumes if it exists)")]

# ---- what verify-manifest and report may be told to accept as not checked (else exit 3, exit 4) ----
AllowUnanchoredArg = Annotated[bool, typer.Option("--allow-unanchored", help=(
    "accept a run whose problem set could not be anchored (a source graftbench cannot rebuild): say so and go on, "
    "instead of exit 3"))]
AllowUncheckedPayloadsArg = Annotated[bool, typer.Option("--allow-unchecked-payloads", help=(
    "accept artifact payloads that were not checked (no --store, or absent from it): say so and exit 0 instead of "
    "4"))]

# ---- Ray workers: together one ClusterOptions ----
ExecutorArg = Annotated[str, typer.Option("--executor", help=escape(
    "process: this process loads the model and runs every problem; ray: Ray workers, each loading the model once "
    f"({RAY_EXTRA})"))]
WorkersArg = Annotated[Optional[int], typer.Option("--workers", min=1, help=escape(
    "with --executor ray: workers to start [default: as many as the cluster's free CPUs hold at --worker-threads "
    "each]"))]
WorkerThreadsArg = Annotated[int, typer.Option("--worker-threads", min=1, help=(
    "with --executor ray: torch threads per worker and the CPUs each reserves (part of the pin: deposit under the "
    "same count)"))]
AddressArg = Annotated[Optional[str], typer.Option("--address", help=escape(
    "with --executor ray: join this running Ray cluster (host:port, or auto) [default: start a local one for the "
    "run and stop it at the end]"))]
ProblemTimeoutArg = Annotated[float, typer.Option("--problem-timeout", min=1.0, help=escape(
    "with --executor ray: seconds a worker may hold one problem; past it the worker counts as hung, is stopped, "
    "and the problem goes to another"))]

