"""The torch engine's side of the fault harness (the :data:`graftbench.engine.base.FAULT_SCENARIOS` capability,
reached through :func:`graftbench.engine.registry.fault_ops`): a session opened as the harness opens one, and an
artifact of the torch engine's format built under any pin and parent, so that the catalogue
(:mod:`graftbench.faults.catalogue`) can forge and plant the ones a check must refuse."""

from __future__ import annotations

from . import graft
from .session import TorchSession, open_session
from ...settings import DEFAULT_CHUNK_SIZE, DEFAULT_DTYPE


def open_for_faults(model: str, dtype: str = DEFAULT_DTYPE, chunk_size: int = DEFAULT_CHUNK_SIZE) -> TorchSession:
    """``model`` on the CPU in ``dtype`` with ``chunk_size``-token prefill chunks and the default threads: the
    session the fault runner opens, and its subprocesses with the runner's pin (the defaults: the runner's own)."""
    return open_session(model, dtype=dtype, chunk_size=chunk_size)


def build_artifact(session: TorchSession, ids: list[int], meta: dict, config=None,
                   parent: str | None = None) -> tuple[bytes, dict]:
    """The artifact bytes and header of ``ids`` (token ids) with the header fields ``meta``, under ``config`` (a
    :class:`graftbench.engine.pin.PinnedConfig`; ``None``: the session's pin) and chained to the artifact id
    ``parent`` (``None``: a root): byte-identical to a deposit's when both are the session's."""
    return graft.build_artifact(session.model, config or session.config, ids, meta, parent)
