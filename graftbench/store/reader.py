"""The graft's read path: one pass from the file into per-tensor buffers, hashing the bytes as they arrive.

A restore reads an artifact straight into freshly allocated tensors (one copy out of the page cache, no
intermediate ``bytes``, no clone) and feeds every byte of the file, header included, to an integrity hash in the
same pass. Two integrity methods:

``xxh3_128``
    The default at restore. XXH3-128 of the whole file, compared with the digest recorded in the store's index
    when the artifact was written (from the same bytes whose SHA-256 is the id). About 26 GB/s here against
    1.8 GB/s for SHA-256 (issue #4's figures on 184 MB; ``graftbench bench`` re-measures them), so the check costs
    a few percent of the read. It catches accidental corruption (any flipped bit, a truncation, a swapped
    block) with probability 1 - 2^-128; it is not a defence against someone who can rewrite both the file and the
    index, which is what the SHA-256 id is for.
``sha256``
    SHA-256 of the whole file compared with the artifact id: provenance. Used by ``store verify``, on import, and
    for any artifact whose index row has no XXH3 digest (an older store, or a file not yet indexed).

Tensors are laid out as safetensors writes them: an 8-byte little-endian header length, a JSON table of
``{name: {dtype, shape, data_offsets}}`` plus ``__metadata__``, then the tensors' raw bytes back to back. This module
is the one place that parses that header (:func:`header_length`, :func:`parse_table`, :func:`metadata_of`, and
:func:`parse_header` for bytes held in memory) and bounds it (``MAX_HEADER_BYTES``).
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import xxhash

from ..util.safe_files import open_regular
from ..util.strict_json import loads_strict

if TYPE_CHECKING:
    import torch

INTEGRITY_METHODS = ("xxh3_128", "sha256")
MAX_HEADER_BYTES = 1 << 20  # bytes; a header larger than 1 MiB is refused before it is parsed
# safetensors dtype code -> (dtype name, bytes per value); torch is imported only where tensors are made
SAFETENSORS_DTYPES = {"F32": ("float32", 4), "BF16": ("bfloat16", 2), "F16": ("float16", 2), "I64": ("int64", 8)}
_SKIP_BLOCK = 1 << 22  # bytes read at a time when hashing past a header that could not be laid out


class LayoutError(ValueError):
    """A safetensors file whose header or tensor table cannot be read; ``check`` is ``format`` or ``header``."""

    def __init__(self, check: str, detail: str):
        self.check = check
        super().__init__(detail)


@dataclass
class ReadTiming:
    """Seconds spent in one artifact read: ``read_s`` copying bytes from the file (page cache or disk) into
    tensors, ``integrity_s`` hashing them, ``parse_s`` parsing the header; ``bytes`` read in all."""

    read_s: float = 0.0
    integrity_s: float = 0.0
    parse_s: float = 0.0
    bytes: int = 0


@dataclass
class RawArtifact:
    """What one read returns: the safetensors ``__metadata__`` dict, the tensors by name, the hex digest of the
    whole file under the integrity method used, and the timing. ``buffers`` holds, for each 4-D tensor read with
    room (:func:`read_safetensors`), the whole buffer the tensor is the first positions of. ``layout_error`` is set (and ``tensors`` empty)
    when the header could not be laid out; the caller compares the digest first, so that a damaged file is
    reported as damaged rather than as malformed."""

    metadata: dict
    tensors: dict[str, torch.Tensor]
    digest: str
    timing: ReadTiming = field(default_factory=ReadTiming)
    layout_error: LayoutError | None = None
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)


def new_hasher(method: str):
    """A streaming hasher for ``method`` (``xxh3_128`` or ``sha256``); raises ``ValueError`` for any other."""
    if method == "xxh3_128":
        return xxhash.xxh3_128()
    if method == "sha256":
        return hashlib.sha256()
    raise ValueError(f"integrity method {method!r} is not one of {INTEGRITY_METHODS}")


def xxh3_128_hex(data: bytes) -> str:
    """XXH3-128 hex digest (32 characters) of ``data``: the digest the index records for an artifact file."""
    return xxhash.xxh3_128_hexdigest(data)


def xxh3_128_stream():
    """A streaming XXH3-128 (``update(bytes)``, ``hexdigest()``): :func:`xxh3_128_hex` of everything fed to it."""
    return xxhash.xxh3_128()


def tensor_layout(table: dict, body_bytes: int) -> list[tuple[str, str, list[int], int, int]]:
    """``(name, dtype name, shape, start, end)`` per tensor of a parsed header ``table`` in file order, ``start``
    and ``end`` in bytes from the start of the body (after the header), checked to tile the ``body_bytes`` exactly.
    Imports no torch. Raises :class:`LayoutError` (``format``) for an unsupported dtype, a malformed shape or
    offsets, a span that does not fit its shape, or a gap or overlap."""
    entries = []
    for name, spec in table.items():
        if name == "__metadata__":
            continue
        if not isinstance(spec, dict) or spec.get("dtype") not in SAFETENSORS_DTYPES:
            raise LayoutError("format", f"tensor {name[:40]!r} has no supported dtype")
        shape, offsets = spec.get("shape"), spec.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise LayoutError("format", f"tensor {name[:40]!r} has a malformed shape or data_offsets")
        dtype, itemsize = SAFETENSORS_DTYPES[spec["dtype"]]
        nbytes = itemsize * math.prod(shape)
        if offsets[1] - offsets[0] != nbytes:
            raise LayoutError("format", f"tensor {name[:40]!r} spans {offsets} but its shape needs {nbytes} bytes")
        entries.append((name, dtype, shape, offsets[0], offsets[1]))
    entries.sort(key=lambda e: e[3])
    cursor = 0
    for name, _, _, start, end in entries:
        if start != cursor:
            raise LayoutError("format", f"tensor {name[:40]!r} starts at {start}, expected {cursor} (gap or overlap)")
        cursor = end
    if cursor != body_bytes:
        raise LayoutError("format", f"tensors cover {cursor} bytes, the file holds {body_bytes} after the header")
    return entries


def header_length(prefix: bytes, file_bytes: int) -> int:
    """The length in bytes of a safetensors file's JSON header, from the file's first 8 bytes ``prefix`` (a
    little-endian unsigned integer) and the file's size ``file_bytes``; the header is bytes ``8 .. 8 + length``
    and the tensors' bytes follow it.

    Raises :class:`LayoutError` (``format``) when the file is shorter than 8 bytes, or the length is over
    ``MAX_HEADER_BYTES`` or runs past the end of the file.
    """
    if len(prefix) < 8:
        raise LayoutError("format", f"file of {file_bytes} bytes is shorter than the 8-byte safetensors header length")
    length = int.from_bytes(prefix[:8], "little")
    if length > MAX_HEADER_BYTES:
        raise LayoutError("format", f"safetensors header of {length} bytes is oversized (over {MAX_HEADER_BYTES})")
    if length > file_bytes - 8:
        raise LayoutError("format", f"safetensors header of {length} bytes is longer than the file ({file_bytes} "
                                    "bytes): truncated")
    return length


def parse_table(header: bytes) -> dict:
    """The safetensors header's JSON object: ``{name: {dtype, shape, data_offsets}}`` and maybe ``__metadata__``.

    Raises :class:`LayoutError` (``header``) when ``header`` is not JSON or not a JSON object.
    """
    try:
        table = loads_strict(header, source="the safetensors header")
    except (ValueError, RecursionError) as exc:
        raise LayoutError("header", f"safetensors header is not JSON ({exc})") from exc
    if not isinstance(table, dict):
        raise LayoutError("header", "safetensors header is not a JSON object")
    return table


def metadata_of(table: dict) -> dict:
    """The ``__metadata__`` object of a parsed header table (``{}`` when absent or empty).

    Raises :class:`LayoutError` (``header``) when it is something other than an object.
    """
    metadata = table.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise LayoutError("header", "__metadata__ is not an object")
    return metadata


def parse_header(data: bytes) -> tuple[dict, int]:
    """Parse the header of safetensors bytes held in memory: ``(table, header_len)``, where ``table`` is the
    header's JSON object (:func:`parse_table`) and ``header_len`` its length in bytes, so the tensors' bytes start
    at ``8 + header_len``. Raises :class:`LayoutError`: ``format`` for a missing, oversized or truncated header,
    ``header`` for one that is not a JSON object. The tensor table itself is not checked here.
    """
    length = header_length(bytes(data[:8]), len(data))
    return parse_table(bytes(data[8 : 8 + length])), length


class _Reader:
    """Reads a file's bytes in order, into caller buffers, feeding them to a hasher and timing both."""

    def __init__(self, handle, hasher, timing: ReadTiming):
        self.handle, self.hasher, self.timing = handle, hasher, timing

    def read_into(self, view: memoryview) -> None:
        started = time.perf_counter()
        done = 0
        while done < len(view):
            n = self.handle.readinto(view[done:])
            if not n:
                raise LayoutError("format", f"file ended {len(view) - done} bytes early")
            done += n
        hashed = time.perf_counter()
        self.hasher.update(view)
        self.timing.read_s += hashed - started
        self.timing.integrity_s += time.perf_counter() - hashed
        self.timing.bytes += len(view)

    def read_bytes(self, n: int) -> bytes:
        buffer = bytearray(n)
        self.read_into(memoryview(buffer))
        return bytes(buffer)

    def skip_rest(self) -> None:
        buffer = memoryview(bytearray(_SKIP_BLOCK))
        while True:
            started = time.perf_counter()
            n = self.handle.readinto(buffer)
            hashed = time.perf_counter()
            if not n:
                break
            self.hasher.update(buffer[:n])
            self.timing.read_s += hashed - started
            self.timing.integrity_s += time.perf_counter() - hashed
            self.timing.bytes += n


def _allocate(dtype: str, shape: list[int], room: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A tensor of ``shape`` and dtype name ``dtype`` to read into and, for a 4-D shape with ``room`` > 0, the
    buffer it begins: ``room`` more positions along dim 2 (``[batch, heads, tokens + room, head_dim]``)."""
    import torch

    dtype = getattr(torch, dtype)
    if room <= 0 or len(shape) != 4:
        return torch.empty(shape, dtype=dtype), None
    buffer = torch.empty([shape[0], shape[1], shape[2] + room, shape[3]], dtype=dtype)
    return buffer[:, :, : shape[2]], buffer


def _byte_views(tensor: torch.Tensor) -> list[memoryview]:
    """Byte views of ``tensor``'s storage in its element order: one for a contiguous tensor, one per
    ``[batch, head]`` block for a 4-D prefix view of a buffer with room."""
    import torch

    if tensor.is_contiguous():
        return [memoryview(tensor.view(-1).view(torch.uint8).numpy())]
    return [memoryview(block.reshape(-1).view(torch.uint8).numpy()) for row in tensor for block in row]


def read_safetensors(path: str | Path, method: str, room: int = 0) -> RawArtifact:
    """Read a safetensors file in one pass into one new tensor per entry, hashing every byte with ``method``.

    Tensor shapes are as the file's table says (``[kv_heads, ...]`` etc.; the caller checks them against its own
    header). With ``room`` > 0 every 4-D tensor (``[batch, heads, tokens, head_dim]``: an artifact's keys and
    values) is read into the first positions of a buffer with ``room`` more positions (``RawArtifact.buffers``),
    so a KV cache can take the buffer and append without moving it; the bytes read and hashed are the same.
    Raises ``OSError`` when the file cannot be opened or read or is not a regular file
    (:class:`graftbench.util.safe_files.UnsafeFileError`), and ``ValueError`` for an unknown method;
    a file whose table cannot be laid out comes back with ``layout_error`` set and the rest of the file hashed.
    """
    timing = ReadTiming()
    hasher = new_hasher(method)
    path = Path(path)
    with open_regular(path, what="artifact file") as handle:  # a FIFO or a device is refused, never read
        size = os.fstat(handle.fileno()).st_size
        reader = _Reader(handle, hasher, timing)
        try:
            header_bytes = header_length(reader.read_bytes(8) if size >= 8 else b"", size)
            header = reader.read_bytes(header_bytes)
            started = time.perf_counter()
            table = parse_table(header)
            entries = tensor_layout(table, size - 8 - header_bytes)
            timing.parse_s += time.perf_counter() - started
            tensors, buffers = {}, {}
            for name, dtype, shape, _, _ in entries:
                tensor, buffer = _allocate(dtype, shape, room)
                if tensor.numel():
                    for view in _byte_views(tensor):
                        reader.read_into(view)
                tensors[name] = tensor
                if buffer is not None:
                    buffers[name] = buffer
        except LayoutError as exc:
            reader.skip_rest()
            return RawArtifact({}, {}, hasher.hexdigest(), timing, exc)
    try:
        metadata = metadata_of(table)
    except LayoutError as exc:
        return RawArtifact({}, {}, hasher.hexdigest(), timing, exc)
    return RawArtifact(metadata, tensors, hasher.hexdigest(), timing, buffers=buffers)
