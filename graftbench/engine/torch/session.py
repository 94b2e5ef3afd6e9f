"""A loaded model with its pinned config, and the prompt token streams built from the pinned layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from . import forward, graft
from ..base import Grafted
from . import CAPABILITIES, NAME
from .sampling import sample_decode
from ..pin import PinnedConfig, check_kernels
from .pin_config import build_config, configure_torch
from ..prompt_ids import PromptIds
from .kv_pool import NO_POOL, PoolReport, reserve_tokens
from .loading import LoadedModel, load_model
from ...settings import CERTIFIED_KERNELS, DEFAULT_CHUNK_SIZE, DEFAULT_DTYPE, DEFAULT_MODEL


@dataclass
class TorchSession(PromptIds):
    """Everything a command needs to run the model on the torch engine: weights, tokenizer, EOS ids and the pinned
    config; the prompts' token ids (:class:`graftbench.engine.prompt_ids.PromptIds`) and the run-level operations
    a solve, eval or deposit takes (the same names as :class:`graftbench.engine.llama_cpp.session.LlamaSession`'s)."""

    loaded: LoadedModel
    config: PinnedConfig
    eos_ids: set[int]
    kv_pool: PoolReport = NO_POOL
    engine_name: ClassVar[str] = NAME
    capabilities: ClassVar[frozenset[str]] = CAPABILITIES

    @property
    def model(self):
        return self.loaded.model

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def device(self) -> str:
        """The torch device the weights live on (``cpu``, ``cuda:N``); the pin records only its kind."""
        return str(forward.model_device(self.model))

    @property
    def context_window(self) -> int:
        """The model's maximum positions (tokens)."""
        return int(getattr(self.model.config.get_text_config(), "max_position_embeddings", 8192))

    def prefill_prompt(self, ids: list[int]):
        """A fresh cache holding ``ids`` prefilled with the pinned chunk schedule: ``(cache, logits [1, vocab])``,
        the last position's logits. Raises ``ValueError`` for no ids."""
        cache = forward.new_cache(self.model)
        return cache, forward.prefill(self.model, cache, ids, self.config.chunk_size)

    def prefill_after(self, cache, ids: list[int]) -> torch.Tensor:
        """Append ``ids`` (a graft's query) to ``cache``; the last position's logits ``[1, vocab]``."""
        return forward.prefill(self.model, cache, ids, self.config.chunk_size)

    def graft(self, store, artifact_id: str, room: int = 0) -> Grafted:
        """:func:`graftbench.engine.torch.graft.restore_chain`: ``artifact_id`` and its ancestors read from ``store`` and
        grafted root first, with ``room`` spare positions (tokens) read in after a root artifact. Raises
        :class:`graftbench.store.codec.ArtifactError` when a link is refused."""
        cache, chain = graft.restore_chain(self.model, self.config, store, artifact_id, room=room)
        return Grafted(cache, [link.header for link in chain], [link.token_ids.tolist() for link in chain])

    def prefill_chain(self, segments: list[list[int]], query: list[int]):
        """:func:`graftbench.engine.torch.graft.prefill_chain`: ``(cache, the query's last logits [1, vocab])``."""
        return graft.prefill_chain(self.model, self.config, segments, query)

    def recompute(self, segments: list[list[int]], query: list[int]) -> torch.Tensor:
        """:func:`graftbench.engine.torch.graft.fresh_recompute`: the query's last logits ``[1, vocab]`` from a fresh
        cache (the independent reference a graft is certified against)."""
        return graft.fresh_recompute(self.model, self.config, segments, query)

    def logits_sha256(self, logits: torch.Tensor) -> str:
        """:func:`graftbench.engine.torch.forward.logits_sha256`: SHA-256 of the raw bytes in the logits' dtype."""
        return forward.logits_sha256(logits)

    def decode(self, cache, logits: torch.Tensor, budget: int, sampling, seeds: list[int] | None, stop,
               started: float) -> tuple:
        """Decode from ``logits`` on ``cache``: greedy (:func:`graftbench.engine.torch.forward.greedy_decode`) when
        ``seeds`` is ``None``, else the seeds' samples as one batch (:func:`graftbench.engine.torch.sampling.sample_decode`
        with ``sampling``). Returns one :class:`graftbench.engine.torch.forward.Decoded` per sample."""
        if seeds is None:
            return (forward.greedy_decode(self.model, self.tokenizer, cache, logits, budget, self.eos_ids,
                                          stop=stop, started=started),)
        return tuple(sample_decode(self.model, self.tokenizer, cache, logits, budget, self.eos_ids, sampling, seeds,
                                   stop=stop, started=started))

    def build_artifact(self, ids: list[int], meta: dict) -> bytes:
        """:func:`graftbench.engine.torch.graft.build_artifact` of ``ids`` with the header fields ``meta``: its bytes."""
        return graft.build_artifact(self.model, self.config, ids, meta)[0]

    def exactness(self):
        """check-exact's deposit, graft, fresh recompute and controls on this session
        (:class:`graftbench.engine.torch.exactness.TorchExactness`)."""
        from .exactness import TorchExactness

        return TorchExactness(self)

    def layer_trace(self, artifact: list[int], query: list[int]) -> list[dict]:
        """The steps of one (artifact, query) pair on this session's model and pinned chunk size
        (:func:`graftbench.engine.torch.layer_trace.trace_pair`: each module's output hashes, each layer's K and V
        after the artifact, the query's logits). Raises ``ValueError`` for an empty artifact or query."""
        from .layer_trace import trace_pair

        return trace_pair(self.model, self.config.chunk_size, artifact, query)

    def describe(self, model: str) -> str:
        """The line naming the loaded model: how it was loaded, the device, the pins, and for a random-weights model
        its label."""
        loaded, config = self.loaded, self.config
        how = ("random weights drawn" if config.random_weights else
               "cached weights" if loaded.from_cache else "de-quantized GGUF")
        where = config.accelerator.get("gpu", config.device) if config.accelerator else config.device
        label = f" · {config.random_weights['label']}" if config.random_weights else ""
        kernels = "" if config.certified else f" · kernels {config.kernels} (uncertified)"
        return (f"model {model}: {how} in {loaded.load_s:.2f} s on {where} · isa {config.isa} "
                f"({config.cpu_capability}) · config {config.fingerprint[:12]}{kernels}{label}")


def open_session(model: str = DEFAULT_MODEL, dtype: str = DEFAULT_DTYPE, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 threads: int | None = None, kv_pool_tokens: int = 0, device: str = "cpu",
                 kernels: str = CERTIFIED_KERNELS) -> TorchSession:
    """Load ``model`` in ``dtype`` and pin the config. ``threads`` sets torch's intra-op thread count (part of the pin).
    The instruction-set pin is the one this process was started under (:func:`graftbench.util.isa.apply`).
    ``kv_pool_tokens`` > 0 faults in KV memory for that many tokens once, after the load
    (:mod:`graftbench.engine.torch.kv_pool`: a fresh process's first graft then reads into resident pages); the pool does not
    change any logits. ``device`` is a torch device string (``cpu``, ``cuda:N``;
    :func:`graftbench.engine.device.resolve`): on CUDA the CUDA pin's settings are made before the model loads
    (:func:`graftbench.engine.torch.cuda_determinism.configure`) and recorded in the pin. ``kernels`` is the kernel configuration
    (``certified`` or ``fast``: :func:`graftbench.engine.torch.cuda_determinism.configure`), recorded in the pin's ``kernels``
    field; on the CPU ``fast`` changes no setting (torch's CPU kernels are the certified run's) and marks the run
    uncertified.

    Raises :class:`graftbench.engine.models.ModelError` for a model that cannot be loaded, ``ValueError`` for a negative
    ``kv_pool_tokens`` or an unknown ``kernels``.
    """
    if kv_pool_tokens < 0:
        raise ValueError(f"kv_pool_tokens must be >= 0, got {kv_pool_tokens}")
    check_kernels(kernels)
    configure_torch()
    if threads:
        torch.set_num_threads(threads)
    if device != "cpu":
        from .cuda_determinism import configure

        configure(kernels=kernels)
    loaded = load_model(model, dtype=dtype, device=device)
    config = build_config(loaded, chunk_size=chunk_size, kernels=kernels)
    forward.pin_threads(loaded.model, config.threads)
    pool = reserve_tokens(loaded.model, kv_pool_tokens)
    return TorchSession(loaded, config, forward.eos_token_ids(loaded.model, loaded.tokenizer), pool)
