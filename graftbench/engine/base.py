"""The engine seam: what an engine provides to tokenize, prefill, decode, capture and restore KV state, and hash
logits.

graftbench's stages reach a model through these few operations. The torch engine
(:class:`graftbench.engine.torch.engine.TorchEngine`) is the one implementation today; a second engine (llama.cpp)
or another device plugs in by implementing :class:`Engine`. Imports no torch.

Positions: a cache holds the tokens ``0..n-1``; :meth:`Engine.prefill` and :meth:`Engine.decode_step` append at
position ``n``, and :meth:`Engine.restore` puts an artifact's state back at the positions it was captured at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Engine(Protocol):
    """An engine: one loaded model with its tokenizer and pinned config, and its KV caches.

    ``name`` names the engine in the pin (``torch``). Logits are one row ``[vocab]`` per position, as the engine
    computes them (float32 for a float32 model); :meth:`logits_sha256` is the SHA-256 of their raw bytes, which
    exactness manifests record and compare.
    """

    name: str

    def pin_fields(self) -> dict:
        """The engine's own fields of the pinned config, beyond the common ones (``{}`` for the torch engine, so
        that every fingerprint recorded before the seam stays)."""

    def tokenize(self, text: str) -> list[int]:
        """The token ids of ``text``, without special tokens."""

    def new_cache(self) -> Any:
        """An empty KV cache for this engine's model."""

    def prefill(self, cache: Any, ids: list[int], chunk_size: int, all_logits: bool = False) -> Any:
        """Append ``ids`` to ``cache`` in forwards of ``chunk_size`` tokens from the first of ``ids``; returns the
        last position's logits ``[vocab]``, or with ``all_logits`` every position's ``[len(ids), vocab]``. Raises
        ``ValueError`` for no ids."""

    def decode_step(self, cache: Any, token: int) -> Any:
        """Append one ``token`` to ``cache``; returns its position's logits ``[vocab]``."""

    def capture(self, cache: Any, start: int) -> Any:
        """The KV state of ``cache`` from position ``start`` on, as the payload an artifact stores."""

    def restore(self, payload: Any, cache: Any = None) -> Any:
        """A cache holding the state of ``payload`` (an artifact as the store decodes it) at its own positions: a
        fresh cache, or ``cache`` extended when the artifact continues a parent whose state ``cache`` holds.
        Raises :class:`graftbench.store.codec.ArtifactError` when the artifact cannot be grafted here."""

    def logits_sha256(self, logits: Any) -> str:
        """SHA-256 hex digest of the raw bytes of ``logits``."""


@dataclass
class Grafted:
    """A graft ready for its query: the ``cache`` holding the restored artifacts at their own positions, and for
    each artifact of the chain (root first) its graftbench ``header`` and its ``token_ids`` (the segment it holds)."""

    cache: Any
    headers: list[dict]
    segments: list[list[int]]
