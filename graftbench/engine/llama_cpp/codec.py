"""llama.cpp sequence states as graftbench artifacts under a run's pin: encode a captured state with the pin's
fields, and restore one only under the pin it was written with.

The container itself (one safetensors file of ``token_ids`` and ``state``, its header, id and payload checks) is
:mod:`graftbench.store.llama_state`; this module adds what the pin decides. llama.cpp's state carries no model, build
or payload hash of its own, so :func:`decode_llama_artifact` refuses a state whose pin fields (the config
fingerprint, the GGUF file's and tokenizer's SHA-256, the chunk size and the engine's fields) are not this run's, the
size of the context that receives it aside (:data:`CONTEXT_SIZE_FIELDS`);
:func:`restore_or_prefill` falls back to a prefill. Imports no torch.
"""

from __future__ import annotations

from .engine import LlamaState
from ...store.codec import ArtifactError
from ...store.llama_state import decode_state, encode_state


def pin_header(config) -> dict:
    """The header fields that tie a state to the pin ``config`` (a llama.cpp :class:`graftbench.engine.pin.PinnedConfig`)."""
    return {"config_fingerprint": config.fingerprint, "weights_sha256": config.weights_sha256,
            "tokenizer_sha256": config.tokenizer_sha256, "chunk_size": config.chunk_size, "engine": config.engine}


def encode_llama_artifact(config, state: LlamaState, meta: dict | None = None) -> bytes:
    """The artifact bytes of ``state`` deposited under ``config`` (deterministic: equal inputs give equal bytes);
    ``meta`` adds fields to the header (the routing fields of a deposit). Raises ``ValueError`` for a pin that is
    not a llama.cpp one or a state that does not start at position 0."""
    if not config.engine:
        raise ValueError("a llama.cpp state needs a llama.cpp pin (its engine field is empty)")
    if tuple(state.positions) != (0, len(state.token_ids)):
        raise ValueError(f"a state of positions {state.positions} does not hold its {len(state.token_ids)} tokens "
                         "from position 0")
    header = {**(meta or {}), **pin_header(config), "model": config.model, "dtype": config.dtype, "parent": None}
    return encode_state(header, state.token_ids, state.state)


# The engine pin's fields that size the context receiving a state, not the state: a restore does not compare them
# (a state captured in a context of 8,192 tokens restores byte-exact into one of 16,384, or into one stream of a
# context of several sequences). They stay in the recorded pin and its fingerprint, so no digest changes.
CONTEXT_SIZE_FIELDS = ("n_ctx",)


def at_recorded_context(config, header: dict):
    """``config`` (a llama.cpp :class:`graftbench.engine.pin.PinnedConfig`) with the context-size fields
    (:data:`CONTEXT_SIZE_FIELDS`) that ``header``'s recorded engine pin holds: the pin the state's header would carry
    had it been captured under ``config``'s everything else."""
    from dataclasses import replace

    recorded = header.get("engine") if isinstance(header.get("engine"), dict) else {}
    sizes = {name: recorded[name] for name in CONTEXT_SIZE_FIELDS if name in recorded and name in config.engine}
    return replace(config, engine={**config.engine, **sizes}) if sizes else config


def check_pin(artifact_id: str, header: dict, config) -> None:
    """Refuse a state whose header is not of the pin ``config``, the size of the receiving context aside: every
    field of :func:`pin_header` must match (the fingerprint, weights, tokenizer, chunk size and the engine's fields:
    build, batch sizes, cache types, flash attention), compared with ``config``'s context size taken as the one
    recorded (:func:`at_recorded_context`). Raises :class:`graftbench.store.codec.ArtifactError` (``config``) naming
    the first differing field."""
    for name, value in pin_header(at_recorded_context(config, header)).items():
        if header.get(name) != value:
            raise ArtifactError(artifact_id, "config", f"{name} differs from this run's pin (another engine, "
                                                       "build, KV cache type or model)")


def decode_llama_artifact(artifact_id: str, data: bytes, config) -> LlamaState:
    """The state in artifact bytes ``data``, checked in order: the container's checks
    (:func:`graftbench.store.llama_state.decode_state`: id, header, format, tensors, payload, positions), then the
    pin (:func:`check_pin`). Raises :class:`graftbench.store.codec.ArtifactError` naming the failed check."""
    header, token_ids, state = decode_state(artifact_id, data)
    check_pin(artifact_id, header, config)
    return LlamaState(state, token_ids, (0, len(token_ids)))


def restore_or_prefill(engine, config, artifact_id: str, data: bytes, token_ids: list[int]):
    """A cache holding ``token_ids``: the artifact restored when it is sound, of this pin and of these very ids;
    else a fresh prefill of them. Returns ``(cache, refusal)``: ``refusal`` is ``None`` after a restore, else the
    :class:`graftbench.store.codec.ArtifactError` that sent it to the prefill."""
    try:
        state = decode_llama_artifact(artifact_id, data, config)
        if state.token_ids != list(token_ids):
            raise ArtifactError(artifact_id, "header", "its token ids are not the ones asked for")
        return engine.restore(state), None
    except ArtifactError as refusal:
        cache = engine.new_cache()
        engine.prefill(cache, list(token_ids))
        return cache, refusal
