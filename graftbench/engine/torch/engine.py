"""The torch engine: the :class:`graftbench.engine.base.Engine` seam over a loaded
:class:`graftbench.engine.torch.session.Session`, each operation a thin wrapper over :mod:`graftbench.engine.torch.forward` and
:mod:`graftbench.engine.torch.graft`, so that the seam computes the bytes the direct calls compute."""

from __future__ import annotations

import torch

from . import forward, graft
from .kv_cache import reserve
from .session import Session
from ...store.codec import Artifact


class TorchEngine:
    """:class:`graftbench.engine.base.Engine` for a session's ``transformers`` model on torch."""

    name = "torch"

    def __init__(self, session: Session):
        self.session = session

    def pin_fields(self) -> dict:
        """No fields beyond the common pin: the torch engine is the pin as it was recorded before the seam."""
        return {}

    def tokenize(self, text: str) -> list[int]:
        """The token ids of ``text`` under the session's tokenizer, without special tokens."""
        return self.session.tokenizer(text, add_special_tokens=False).input_ids

    def new_cache(self):
        """An empty KV cache for the session's model (:func:`graftbench.engine.torch.forward.new_cache`)."""
        return forward.new_cache(self.session.model)

    def prefill(self, cache, ids: list[int], chunk_size: int, all_logits: bool = False) -> torch.Tensor:
        """:func:`graftbench.engine.torch.forward.prefill`: the last position's logits ``[vocab]``, or every position's
        ``[len(ids), vocab]``. Raises ``ValueError`` for no ids."""
        logits = forward.prefill(self.session.model, cache, ids, chunk_size, all_logits=all_logits)
        return logits if all_logits else logits[-1]

    def decode_step(self, cache, token: int) -> torch.Tensor:
        """One token's forward at the cache's next position (as :func:`graftbench.engine.torch.forward.greedy_decode`
        takes each step); its logits ``[vocab]``."""
        reserve(cache, cache.get_seq_length() + 1)
        return forward.forward(self.session.model, cache, [token])[-1]

    def capture(self, cache, start: int) -> tuple[list[dict], list[tuple[torch.Tensor, torch.Tensor]]]:
        """:func:`graftbench.engine.torch.graft.capture`: (layer specs for the header, ``(keys, values)`` per layer)."""
        return graft.capture(cache, start)

    def restore(self, payload: Artifact, cache=None):
        """:func:`graftbench.engine.torch.graft.restore` under the session's pinned config. Raises
        :class:`graftbench.store.codec.ArtifactError` (``config`` or ``parent``)."""
        return graft.restore(self.session.model, self.session.config, payload, cache)

    def logits_sha256(self, logits: torch.Tensor) -> str:
        """:func:`graftbench.engine.torch.forward.logits_sha256`: SHA-256 of the raw bytes in the logits' dtype."""
        return forward.logits_sha256(logits)
