"""Settings and their defaults, in one place: the command line, the library and the tests read them from here.

Imports no torch, so the command line can build its options before a model (or torch) is loaded.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .problems.shards import parse_shard
from .verify.answers import VERIFIER_VERSION

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_DTYPE = "float32"
DTYPE_NAMES = ("float32", "bfloat16")
DEFAULT_CHUNK_SIZE = 256  # tokens per prefill forward; boundaries restart at each segment's start
DEFAULT_RUNS_DIR = "runs"
DEFAULT_STORE = "store"
LAYOUT_CHOICES = ("auto", "answer", "solve")
MODES = ("text", "program")  # text: the model's own final answer; program: a Python program run in the sandbox
GRAFT_FROM_CHOICES = ("nearest", "other-family", "top-ranked")
EXAMPLE_AS_CHOICES = ("graft", "prompt")
SAMPLED_TEMPERATURE = 0.7  # the documented setting for sampled runs (with top-p 0.95), as in the runs
SAMPLED_TOP_P = 0.95
# The kernel configurations (``--kernels``, recorded in the pin's ``kernels`` field; docs/gpu.md): ``certified``,
# the one whose bytes check-exact certifies (on CUDA the CUDA pin: deterministic algorithms, the math attention
# kernel, eager), and ``fast``, torch's own kernel choice, uncertified.
CERTIFIED_KERNELS = "certified"
KERNEL_CONFIGS = (CERTIFIED_KERNELS, "fast")


def require_certified_kernels(kernels: str, what: str) -> None:
    """Raise ``ValueError`` naming ``what`` (e.g. ``check-exact``) unless ``kernels`` is :data:`CERTIFIED_KERNELS`:
    a byte-exactness claim is made only under the certified kernels."""
    if kernels != CERTIFIED_KERNELS:
        raise ValueError(f"{what} certifies byte-exactness and runs only under --kernels {CERTIFIED_KERNELS}: "
                         f"--kernels {kernels} lets torch choose its kernels (no deterministic algorithms, any "
                         "attention backend), so its bytes are not reproducible and are never certified")


def cache_root() -> Path:
    """The user cache folder for de-quantized weights, assembled GGUF files and object-store caches:
    ``$GRAFTBENCH_CACHE``, else ``~/.cache/graftbench``."""
    return Path(os.environ.get("GRAFTBENCH_CACHE", Path.home() / ".cache" / "graftbench"))


@dataclass(frozen=True)
class ModelOptions:
    """The model a command runs and how it is opened, as the command's options give them: ``engine`` (a name in
    :mod:`graftbench.engine.registry`), ``model`` (alias, hub id, folder or ``.gguf`` file), ``dtype`` (a dtype name
    or ``auto``), ``chunk_size`` (prefill chunk, tokens), ``threads`` (intra-op threads; ``None``: the engine's
    default), ``isa`` (the instruction-set pin asked for; ``None``: ``$GRAFTBENCH_ISA``, else ``native``), and
    ``device``, ``kernels``, ``kv_type``, ``flash_attn`` as :class:`graftbench.engine.base.EngineOptions` takes
    them. One value, built by the command and passed down to where the model is opened."""

    engine: str
    model: str
    dtype: str = "auto"
    chunk_size: int = DEFAULT_CHUNK_SIZE
    threads: int | None = None
    isa: str | None = None
    device: str = "auto"
    kernels: str = CERTIFIED_KERNELS
    kv_type: str = "f16"
    flash_attn: bool | None = None

    def engine_fields(self) -> dict:
        """The fields :class:`graftbench.engine.base.EngineOptions` takes (all but ``engine`` and ``isa``)."""
        return {name: value for name, value in asdict(self).items() if name not in ("engine", "isa")}


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one model-written program's run in the sandbox (:mod:`graftbench.programs.sandbox`).

    ``cpu_s``: CPU seconds, of each process (``RLIMIT_CPU``) and of the whole run (its cgroup's CPU time, read by
    graftbench); ``wall_s``: wall seconds from the start of the sandbox to the program's exit (its setup included);
    ``memory_bytes``: memory of the whole run, every process together, memfd and tmpfs pages included (its
    cgroup's memory and memory+swap caps); ``output_bytes``: the most bytes read of stdout, and of stderr, each (the
    program is killed past it); ``file_bytes``: the largest file it may write (``RLIMIT_FSIZE``), and the largest
    program text that is run at all; ``disk_bytes``: the size of each of its two private tmpfs (its folder and
    ``/tmp``); ``processes``: processes and threads of the run (its cgroup's ``pids.max``, besides bubblewrap's
    monitor); ``open_files``: file descriptors per process (``RLIMIT_NOFILE``).

    Raises ``ValueError`` for a limit that is not positive.
    """

    cpu_s: int = 10
    wall_s: float = 20.0
    memory_bytes: int = 1 << 30
    output_bytes: int = 64 << 10
    file_bytes: int = 16 << 20
    disk_bytes: int = 64 << 20
    processes: int = 32
    open_files: int = 64

    def __post_init__(self):
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"sandbox limit {name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class EvalSettings:
    """Settings of a solve/eval run. Budgets are in decode tokens; ``min_similarity`` in [0, 1];
    ``verifier_version`` names the answer-verification rules its samples are scored under
    (:data:`graftbench.verify.answers.VERIFIER_VERSION` for a new run).

    ``mode``: ``text`` (the model's own final answer is judged) or ``program`` (the model writes a Python program
    that runs in the sandbox under the ``sandbox`` limits, and the last line it prints is judged:
    :mod:`graftbench.programs.mode`); an unknown mode raises ``ValueError``.
    ``layout``: the query's layout after a graft (``answer``, ``solve``, or ``auto``: see :meth:`query_layout`).
    ``samples`` per problem, decoded greedily at ``temperature`` 0 (one sample) or drawn at ``temperature`` within
    the ``top_p`` nucleus with seeds derived from ``seed`` (:func:`graftbench.util.seeds.sample_seed`).
    ``graft_from``: ``nearest`` (the router's choice), ``other-family`` (the control: the nearest deposit of
    another family, so that relevance can be told from the mere presence of a worked solution) or ``top-ranked``
    (the gate off: the top-ranked deposit of the whole library for every problem, band candidate or not).
    ``round`` labels a run of the flywheel over rounds (:mod:`graftbench.eval.flywheel`); it changes nothing
    else. ``ranker`` records how similar routes were ranked (:data:`graftbench.store.router.RANKERS`: ``bm25`` by
    default). ``shard`` (``"i/N"``, :mod:`graftbench.problems.shards`) runs only the problems of that shard; ``None``
    runs them all.
    ``example_as``: how a routed example reaches the model: ``graft`` (its KV restored at its own positions) or
    ``prompt`` (the control arm: the same artifact's token ids prefilled as plain prompt text with the pinned chunk
    schedule, then the same query; its first logits equal the graft's byte for byte where the graft is exact).
    ``assume_kind``: graft an artifact that records no kind of CPU as if this machine had written it
    (:mod:`graftbench.store.writers`); without it such an artifact is refused like one of another pin.

    Raises ``ValueError`` for an unknown layout, ``graft_from`` or ``example_as`` (``prompt`` also needs ``graft``), several greedy samples, a malformed shard, or a
    shard with a run-wide ``token_budget``.
    """

    max_new_tokens: int = 1024
    token_budget: int | None = None
    graft: bool = False
    certify: bool = False
    strict: bool = False
    min_similarity: float = 0.6
    verifier_version: int = VERIFIER_VERSION
    layout: str = "auto"
    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    graft_from: str = "nearest"
    round: int | None = None
    ranker: str = "bm25"
    mode: str = "text"
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)
    shard: str | None = None
    example_as: str = "graft"
    assume_kind: bool = False

    def __post_init__(self):
        if self.example_as not in EXAMPLE_AS_CHOICES:
            raise ValueError(f"example_as {self.example_as!r} is not one of {', '.join(EXAMPLE_AS_CHOICES)}")
        if self.example_as == "prompt" and not self.graft:
            raise ValueError("an example given as prompt text is routed as a graft is: add --graft")
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.layout not in LAYOUT_CHOICES:
            raise ValueError(f"layout {self.layout!r} is not one of {', '.join(LAYOUT_CHOICES)}")
        if self.graft_from not in GRAFT_FROM_CHOICES:
            raise ValueError(f"graft_from {self.graft_from!r} is not one of {', '.join(GRAFT_FROM_CHOICES)}")
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(f"{self.samples} greedy samples of a problem would be identical: give a temperature "
                             f"above 0 (e.g. {SAMPLED_TEMPERATURE}) or one sample")
        if self.shard is not None:
            parse_shard(self.shard)
            if self.token_budget is not None:
                raise ValueError("a token budget for the whole run cannot be split over shards: give "
                                 "--max-new-tokens per problem, or run without --shard")

    @property
    def sampled(self) -> bool:
        """Whether decoding draws tokens (temperature above 0) rather than taking the argmax."""
        return self.temperature > 0

    def query_layout(self, route_kind: str) -> str:
        """The layout of the query after a graft routed as ``route_kind``: the forced one, or under ``auto``
        ``answer`` on an exact route (a recurring problem) and ``solve`` on a similar one (a new problem)."""
        if self.layout != "auto":
            return self.layout
        return "answer" if route_kind == "exact" else "solve"

    def to_dict(self) -> dict:
        """The settings a run folder and its manifest record. In ``text`` mode ``mode`` and ``sandbox`` are left
        out, so text runs record exactly what they did before program mode (a settings dict without ``mode`` is
        text mode); a program-mode run records them and its layout (``program_layout``). ``example_as`` is
        recorded only when it is ``prompt`` (a settings dict without it grafted), ``assume_kind`` only when set."""
        record = _with_mode(asdict(self))
        if record["example_as"] == "graft":
            record.pop("example_as")
        if not record["assume_kind"]:
            record.pop("assume_kind")
        return record


def _with_mode(record: dict) -> dict:
    if record.get("mode") == "text":
        record.pop("mode")
        record.pop("sandbox", None)
    else:
        from .problems.prompts import PROGRAM_LAYOUT

        record["program_layout"] = dict(PROGRAM_LAYOUT)
    return record


@dataclass(frozen=True)
class FlywheelSettings:
    """``graftbench run``: built-in problems per family and the decode budget per problem (tokens)."""

    per_family: int = 2
    max_new_tokens: int = 256
    prefix: str = "flywheel"


@dataclass(frozen=True)
class RoundsSettings:
    """``graftbench flywheel``: ``rounds`` after round 0, ``per_family`` new built-in problems per family per round
    (drawn with ``pool_seed``), ``samples`` per problem at ``temperature`` within ``top_p`` (seed ``seed``), and
    the decode budget per sample (tokens). ``mode``: ``text`` or ``program`` (every run's, and programs are re-run
    in the sandbox before a deposit)."""

    rounds: int = 3
    per_family: int = 2
    samples: int = 4
    temperature: float = SAMPLED_TEMPERATURE
    top_p: float = SAMPLED_TOP_P
    seed: int = 0
    pool_seed: int = 0
    max_new_tokens: int = 256
    prefix: str = "rounds"
    mode: str = "text"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")

    def to_dict(self) -> dict:
        """Every field (``mode`` left out in ``text`` mode, as :meth:`EvalSettings.to_dict` does)."""
        return _with_mode(asdict(self))


@dataclass
class BenchSettings:
    """What ``graftbench bench`` measures. Sizes in tokens; repeats are timed repetitions (medians reported)."""

    sizes: list[int] = field(default_factory=lambda: [512, 2048, 4096, 8192])
    repeats: int = 3
    graft_repeats: int = 5
    decode_tokens: int = 128
    decode_repeats: int = 3
    store_sizes: list[int] = field(default_factory=lambda: [10, 1000, 100_000])
    cold_load: bool = True
    peer_python: Path | None = Path(".venv-peer/bin/python")
    head_to_head_repeats: int = 10  # pairs of graft and llama.cpp state load, alternating (bench/head_to_head.py)
    bit_flips: int = 64
    smoke: bool = False
    memory_probes: bool = True  # TTFT's graft-memory probes, each a fresh process that loads the model

    @classmethod
    def smoke_run(cls) -> "BenchSettings":
        """Tiny sizes, one repetition, no cold load or peer: checks that the benchmark runs."""
        return cls(sizes=[64, 160], repeats=1, graft_repeats=2, decode_tokens=8, decode_repeats=1,
                   store_sizes=[10, 100], cold_load=False, peer_python=None, bit_flips=8, smoke=True)


GOAL_DECODE_RATIO = 3.0  # the batched-samples row's goal: batched decode tokens/s over one sample at a time


@dataclass(frozen=True)
class BatchedSettings:
    """``samples`` decoded as one batch after one graft, against one at a time; ``tokens`` decoded per sample (EOS
    ignored); an artifact of ``artifact_tokens`` tokens; ``repeats`` timed repetitions of each side (medians
    reported); sampling at ``temperature`` within the ``top_p`` nucleus, seeds derived from ``seed``.

    Raises ``ValueError`` for a count below 1.
    """

    samples: int = 8
    tokens: int = 64
    artifact_tokens: int = 2048
    repeats: int = 3
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0

    def __post_init__(self):
        for name in ("samples", "tokens", "artifact_tokens", "repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"batched samples: {name} must be at least 1, got {getattr(self, name)}")

    @classmethod
    def smoke_run(cls) -> "BatchedSettings":
        """Tiny sizes: checks that the row runs; its figures mean nothing."""
        return cls(samples=3, tokens=4, artifact_tokens=64, repeats=1)

    def to_dict(self) -> dict:
        return asdict(self)
