"""The container of an engine's sequence state (llama.cpp's, or another engine's): one safetensors file, checked as
every artifact is.

The file holds ``token_ids`` (int64 ``[n]``) and ``state`` (uint8 ``[bytes]``: llama.cpp's
``llama_state_seq_get_data`` of one sequence), with graftbench's header (canonical JSON under the metadata key
``graftbench``, format :data:`graftbench.store.codec.LLAMA_FORMAT`): the pin's fingerprint and fields, the
positions ``[0, n]`` and ``payload_sha256`` over the token ids' and the state's raw bytes. The id is the SHA-256 of
the file's bytes (:func:`graftbench.store.ids.artifact_id_of`), as for a torch artifact, so the store indexes,
routes, audits and serves both alike; whether a state may be restored under a run's pin is the engine's check
(:mod:`graftbench.engine.llama_cpp.codec`).

Imports numpy and safetensors, no torch.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
from .codec import (FORMAT, HEADER_KEY, LLAMA_FORMAT, ArtifactError, audit_artifact, decode_header,
                    header_from_metadata, is_state_format)
from .ids import artifact_id_of
from .reader import LayoutError, metadata_of, parse_header


def payload_sha256(token_ids: np.ndarray, state) -> str:
    """SHA-256 over the raw bytes of ``token_ids`` (int64, little-endian) then ``state`` (uint8 bytes, any
    buffer)."""
    digest = hashlib.sha256(np.ascontiguousarray(token_ids, dtype="<i8").tobytes())
    digest.update(memoryview(state).cast("B"))
    return digest.hexdigest()


def encode_state(header: dict, token_ids: list[int], state: bytes, format: str = LLAMA_FORMAT) -> bytes:
    """The artifact bytes of a sequence ``state`` holding ``token_ids`` at positions ``[0, n)``; ``header`` (the
    pin and routing fields) gets ``format`` (the engine's state format, :func:`graftbench.store.codec.is_state_format`;
    a llama.cpp state's by default), ``positions`` and ``payload_sha256`` filled in. Deterministic: equal inputs
    give equal bytes. Raises ``ValueError`` for a ``format`` that is not a state format."""
    from safetensors.numpy import save

    if not is_state_format(format):
        raise ValueError(f"{format!r} is not a state format (graftbench.<name>-state/<version>)")
    ids = np.asarray(token_ids, dtype=np.int64)
    payload = np.frombuffer(state, dtype=np.uint8)
    header = {**header, "format": format, "positions": [0, len(ids)],
              "payload_sha256": payload_sha256(ids, payload)}
    return save({"token_ids": ids, "state": payload},
                metadata={HEADER_KEY: json.dumps(header, sort_keys=True, separators=(",", ":"))})


def decode_state(artifact_id: str, data: bytes,
                 formats: tuple[str, ...] | None = (LLAMA_FORMAT,)) -> tuple[dict, list[int], memoryview]:
    """``(header, token ids, state bytes)`` of artifact bytes ``data`` with every check: the id (SHA-256 of the
    bytes), then :func:`parse_state`'s (of the state ``formats``), then the payload hash. The state is a view of
    ``data`` (no copy). Raises :class:`graftbench.store.codec.ArtifactError` naming the failed check (``hash``,
    ``header``, ``format``, ``tensors``, ``payload``)."""
    if artifact_id_of(data) != artifact_id:
        raise ArtifactError(artifact_id, "hash", "SHA-256 of the file does not equal its id (corrupt or edited)")
    header, token_ids, state = parse_state(artifact_id, data, formats)
    if payload_sha256(token_ids, state) != header.get("payload_sha256"):
        raise ArtifactError(artifact_id, "payload", "payload SHA-256 does not equal the header's")
    return header, [int(t) for t in token_ids], state


def parse_state(artifact_id: str, data: bytes,
                formats: tuple[str, ...] | None = (LLAMA_FORMAT,)) -> tuple[dict, np.ndarray, memoryview]:
    """``(header, token ids int64 [n], state bytes)`` of artifact bytes ``data`` without hashing them (the caller
    has checked the file's hash: the id's SHA-256, or the XXH3-128 indexed at deposit), the arrays views of
    ``data``. Checks, in order: the safetensors layout (``format``), the graftbench header and its format
    (``header``, ``format``), the tensors (exactly int64 ``token_ids [n]`` and uint8 ``state [bytes]``, tiling
    the body: ``tensors``), the positions against the token ids (``header``). ``formats``: the state formats
    accepted (``format`` for another; by default a llama.cpp state's), ``None`` for any engine's state format
    (:func:`graftbench.store.codec.is_state_format`). Raises :class:`graftbench.store.codec.ArtifactError` naming
    the failed check."""
    try:
        table, length = parse_header(data)
        header = header_from_metadata(artifact_id, metadata_of(table))
    except LayoutError as exc:
        raise ArtifactError(artifact_id, exc.check, str(exc)) from exc
    wanted = formats if formats is not None else ()
    if not is_state_format(header.get("format")) or (formats is not None and header.get("format") not in wanted):
        what = " or ".join(wanted) if formats is not None else "an engine's state"
        raise ArtifactError(artifact_id, "format", f"a {header.get('format')} artifact, not {what}")
    body = 8 + length
    (ids_start, ids_end), (state_start, state_end) = _state_spans(artifact_id, table, len(data) - body)
    token_ids = np.frombuffer(data, dtype="<i8", count=(ids_end - ids_start) // 8, offset=body + ids_start)
    if header.get("positions") != [0, len(token_ids)]:
        raise ArtifactError(artifact_id, "header", f"positions {header.get('positions')!r} do not match its "
                                                   f"{len(token_ids)} token ids")
    return header, token_ids, memoryview(data)[body + state_start:body + state_end]


def _state_spans(artifact_id: str, table: dict, body_bytes: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The byte spans of ``token_ids`` and ``state`` in the body: exactly those two tensors, int64 ``[n]`` and
    uint8 ``[m]``, tiling ``body_bytes`` without gap or overlap. Raises :class:`ArtifactError` (``tensors``)."""
    expected = {"token_ids": ("I64", 8), "state": ("U8", 1)}
    names = set(table) - {"__metadata__"}
    spans = {}
    for name, (dtype, itemsize) in expected.items():
        spec = table.get(name)
        shape = spec.get("shape") if isinstance(spec, dict) else None
        offsets = spec.get("data_offsets") if isinstance(spec, dict) else None
        if (names != set(expected) or spec.get("dtype") != dtype or not isinstance(shape, list) or len(shape) != 1
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in [*shape, *offsets])
                or offsets[1] - offsets[0] != shape[0] * itemsize):
            raise ArtifactError(artifact_id, "tensors", "expected int64 token_ids [n] and uint8 state, nothing else")
        spans[name] = (offsets[0], offsets[1])
    ordered = sorted(spans.values())
    if ordered[0][0] != 0 or ordered[0][1] != ordered[1][0] or ordered[1][1] != body_bytes:
        raise ArtifactError(artifact_id, "tensors", f"token_ids and state do not tile the {body_bytes} body bytes")
    return spans["token_ids"], spans["state"]


def audit_any(artifact_id: str, data: bytes) -> dict:
    """Every check of artifact bytes ``data`` for its format, without torch: a torch KV artifact's
    (:func:`graftbench.store.codec.audit_artifact`) or an engine's state's, llama.cpp's or another's
    (:func:`decode_state`). Returns the header. Raises :class:`graftbench.store.codec.ArtifactError` naming the
    failed check."""
    if artifact_id_of(data) != artifact_id:
        raise ArtifactError(artifact_id, "hash", "SHA-256 of the file does not equal its id (corrupt or edited)")
    if decode_header(artifact_id, data).get("format") == FORMAT:
        return audit_artifact(artifact_id, data)
    return decode_state(artifact_id, data, formats=None)[0]
