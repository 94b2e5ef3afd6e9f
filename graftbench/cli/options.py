"""The run commands' shared options, each defined once, and the signatures built from them.

``solve`` and ``eval`` share most of their options; each group below lists them once, in the order ``--help``
shows them, and :func:`with_options` gives a command the signature typer reads: the groups with the command's own
parameters at :data:`OWN`. The command receives every option as a keyword argument.
"""

from __future__ import annotations

from inspect import Parameter, Signature, signature
from typing import Callable, Optional

import typer
from rich.markup import escape

from ..scale.dispatch import RAY_EXTRA, ClusterOptions
from ..settings import CERTIFIED_KERNELS
from .common import (EVAL, AnswerFieldOpt, ChunkOpt, DeviceOpt, DtypeOpt, EngineOpt, FlashAttnOpt, KvTypeOpt, IdFieldOpt, IsaOpt, LimitOpt, ModelOpt, ModeOpt,
                     ProblemFieldOpt, ProblemsOpt, RunsOpt, SamplesOpt, SeedOpt, ShardOpt, SolutionFieldOpt,
                     TemperatureOpt, TopPOpt, remember_kernels)

CLUSTER = ClusterOptions()


# The kernel configuration, defined here once for every command that takes it (solve, eval, deposit, check-exact,
# bench); :func:`graftbench.cli.common.kernels_option` reads it where the model is loaded.
KernelsOpt = typer.Option(CERTIFIED_KERNELS, "--kernels", envvar="GRAFTBENCH_KERNELS", callback=remember_kernels,
                          help=escape(
    "certified: the kernels check-exact certifies (on CUDA deterministic algorithms and the math attention "
    "kernel); fast: torch's own choice (flash or memory-efficient attention on CUDA, no deterministic algorithms; "
    "on the CPU the same kernels), recorded in the pin as uncertified: check-exact and --certify refuse it, and "
    "certified runs refuse its artifacts (docs/gpu.md)"))
OWN = object()  # where a command's own parameters go among the groups


def _option(name: str, annotation, default) -> Parameter:
    return Parameter(name, Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


RUN = [
    _option("model", str, ModelOpt), _option("problems", str, ProblemsOpt), _option("dtype", str, DtypeOpt),
    _option("chunk_size", int, ChunkOpt), _option("isa", Optional[str], IsaOpt), _option("device", str, DeviceOpt),
    _option("kernels", str, KernelsOpt),
    _option("engine", str, EngineOpt), _option("kv_type", str, KvTypeOpt),
    _option("flash_attn", Optional[bool], FlashAttnOpt), _option("runs_dir", str, RunsOpt),
    _option("run", Optional[str], typer.Option(None, "--run", help="run name (resumes if it exists)")),
    _option("limit", Optional[int], LimitOpt),
    _option("max_new_tokens", int, typer.Option(EVAL.max_new_tokens, "--max-new-tokens", min=1,
                                                help="decode budget per problem (tokens)")),
    _option("token_budget", Optional[int], typer.Option(None, "--token-budget", min=1,
                                                        help="decode budget for the whole run (tokens)")),
]
SAMPLING = [
    _option("samples", int, SamplesOpt), _option("temperature", float, TemperatureOpt),
    _option("top_p", float, TopPOpt), _option("seed", int, SeedOpt), _option("shard", Optional[str], ShardOpt),
]
CLUSTER_OPTIONS = [
    _option("executor", str, typer.Option("process", "--executor", help=escape(
        "process: this process loads the model and runs every problem; ray: Ray workers, each loading the model "
        f"once ({RAY_EXTRA})"))),
    _option("workers", Optional[int], typer.Option(CLUSTER.workers, "--workers", min=1, help=escape(
        "with --executor ray: workers to start [default: as many as the cluster's free CPUs hold at "
        "--worker-threads each]"))),
    _option("worker_threads", int, typer.Option(CLUSTER.threads, "--worker-threads", min=1, help=(
        "with --executor ray: torch threads per worker and the CPUs each reserves (part of the pin: deposit under "
        "the same count)"))),
    _option("address", Optional[str], typer.Option(CLUSTER.address, "--address", help=escape(
        "with --executor ray: join this running Ray cluster (host:port, or auto) [default: start a local one for "
        "the run and stop it at the end]"))),
    _option("problem_timeout", float, typer.Option(CLUSTER.problem_timeout_s, "--problem-timeout", min=1.0,
                                                   help=escape(
        "with --executor ray: seconds a worker may hold one problem; past it the worker counts as hung, is "
        "stopped, and the problem goes to another"))),
]
FIELDS = [
    _option("id_field", str, IdFieldOpt), _option("problem_field", str, ProblemFieldOpt),
    _option("answer_field", str, AnswerFieldOpt), _option("solution_field", str, SolutionFieldOpt),
    _option("mode", str, ModeOpt),
]


def with_options(*groups) -> Callable:
    """Give a command the signature of ``groups`` (lists of parameters, and :data:`OWN` for the command's own
    keyword parameters, in place), which typer reads for its options and ``--help``."""
    def wrap(command: Callable) -> Callable:
        own = [p.replace(kind=Parameter.KEYWORD_ONLY) for p in signature(command).parameters.values()
               if p.kind is not Parameter.VAR_KEYWORD]
        params = [p for group in groups for p in (own if group is OWN else group)]
        command.__signature__ = Signature(params, return_annotation=None)
        return command
    return wrap
