"""The artifact format: encode an artifact to safetensors bytes, decode and check bytes back into an artifact.

An artifact is one safetensors file: ``token_ids`` (int64 ``[n]``), and per decoder layer ``layers.{i}.keys`` and
``layers.{i}.values`` (``[1, kv_heads, kept, head_dim]`` in the pinned dtype), with a header (canonical JSON under
the safetensors metadata key ``graftbench``). The artifact id is the SHA-256 of the file's bytes
(:mod:`graftbench.store.ids`), so the same deposit gives the same id and one copy, and any flipped bit (payload
or header) is caught on read. The header also carries ``payload_sha256`` over the tensors' raw bytes, for
provenance.

Nothing is ever unpickled: safetensors parses a JSON header and raw little-endian tensor bytes. Where the bytes go
on disk is :mod:`graftbench.store.folder`'s job.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from safetensors import SafetensorError

from .ids import artifact_id_of, is_artifact_id
from .reader import LayoutError, ReadTiming, metadata_of, parse_header, tensor_layout
from .tensor_hashing import tensors_sha256
from ..util.strict_json import loads_strict

if TYPE_CHECKING:
    import torch

FORMAT = "graftbench.artifact/1"  # torch KV tensors per layer (this module)
LLAMA_FORMAT = "graftbench.llama-state/1"  # a llama.cpp sequence state (graftbench.store.llama_state)
FORMATS = (FORMAT, LLAMA_FORMAT)
# An engine's sequence state in the state container (graftbench.store.llama_state): graftbench.<name>-state/<version>
STATE_FORMAT_PATTERN = re.compile(r"graftbench\.[a-z0-9][a-z0-9._-]*-state/[1-9][0-9]*")
HEADER_KEY = "graftbench"
KV_DTYPES = ("float32", "bfloat16", "float16")  # the dtypes an artifact's keys and values may have


class ArtifactError(ValueError):
    """An artifact that is refused. ``artifact_id`` names it and ``check`` names the check that failed
    (``id``, ``missing``, ``read``, ``size``, ``hash``, ``format``, ``header``, ``tensors``, ``payload``,
    ``config``, ``parent``, ``cpu``: written on another kind of CPU, :mod:`graftbench.store.writers`)."""

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
    (:func:`graftbench.store.tensor_hashing.tensors_sha256`)."""
    return tensors_sha256([token_ids, *[t for pair in layers for t in pair]])


def encode_artifact(header: dict, token_ids: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> bytes:
    """Serialize an artifact to safetensors bytes (deterministic: equal inputs give equal bytes).

    ``header`` gets ``format`` and ``payload_sha256`` filled in.
    """
    from safetensors.torch import save as save_safetensors

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


def is_state_format(name: object) -> bool:
    """Whether ``name`` is the format of an engine's sequence state in the state container
    (:mod:`graftbench.store.llama_state`): ``graftbench.<name>-state/<version>``, e.g. :data:`LLAMA_FORMAT`. The
    container's checks are the store's; whether a state of that format may be restored is its engine's."""
    return isinstance(name, str) and STATE_FORMAT_PATTERN.fullmatch(name) is not None


def header_from_metadata(artifact_id: str, meta: dict) -> dict:
    """The graftbench header from a safetensors ``__metadata__`` dict: the JSON under ``HEADER_KEY``. Raises
    :class:`ArtifactError` (``header``) when it is missing, not a JSON object, or of neither :data:`FORMAT` nor a
    state format (:func:`is_state_format`)."""
    try:
        header = loads_strict(meta[HEADER_KEY], source="the graftbench header")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ArtifactError(artifact_id, "header", f"header is not valid graftbench JSON ({exc})") from exc
    if not isinstance(header, dict) or not (header.get("format") == FORMAT or is_state_format(header.get("format"))):
        raise ArtifactError(artifact_id, "header", f"format is not one of {', '.join(FORMATS)} or another "
                                                   "engine's graftbench.<name>-state/<version>")
    return header


def decode_artifact(artifact_id: str, data: bytes) -> Artifact:
    """Parse and check artifact bytes whose SHA-256 must equal ``artifact_id``.

    Checks, in order: the id hash, the header, the tensor set and shapes against the header, the payload hash.
    Raises :class:`ArtifactError` naming the failed check; never returns a partial artifact.
    """
    if artifact_id_of(data) != artifact_id:
        raise ArtifactError(artifact_id, "hash", "SHA-256 of the file does not equal its id (corrupt or edited)")
    from safetensors.torch import load as load_safetensors

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
    if header.get("dtype") not in KV_DTYPES:
        problems.append(f"dtype {header.get('dtype')!r} is not one of {sorted(KV_DTYPES)}")
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
    check_tensor_specs(artifact_id, header, {name: (str(t.dtype).removeprefix("torch."), tuple(t.shape))
                                             for name, t in tensors.items()})
    pairs = [(tensors[keys], tensors[values]) for keys, values in _layer_names(header)]
    return tensors["token_ids"], pairs


def _layer_names(header: dict) -> list[tuple[str, str]]:
    return [(f"layers.{i}.keys", f"layers.{i}.values") for i in range(len(header["layers"]))]


def require_torch_format(artifact_id: str, header: dict) -> None:
    """Refuse a header of another format than torch KV tensors (:data:`FORMAT`): a llama.cpp state is another
    engine's artifact. Raises :class:`ArtifactError` (``format``)."""
    if header.get("format") != FORMAT:
        raise ArtifactError(artifact_id, "format", f"a {header.get('format')} artifact, not torch KV tensors "
                                                   f"({FORMAT}): another engine's")


def check_tensor_specs(artifact_id: str, header: dict, specs: dict[str, tuple[str, tuple]]) -> None:
    """:func:`check_tensors` on each tensor's ``(dtype name, shape)`` by name (``int64``, ``float32``, ...),
    without the tensors themselves (no torch). Raises :class:`ArtifactError` as :func:`check_tensors` does, and
    ``format`` for an artifact of another format (a llama.cpp state is read by :mod:`graftbench.store.llama_state`)."""
    require_torch_format(artifact_id, header)
    _check_header_fields(artifact_id, header)
    start, end = header["positions"]
    dtype = header["dtype"]
    expected = {"token_ids"} | {name for pair in _layer_names(header) for name in pair}
    if set(specs) != expected:
        missing, extra = sorted(expected - set(specs)), sorted(set(specs) - expected)
        raise ArtifactError(artifact_id, "tensors", f"tensor set differs: missing {missing[:3]}, unexpected {extra[:3]}")
    if specs["token_ids"] != ("int64", (end - start,)):
        raise ArtifactError(artifact_id, "tensors", "token_ids is {} {}".format(*specs["token_ids"]))
    for i, spec in enumerate(header["layers"]):
        shape = (1, header["kv_heads"], spec["kept"], header["head_dim"])
        for name in _layer_names(header)[i]:
            if specs[name] != (dtype, shape):
                raise ArtifactError(artifact_id, "tensors", "{} is {} {}, header says {} {}".format(
                    name, *specs[name], dtype, shape))


def audit_artifact(artifact_id: str, data: bytes) -> dict:
    """:func:`decode_artifact`'s checks of artifact bytes ``data``, in its order (id hash, header, layout, tensor set
    and shapes, payload hash), on the raw bytes: no tensor is made and torch is not imported. Returns the graftbench
    header. The payload hash is over the tensors' bytes in payload order (``token_ids``, then each layer's keys and
    values), which is what :func:`payload_sha256` hashes. Raises :class:`ArtifactError` naming the failed check."""
    if artifact_id_of(data) != artifact_id:
        raise ArtifactError(artifact_id, "hash", "SHA-256 of the file does not equal its id (corrupt or edited)")
    header = decode_header(artifact_id, data)
    require_torch_format(artifact_id, header)
    table, header_len = parse_header(data)
    try:
        entries = tensor_layout(table, len(data) - 8 - header_len)
    except LayoutError as exc:
        raise ArtifactError(artifact_id, "format", f"safetensors payload unreadable ({exc})") from exc
    spans = {name: (8 + header_len + begin, 8 + header_len + end) for name, _, _, begin, end in entries}
    check_tensor_specs(artifact_id, header, {name: (dtype, tuple(shape)) for name, dtype, shape, _, _ in entries})
    digest = hashlib.sha256()
    view = memoryview(data)
    for name in ["token_ids", *[n for pair in _layer_names(header) for n in pair]]:
        digest.update(view[slice(*spans[name])])
    if digest.hexdigest() != header.get("payload_sha256"):
        raise ArtifactError(artifact_id, "payload", "payload SHA-256 does not equal the header's")
    return header
