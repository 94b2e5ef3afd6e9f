"""The engine seam: what a run needs from an engine (:class:`EngineSession`), how an engine is opened
(:class:`EngineFactory`), what it can do (its capabilities) and how a missing capability is refused
(:class:`CapabilityError`).

Every stage above ``engine/`` (eval, scale, the CLI, the benchmarks) reaches a model through these names only; an
engine lives in its own folder (``engine/torch/``, ``engine/llama_cpp/``) and is chosen by name through
:mod:`graftbench.engine.registry`. Imports no torch and no llama.cpp.

Positions: a cache holds the tokens ``0..n-1``; a prefill appends at ``n``; a graft restores an artifact's state at
the positions it was captured at. Logits are what the engine computes, one row ``[vocab]`` per position, as the
engine's own array type (a torch tensor, a numpy array); :meth:`EngineSession.logits_sha256` is the SHA-256 of their
raw bytes, which manifests record and compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Protocol, runtime_checkable

# Capabilities an engine may declare (EngineFactory.capabilities). A stage that needs one asks
# :func:`require`, which raises CapabilityError naming the engine and the capability when it is missing.
SAMPLE_BATCH = "sample-batch"  # N samples of one problem decoded as one batch after one prefill
RAY = "ray"  # runs on Ray workers (`--executor ray`): a worker opens it from an EngineOptions
EXACTNESS_CONTROLS = "exactness-controls"  # check-exact --controls: its negative controls (ExactnessChecks.controls)
EXTEND_EXPECTATION = "extend-expectation"  # check-exact --extend: a committed expectation extended by more pairs
REPLAY_RANGE = "replay-range"  # check-exact --expect --pairs START:END with START > 0
ACROSS_CPU_KINDS = "across-cpu-kinds"  # check-exact --expect --across-cpu-kinds: a pin differing in CPU features alone
LAYER_TRACE = "layer-trace"  # trace-pair: each layer's output hashes through one pair (EngineSession.layer_trace)
BENCHMARK = "benchmark"  # graftbench bench: its own operations timed one by one (EngineFactory.benchmark_module)
FAULT_SCENARIOS = "fault-scenarios"  # the fault harness: artifacts of its own format built and grafted
# (EngineFactory.faults_module)
CONTROL_SHIFTS = (8, 128, 1024)  # positions the shift-k exactness controls move a restored state by (every engine)
CAPABILITIES = {
    SAMPLE_BATCH: "sampling in a batch (N samples after one prefill)",
    RAY: "Ray workers (--executor ray)",
    EXACTNESS_CONTROLS: "exactness controls (check-exact --controls)",
    EXTEND_EXPECTATION: "extending an expectation (check-exact --extend)",
    REPLAY_RANGE: "replaying a range of pairs (check-exact --pairs START:END, START > 0)",
    LAYER_TRACE: "tracing each layer through a pair (trace-pair)",
    BENCHMARK: "the benchmark's measurements of its own operations (graftbench bench)",
    FAULT_SCENARIOS: "the fault harness's artifact scenarios (benchmarks/faults.py)",
    ACROSS_CPU_KINDS: "comparing a certificate on another kind of CPU (check-exact --across-cpu-kinds): an "
                      "engine pinned by its own instruction-set option is compared wherever that pin runs",
}


class CapabilityError(ValueError):
    """``engine`` lacks ``capability`` (a key of :data:`CAPABILITIES`) that ``what`` needs. ``str()`` names both."""

    def __init__(self, engine: str, capability: str, what: str = ""):
        self.engine, self.capability = engine, capability
        needed = f"{what} needs " if what else "needs "
        super().__init__(f"engine {engine!r} does not support {CAPABILITIES.get(capability, capability)}: "
                         f"{needed}{capability!r}, which it does not declare")


class EngineOpenError(ValueError):
    """An engine could not be opened: the message names the model (or file) and what is wrong."""


@dataclass(frozen=True)
class EngineOptions:
    """What a command asks of an engine when it opens a model, as given (an engine reads the fields it takes and
    says in :attr:`EngineFactory.options` which those are).

    ``model``: alias, hub id, folder or file; ``dtype``: a dtype name or ``auto``; ``chunk_size``: prefill chunk
    (tokens); ``threads``: intra-op threads (``None``: the engine's default); ``device``: a device name (``auto``,
    ``cpu``, ``cuda``, ``cuda:N``; resolved by the engine); ``kernels``: ``certified`` or ``fast``; ``kv_type``,
    ``flash_attn``, ``n_ctx``: llama.cpp-style KV cache type, flash attention (``None``: the engine's default) and
    context size (tokens; ``None``: the engine's default)."""

    model: str
    dtype: str = "auto"
    chunk_size: int = 256
    threads: int | None = None
    device: str = "auto"
    kernels: str = "certified"
    kv_type: str = "f16"
    flash_attn: bool | None = None
    n_ctx: int | None = None


@dataclass(frozen=True)
class SamplingSettings:
    """How a sampled decode draws: ``temperature`` > 0 (1.0 leaves the logits as they are), ``top_p`` in (0, 1]
    (1.0 keeps every token), ``seed`` the run's seed (any integer). The same for every engine."""

    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0


@dataclass
class Grafted:
    """A graft ready for its query: the ``cache`` holding the restored artifacts at their own positions, and for
    each artifact of the chain (root first) its graftbench ``header`` and its ``token_ids`` (the segment it holds)."""

    cache: Any
    headers: list[dict]
    segments: list[list[int]]


@dataclass
class Deposited:
    """A deposit made for an exactness pair: ``digest`` (what the pair record commits it by: an artifact id, or a
    state's SHA-256) and ``payload`` (what the engine restores from, its own type)."""

    digest: str
    payload: Any


@runtime_checkable
class ExactnessChecks(Protocol):
    """What ``check-exact`` needs from an engine to certify a graft on one (artifact, query) pair of token ids
    (:mod:`graftbench.eval.exactness` builds the pairs, compares and seals the manifest)."""

    deposit_field: str  # the pair record's field that commits the deposit (``artifact_id``, ``state_sha256``)
    deposit_label: str  # how a replay names it in a difference (``artifact id``, ``state``)
    window: int  # the model's sliding window in tokens (0: none), where cross-window pairs are cut

    def deposit(self, artifact: list[int]) -> Deposited:
        """Prefill ``artifact`` in a fresh cache with the pinned chunk schedule and capture it as the store would
        keep it (bytes round trip where the engine has one)."""

    def graft_logits(self, deposited: Deposited, query: list[int]) -> Any:
        """The query's logits ``[len(query), vocab]`` after ``deposited`` is restored into a fresh cache."""

    def fresh_logits(self, artifact: list[int], query: list[int]) -> Any:
        """The query's logits ``[len(query), vocab]`` from a fresh cache: ``artifact`` then ``query`` prefilled with
        the pinned chunk schedule from each one's first token (the independent reference)."""

    def controls(self, artifact: list[int], query: list[int], fresh: Any,
                 deposited: Deposited) -> Iterator[tuple[str, Any, Any]]:
        """The negative controls of one pair, each as ``(name, reference logits, other logits)``, computed lazily
        in the order they are recorded."""

    def control_settings(self) -> dict:
        """What the manifest's settings record of the controls: ``must_differ`` (the names claimed to differ on
        every pair) and ``key_bit_flip`` (where the sensitivity control flips its bit)."""

    def settings(self, problems: list, layout: Any) -> dict:
        """The engine's own settings for an exactness manifest beyond the common ones (``{}`` for none), computed
        on ``problems`` with the pair layout ``layout``."""


@runtime_checkable
class EngineSession(Protocol):
    """One loaded model on one engine, as solve, eval, deposit, check-exact and Ray workers use it.

    Attributes: ``engine_name`` (the registry's name), ``capabilities`` (its factory's), ``config`` (a
    :class:`graftbench.engine.pin.PinnedConfig`),
    ``tokenizer`` (graftbench's tokenizer of the model), ``eos_ids`` (token ids that end a decode) and
    ``context_window`` (tokens a cache holds). The prompt ids (``solve_prompt_ids``, ``query_ids``,
    ``deposit_ids``, ``program_prompt_ids``, ``program_query_ids``) come from
    :class:`graftbench.engine.prompt_ids.PromptIds`, the same for every engine.
    """

    engine_name: str
    capabilities: frozenset[str]
    config: Any
    tokenizer: Any
    eos_ids: set[int]

    @property
    def context_window(self) -> int:
        """Tokens one cache holds."""

    def solve_prompt_ids(self, problem: str) -> list[int]:
        """The baseline prompt's token ids."""

    def query_ids(self, problem: str, layout: str = "answer") -> list[int]:
        """The graft query's token ids (no start tokens)."""

    def deposit_ids(self, problem: str, answer: str, solution: str) -> list[int]:
        """A deposit text's token ids (with start tokens)."""

    def prefill_prompt(self, ids: list[int]) -> tuple[Any, Any]:
        """A fresh cache holding ``ids`` with the pinned chunk schedule: ``(cache, the last position's logits)``.
        Raises ``ValueError`` for no ids."""

    def prefill_after(self, cache: Any, ids: list[int]) -> Any:
        """Append ``ids`` to ``cache``; the last position's logits."""

    def graft(self, store: Any, artifact_id: str, room: int = 0) -> Grafted:
        """``artifact_id`` (and its ancestors) read from ``store`` and restored root first, with ``room`` tokens
        free after it. Raises :class:`graftbench.store.codec.ArtifactError` when a link is refused."""

    def prefill_chain(self, segments: list[list[int]], query: list[int]) -> tuple[Any, Any]:
        """A fresh cache with each segment then ``query`` prefilled: ``(cache, the query's last logits)``."""

    def recompute(self, segments: list[list[int]], query: list[int]) -> Any:
        """The query's last logits from a fresh cache (the reference a graft is certified against)."""

    def decode(self, cache: Any, logits: Any, budget: int, sampling: Any, seeds: list[int] | None, stop: Any,
               started: float) -> tuple:
        """Decode at most ``budget`` tokens from ``logits`` on ``cache``: greedy when ``seeds`` is ``None``, else one
        sample per seed with ``sampling`` (:class:`SamplingSettings`). Returns one
        ``Decoded`` (token ids, text, timings) per sample."""

    def build_artifact(self, ids: list[int], meta: dict) -> bytes:
        """The artifact bytes of ``ids`` prefilled in a fresh cache, with the header fields ``meta``."""

    def logits_sha256(self, logits: Any) -> str:
        """SHA-256 hex digest of the raw bytes of ``logits``."""

    def exactness(self) -> ExactnessChecks:
        """The engine's graft-vs-fresh checks and negative controls (``check-exact``)."""

    def describe(self, model: str) -> str:
        """One line naming the loaded model, its engine, device and pin (printed after it loads)."""


@runtime_checkable
class EngineFactory(Protocol):
    """An engine as the registry holds it: its name, what it can do, and how to open a model on it. Importing the
    module that defines one imports neither torch nor llama.cpp (a command pins the instruction set first).

    ``capabilities``: keys of :data:`CAPABILITIES`; ``options``: the :class:`EngineOptions` fields (besides
    ``model`` and ``chunk_size``) it takes; ``pinned_dtype``: the dtype every run of it pins (``gguf``: the
    weights as stored), or ``None`` when ``--dtype`` chooses it."""

    name: str
    capabilities: frozenset[str]
    options: frozenset[str]
    pinned_dtype: str | None

    def open(self, options: EngineOptions) -> EngineSession:
        """Load ``options.model`` and pin the config. Raises :class:`EngineOpenError` (or
        :class:`graftbench.engine.models.ModelError`, :class:`graftbench.engine.device.DeviceError`) naming the model
        and what is wrong."""

    def loading_text(self, options: EngineOptions) -> str:
        """What a command shows while the model loads."""

    def fixed_pin(self) -> dict:
        """The pin fields every run of this engine in this process has whatever its options (llama.cpp: ``dtype``
        ``gguf`` and ``isa`` its build's name), ``{}`` for none: what a finished run is matched against before any
        model loads."""

    def adopt_pin(self, pin: dict) -> None:
        """Before the model loads, make this process run under what the recorded pin ``pin`` fixes beyond the
        options (llama.cpp: the build it names); raises :class:`EngineOpenError` naming what cannot be adopted."""

    def why_not_runnable(self, pin: dict) -> str | None:
        """Why this machine cannot run the recorded pin ``pin`` at all (one line naming what is missing), else
        ``None``; a difference a replay can report as not comparable is no reason here."""

    def replay_options(self, pin: dict) -> dict:
        """The :class:`EngineOptions` fields (a dict) that reopen the engine under the recorded pin ``pin`` (an
        expectation's ``config``); the command's own options fill the rest."""


def require(engine: EngineFactory | EngineSession, capability: str, what: str = "") -> None:
    """Raise :class:`CapabilityError` when ``engine`` (a factory, or a session: its factory's capabilities) does not
    declare ``capability``; ``what`` names the command or option that needs it."""
    name = getattr(engine, "name", None) or getattr(engine, "engine_name")
    if capability not in capabilities_of(engine):
        raise CapabilityError(name, capability, what)


def capabilities_of(engine: EngineFactory | EngineSession) -> frozenset[str]:
    """The capabilities ``engine`` declares: a factory's own, a session's ``capabilities`` attribute."""
    return frozenset(getattr(engine, "capabilities", ()))
