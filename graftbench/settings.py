"""Settings and their defaults, in one place: the command line, the library and the tests read them from here.

Imports no torch, so the command line can build its options before a model (or torch) is loaded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from .verify import VERIFIER_VERSION

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_DTYPE = "float32"
DTYPE_NAMES = ("float32", "bfloat16")
DEFAULT_CHUNK_SIZE = 256  # tokens per prefill forward; boundaries restart at each segment's start
DEFAULT_RUNS_DIR = "runs"
DEFAULT_STORE = "store"


@dataclass(frozen=True)
class EvalSettings:
    """Settings of a solve/eval run. Budgets are in decode tokens; ``min_similarity`` in [0, 1];
    ``verifier_version`` names the answer-verification rules its samples are scored under
    (:data:`graftbench.verify.VERIFIER_VERSION` for a new run)."""

    max_new_tokens: int = 1024
    token_budget: int | None = None
    graft: bool = False
    certify: bool = False
    strict: bool = False
    min_similarity: float = 0.6
    verifier_version: int = VERIFIER_VERSION

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FlywheelSettings:
    """``graftbench run``: built-in problems per family and the decode budget per problem (tokens)."""

    per_family: int = 2
    max_new_tokens: int = 256
    prefix: str = "flywheel"


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
    bit_flips: int = 64
    smoke: bool = False

    @classmethod
    def smoke_run(cls) -> "BenchSettings":
        """Tiny sizes, one repetition, no cold load or peer: checks that the benchmark runs."""
        return cls(sizes=[64, 160], repeats=1, graft_repeats=2, decode_tokens=8, decode_repeats=1,
                   store_sizes=[10, 100], cold_load=False, peer_python=None, bit_flips=8, smoke=True)
