"""The container of a llama.cpp sequence state: one safetensors file, checked as every artifact is.

The file holds ``token_ids`` (int64 ``[n]``) and ``state`` (uint8 ``[bytes]``: llama.cpp's
``llama_state_seq_get_data`` of one sequence), with graftbench's header (canonical JSON under the metadata key
``graftbench``, format :data:`graftbench.store.codec.LLAMA_FORMAT`): the pin's fingerprint and fields, the
positions ``[0, n]`` and ``payload_sha256`` over the token ids' and the state's raw bytes. The id is the SHA-256 of
the file's bytes (:func:`graftbench.store.ids.artifact_id_of`), as for a torch artifact, so the store indexes,
routes, audits and serves both alike; whether a state may be restored under a run's pin is the engine's check
(:mod:`graftbench.engine.llama_codec`).

Imports numpy and safetensors, no torch.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
from safetensors import SafetensorError

from .codec import FORMAT, HEADER_KEY, LLAMA_FORMAT, ArtifactError, audit_artifact, decode_header
from .ids import artifact_id_of


def payload_sha256(token_ids: np.ndarray, state: np.ndarray) -> str:
    """SHA-256 over the raw bytes of ``token_ids`` (int64, little-endian) then ``state`` (uint8)."""
    digest = hashlib.sha256(np.ascontiguousarray(token_ids, dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(state, dtype=np.uint8).tobytes())
    return digest.hexdigest()


def encode_state(header: dict, token_ids: list[int], state: bytes) -> bytes:
    """The artifact bytes of a sequence ``state`` holding ``token_ids`` at positions ``[0, n)``; ``header`` (the
    pin and routing fields) gets ``format``, ``positions`` and ``payload_sha256`` filled in. Deterministic: equal
    inputs give equal bytes."""
    from safetensors.numpy import save

    ids = np.asarray(token_ids, dtype=np.int64)
    payload = np.frombuffer(state, dtype=np.uint8)
    header = {**header, "format": LLAMA_FORMAT, "positions": [0, len(ids)],
              "payload_sha256": payload_sha256(ids, payload)}
    return save({"token_ids": ids, "state": payload},
                metadata={HEADER_KEY: json.dumps(header, sort_keys=True, separators=(",", ":"))})


def decode_state(artifact_id: str, data: bytes) -> tuple[dict, list[int], bytes]:
    """``(header, token ids, state bytes)`` of artifact bytes ``data``, checked in order: the id (SHA-256 of the
    bytes), the header and its format, the tensors (int64 ``token_ids`` and uint8 ``state``, nothing else), the
    payload hash, the positions against the token ids. Raises :class:`graftbench.store.codec.ArtifactError`
    naming the failed check (``hash``, ``header``, ``format``, ``tensors``, ``payload``)."""
    from safetensors.numpy import load

    if artifact_id_of(data) != artifact_id:
        raise ArtifactError(artifact_id, "hash", "SHA-256 of the file does not equal its id (corrupt or edited)")
    header = decode_header(artifact_id, data)
    if header.get("format") != LLAMA_FORMAT:
        raise ArtifactError(artifact_id, "format", f"a {header.get('format')} artifact, not a llama.cpp state")
    try:
        tensors = load(data)
    except (SafetensorError, ValueError) as exc:
        raise ArtifactError(artifact_id, "format", f"safetensors payload unreadable ({exc})") from exc
    token_ids, payload = tensors.get("token_ids"), tensors.get("state")
    if set(tensors) != {"token_ids", "state"} or token_ids.dtype != np.int64 or token_ids.ndim != 1 \
            or payload.dtype != np.uint8:
        raise ArtifactError(artifact_id, "tensors", "expected int64 token_ids [n] and uint8 state, nothing else")
    if payload_sha256(token_ids, payload) != header.get("payload_sha256"):
        raise ArtifactError(artifact_id, "payload", "payload SHA-256 does not equal the header's")
    if header.get("positions") != [0, len(token_ids)]:
        raise ArtifactError(artifact_id, "header", f"positions {header.get('positions')!r} do not match its "
                                                   f"{len(token_ids)} token ids")
    return header, [int(t) for t in token_ids], payload.tobytes()


def audit_any(artifact_id: str, data: bytes) -> dict:
    """Every check of artifact bytes ``data`` for its format, without torch: a torch KV artifact's
    (:func:`graftbench.store.codec.audit_artifact`) or a llama.cpp state's (:func:`decode_state`). Returns the
    header. Raises :class:`graftbench.store.codec.ArtifactError` naming the failed check."""
    if artifact_id_of(data) != artifact_id:
        raise ArtifactError(artifact_id, "hash", "SHA-256 of the file does not equal its id (corrupt or edited)")
    if decode_header(artifact_id, data).get("format") == FORMAT:
        return audit_artifact(artifact_id, data)
    return decode_state(artifact_id, data)[0]
