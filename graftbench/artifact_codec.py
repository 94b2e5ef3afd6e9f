"""The artifact format: encode an artifact to safetensors bytes, decode and check bytes back into an artifact.

An artifact is one safetensors file: ``token_ids`` (int64 ``[n]``), and per decoder layer ``layers.{i}.keys`` and
``layers.{i}.values`` (``[1, kv_heads, kept, head_dim]`` in the pinned dtype), with a header (canonical JSON under
the safetensors metadata key ``graftbench``). The artifact id is the SHA-256 of the file's bytes
(:mod:`graftbench.artifact_ids`), so the same deposit gives the same id and one copy, and any flipped bit (payload
or header) is caught on read. The header also carries ``payload_sha256`` over the tensors' raw bytes, for
provenance.

Nothing is ever unpickled: safetensors parses a JSON header and raw little-endian tensor bytes. Where the bytes go
on disk is :mod:`graftbench.store`'s job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from .artifact_ids import artifact_id_of, is_artifact_id
from .artifact_reader import LayoutError, ReadTiming, metadata_of, parse_header
from .hashing import tensors_sha256
from .strict_json import loads_strict

FORMAT = "graftbench.artifact/1"
HEADER_KEY = "graftbench"
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class ArtifactError(ValueError):
    """An artifact that is refused. ``artifact_id`` names it and ``check`` names the check that failed
    (``id``, ``missing``, ``read``, ``size``, ``hash``, ``format``, ``header``, ``tensors``, ``payload``,
    ``config``, ``parent``)."""

    def __init__(self, artifact_id: str, check: str, detail: str):
        self.artifact_id = artifact_id
        self.check = check
        super().__init__(f"artifact {artifact_id[:16]}: {check} check failed: {detail}")


@dataclass
class Artifact:
    """A read and checked artifact: its id, header dict, ``token_ids`` (int64 ``[n]``) and per-layer
    ``(keys, values)`` tensors; ``timing`` says how long the read took, when it came from a file.

    ``room`` holds, when it was read with room (:meth:`Store.read`), per layer the ``(keys, values)`` buffers that
    ``layers`` are the first positions of, with spare positions after them. The spare positions can be written by
    one cache only, so they are handed out once (:meth:`claim_room`)."""

    id: str
    header: dict
    token_ids: torch.Tensor
    layers: list[tuple[torch.Tensor, torch.Tensor]]
    timing: ReadTiming | None = None
    room: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def claim_room(self) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The per-layer buffers with spare positions, to the first caller only (``None`` after, or without)."""
        room, self.room = self.room, None
        return room


def payload_sha256(token_ids: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> str:
    """SHA-256 over the raw bytes of ``token_ids`` then each layer's keys and values, in order
    (:func:`graftbench.hashing.tensors_sha256`)."""
    return tensors_sha256([token_ids, *[t for pair in layers for t in pair]])


def encode_artifact(header: dict, token_ids: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> bytes:
    """Serialize an artifact to safetensors bytes (deterministic: equal inputs give equal bytes).

    ``header`` gets ``format`` and ``payload_sha256`` filled in.
    """
    header = {**header, "format": FORMAT, "payload_sha256": payload_sha256(token_ids, layers)}
    tensors = {"token_ids": token_ids.contiguous()}
    for i, (keys, values) in enumerate(layers):
        tensors[f"layers.{i}.keys"] = keys.contiguous()
        tensors[f"layers.{i}.values"] = values.contiguous()
    return save_safetensors(tensors, metadata={HEADER_KEY: json.dumps(header, sort_keys=True, separators=(",", ":"))})


def check_artifact_id(artifact_id: str) -> str:
    """Return ``artifact_id`` if it is 64 lowercase hex digits; otherwise raise :class:`ArtifactError` (``id``).

    This is what keeps ids like ``../x``, absolute paths or NUL bytes from ever reaching the filesystem.
    """
    if not is_artifact_id(artifact_id):
        raise ArtifactError(repr(artifact_id)[:40], "id", "an artifact id is 64 lowercase hex digits")
    return artifact_id


def decode_header(artifact_id: str, data: bytes) -> dict:
    """The graftbench header dict of artifact bytes ``data`` (``artifact_id`` names it in errors; not checked
    against the bytes here). Raises :class:`ArtifactError`: ``format`` for a missing, oversized or truncated
    safetensors header, ``header`` for one that is not JSON or whose graftbench header is missing, not JSON, or
    not of this format. The header's fields are not checked (see :func:`check_tensors`)."""
    try:
        table, _ = parse_header(data)
        metadata = metadata_of(table)
    except LayoutError as exc:
        raise ArtifactError(artifact_id, exc.check, str(exc)) from exc
    return header_from_metadata(artifact_id, metadata)


def header_from_metadata(artifact_id: str, meta: dict) -> dict:
    """The graftbench header from a safetensors ``__metadata__`` dict: the JSON under ``HEADER_KEY``. Raises
    :class:`ArtifactError` (``header``) when it is missing, not a JSON object, or not of this ``FORMAT``."""
    try:
        header = loads_strict(meta[HEADER_KEY], source="the graftbench header")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ArtifactError(artifact_id, "header", f"header is not valid graftbench JSON ({exc})") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ArtifactError(artifact_id, "header", f"format is not {FORMAT}")
    return header


def decode_artifact(artifact_id: str, data: bytes) -> Artifact:
    """Parse and check artifact bytes whose SHA-256 must equal ``artifact_id``.

    Checks, in order: the id hash, the header, the tensor set and shapes against the header, the payload hash.
    Raises :class:`ArtifactError` naming the failed check; never returns a partial artifact.
    """
    if artifact_id_of(data) != artifact_id:
        raise ArtifactError(artifact_id, "hash", "SHA-256 of the file does not equal its id (corrupt or edited)")
    header = decode_header(artifact_id, data)
    try:
        tensors = load_safetensors(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise ArtifactError(artifact_id, "format", f"safetensors payload unreadable ({exc})") from exc
    token_ids, layers = check_tensors(artifact_id, header, tensors)
    if payload_sha256(token_ids, layers) != header.get("payload_sha256"):
        raise ArtifactError(artifact_id, "payload", "payload SHA-256 does not equal the header's")
    return Artifact(artifact_id, header, token_ids, layers)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_header_fields(artifact_id: str, header: dict) -> None:
    positions, specs = header.get("positions"), header.get("layers")
    problems = []
    if not (isinstance(positions, list) and len(positions) == 2 and all(map(_is_count, positions))
            and positions[0] <= positions[1]):
        problems.append(f"positions {positions!r} is not [start, end] with 0 <= start <= end")
    if header.get("dtype") not in DTYPE_NAMES.values():
        problems.append(f"dtype {header.get('dtype')!r} is not one of {sorted(DTYPE_NAMES.values())}")
    for name in ("kv_heads", "head_dim"):
        if not _is_count(header.get(name)) or not header.get(name):
            problems.append(f"{name} {header.get(name)!r} is not a positive integer")
    if not isinstance(specs, list) or not all(
        isinstance(spec, dict) and spec.get("kind") in ("full", "sliding")
        and _is_count(spec.get("seen")) and _is_count(spec.get("kept")) for spec in specs
    ):
        problems.append("layers is not a list of {kind: full|sliding, seen: int, kept: int}")
    parent = header.get("parent")
    if parent is not None and not is_artifact_id(parent):
        problems.append(f"parent {str(parent)[:40]!r} is neither null nor an artifact id")
    if problems:
        raise ArtifactError(artifact_id, "header", "; ".join(problems))


def check_tensors(artifact_id: str, header: dict, tensors: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list]:
    """Check a header's fields and the tensors by name against it; returns ``(token_ids, layers)``: int64
    ``[end - start]`` and per layer ``(keys, values)``, each ``[1, kv_heads, kept, head_dim]`` in the header's
    dtype. Raises :class:`ArtifactError`: ``header`` for malformed fields, ``tensors`` for a missing or
    unexpected tensor or a dtype or shape other than the header's. The payload hash is not checked here."""
    _check_header_fields(artifact_id, header)
    specs = header["layers"]
    start, end = header["positions"]
    dtype = header["dtype"]
    kv_heads, head_dim = header["kv_heads"], header["head_dim"]
    expected = {"token_ids"} | {f"layers.{i}.{part}" for i in range(len(specs)) for part in ("keys", "values")}
    if set(tensors) != expected:
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise ArtifactError(artifact_id, "tensors", f"tensor set differs: missing {missing[:3]}, unexpected {extra[:3]}")
    token_ids = tensors["token_ids"]
    if token_ids.dtype != torch.int64 or tuple(token_ids.shape) != (end - start,):
        raise ArtifactError(artifact_id, "tensors", f"token_ids is {token_ids.dtype} {tuple(token_ids.shape)}")
    layers = []
    for i, spec in enumerate(specs):
        shape = (1, kv_heads, spec["kept"], head_dim)
        pair = (tensors[f"layers.{i}.keys"], tensors[f"layers.{i}.values"])
        for part, tensor in zip(("keys", "values"), pair):
            if DTYPE_NAMES.get(tensor.dtype) != dtype or tuple(tensor.shape) != shape:
                raise ArtifactError(
                    artifact_id, "tensors",
                    f"layers.{i}.{part} is {tensor.dtype} {tuple(tensor.shape)}, header says {dtype} {shape}",
                )
        layers.append(pair)
    return token_ids, layers
