"""llama.cpp sequence states in graftbench's artifact container: one safetensors file, checked as every artifact is.

The file holds ``token_ids`` (int64 ``[n]``) and ``state`` (uint8 ``[bytes]``: llama.cpp's
``llama_state_seq_get_data``), with graftbench's header (canonical JSON under the metadata key ``graftbench``): the
pin's fingerprint and fields (the GGUF file's SHA-256, the tokenizer's, the chunk size, and the engine's own fields:
llama.cpp version, build CPU features, batch sizes, flash attention, KV cache types), the positions, and
``payload_sha256`` over the token ids' and the state's raw bytes. The id is the SHA-256 of the file's bytes
(:func:`graftbench.store.ids.artifact_id_of`), as for torch artifacts.

llama.cpp's state carries no model, build or payload hash of its own, so a state is restored only under the pin it
was written with (:func:`decode_llama_artifact` refuses another); :func:`restore_or_prefill` falls back to a prefill.
Imports no torch.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
from safetensors import SafetensorError

from .llama_cpp import LlamaState
from ..util.strict_json import loads_strict
from ..store.codec import HEADER_KEY, ArtifactError
from ..store.ids import artifact_id_of
from ..store.reader import LayoutError, metadata_of, parse_header

FORMAT = "graftbench.llama-state/1"


def payload_sha256(token_ids: np.ndarray, state: np.ndarray) -> str:
    """SHA-256 over the raw bytes of ``token_ids`` (int64, little-endian) then ``state`` (uint8)."""
    digest = hashlib.sha256(np.ascontiguousarray(token_ids, dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(state, dtype=np.uint8).tobytes())
    return digest.hexdigest()


def pin_header(config) -> dict:
    """The header fields that tie a state to the pin ``config`` (a llama.cpp :class:`graftbench.engine.pin.PinnedConfig`)."""
    return {"config_fingerprint": config.fingerprint, "weights_sha256": config.weights_sha256,
            "tokenizer_sha256": config.tokenizer_sha256, "chunk_size": config.chunk_size, "engine": config.engine}


def encode_llama_artifact(config, state: LlamaState, meta: dict | None = None) -> bytes:
    """The artifact bytes of ``state`` deposited under ``config`` (deterministic: equal inputs give equal bytes);
    ``meta`` adds fields to the header. Raises ``ValueError`` for a pin that is not a llama.cpp one."""
    from safetensors.numpy import save

    if not config.engine:
        raise ValueError("a llama.cpp state needs a llama.cpp pin (its engine field is empty)")
    token_ids = np.asarray(state.token_ids, dtype=np.int64)
    payload = np.frombuffer(state.state, dtype=np.uint8)
    header = {**(meta or {}), **pin_header(config), "format": FORMAT, "positions": list(state.positions),
              "payload_sha256": payload_sha256(token_ids, payload)}
    return save({"token_ids": token_ids, "state": payload},
                metadata={HEADER_KEY: json.dumps(header, sort_keys=True, separators=(",", ":"))})


def _header(artifact_id: str, data: bytes) -> dict:
    try:
        header = loads_strict(metadata_of(parse_header(data)[0])[HEADER_KEY], source="the graftbench header")
    except LayoutError as exc:
        raise ArtifactError(artifact_id, exc.check, str(exc)) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(artifact_id, "header", f"header is not valid graftbench JSON ({exc})") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ArtifactError(artifact_id, "format", f"not a {FORMAT} artifact")
    return header


def decode_llama_artifact(artifact_id: str, data: bytes, config) -> LlamaState:
    """The state in artifact bytes ``data``, checked in order: the id (SHA-256 of the bytes), the header's format,
    the pin (every field of :func:`pin_header` equal to ``config``'s), the tensors, the payload hash, the
    positions against the token ids. Raises :class:`graftbench.store.codec.ArtifactError` naming the failed check
    (``hash``, ``format``, ``header``, ``config``, ``tensors``, ``payload``)."""
    if artifact_id_of(data) != artifact_id:
        raise ArtifactError(artifact_id, "hash", "SHA-256 of the file does not equal its id (corrupt or edited)")
    header = _header(artifact_id, data)
    for name, value in pin_header(config).items():
        if header.get(name) != value:
            raise ArtifactError(artifact_id, "config", f"{name} differs from this run's pin (another engine, "
                                                       "build, KV cache type or model)")
    from safetensors.numpy import load

    try:
        tensors = load(data)
    except (SafetensorError, ValueError) as exc:
        raise ArtifactError(artifact_id, "format", f"safetensors payload unreadable ({exc})") from exc
    token_ids, payload = tensors.get("token_ids"), tensors.get("state")
    if set(tensors) != {"token_ids", "state"} or token_ids.dtype != np.int64 or payload.dtype != np.uint8:
        raise ArtifactError(artifact_id, "tensors", "expected int64 token_ids and uint8 state, nothing else")
    if payload_sha256(token_ids, payload) != header.get("payload_sha256"):
        raise ArtifactError(artifact_id, "payload", "payload SHA-256 does not equal the header's")
    if header.get("positions") != [0, len(token_ids)]:
        raise ArtifactError(artifact_id, "header", f"positions {header.get('positions')} do not match "
                                                   f"{len(token_ids)} token ids")
    return LlamaState(payload.tobytes(), [int(t) for t in token_ids], (0, len(token_ids)))


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
