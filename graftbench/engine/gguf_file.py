"""A GGUF model file checked before an engine reads it: present, readable, a GGUF file, and holding every byte its
header promises; a damaged file is refused naming it and what is wrong.

Both engines read a ``.gguf`` file through libraries whose errors do not name it (``transformers`` de-quantizing
a truncated file says ``cannot reshape array of size ...``; an empty one ``cannot mmap an empty file``).
:func:`check_gguf_file` parses the file's own layout first (the GGUF specification,
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): the magic ``GGUF``, the version (2 or 3), the
metadata key-value pairs, the tensor infos, and from them the byte where the last tensor's data ends, which must
not lie past the file's end. It reads the header only (a few megabytes at most, for a large vocabulary: the file is
mapped, never read whole), not the tensor data. Imports no torch.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # the versions the gguf library reads (version 1 used 32-bit counts)
DEFAULT_ALIGNMENT = 32  # bytes, when the metadata names no ``general.alignment``
# Fixed-size metadata value types by their GGUF type code: struct format (little-endian)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
MAX_DIMS = 8  # a tensor of more dimensions than this is not one ggml makes


class GGUFFileError(ValueError):
    """A model file that is not a sound GGUF file; the message names the file and what is wrong with it."""


class _Cursor:
    """Sequential little-endian reads from the file's bytes (a memory map); a read past their end raises
    :class:`EOFError`."""

    def __init__(self, data, offset: int = 0):
        self.data = data
        self.offset = offset

    def take(self, n: int) -> bytes:
        if self.offset + n > len(self.data):
            raise EOFError(f"the header ends at byte {len(self.data)}, inside a field of {n} bytes at byte "
                           f"{self.offset}")
        self.offset += n
        return self.data[self.offset - n:self.offset]

    def unpack(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.offset + size > len(self.data):
            raise EOFError(f"the header ends at byte {len(self.data)}, inside a field of {size} bytes at byte "
                           f"{self.offset}")
        self.offset += size
        return struct.unpack_from(fmt, self.data, self.offset - size)[0]

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8", "replace")

    def skip(self, n: int) -> None:
        if self.offset + n > len(self.data):
            raise EOFError(f"the header ends at byte {len(self.data)}, inside a field of {n} bytes at byte "
                           f"{self.offset}")
        self.offset += n

    def skip_value(self, kind: int) -> object:
        """Read one metadata value of GGUF type ``kind``; returns a scalar's value (``None`` for others)."""
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            self.skip(self.unpack("<Q"))
            return None
        if kind == _ARRAY:
            item, count = self.unpack("<I"), self.unpack("<Q")
            if item in _SCALARS:
                self.skip(struct.calcsize(_SCALARS[item]) * count)
            else:
                for _ in range(count):
                    self.skip_value(item)
            return None
        raise ValueError(f"metadata value of unknown type {kind} at byte {self.offset}")


def _tensor_bytes(kind: int, dims: list[int], name: str) -> int:
    """Bytes of a tensor of ggml type ``kind`` and shape ``dims`` (blocks of the type's block size)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ValueError, KeyError):
        raise ValueError(f"tensor '{name}' has the unknown ggml type {kind}") from None
    elements = 1
    for d in dims:
        elements *= d
    if elements % block:
        raise ValueError(f"tensor '{name}' has {elements} elements, not whole blocks of {block}")
    return elements // block * size


def _data_end(cursor: _Cursor) -> tuple[int, int]:
    """Parse the header after the magic: ``(tensor count, the byte where the last tensor's data ends)``."""
    version = cursor.unpack("<I")
    if version not in VERSIONS:
        raise ValueError(f"GGUF version {version} is not one graftbench reads ({', '.join(map(str, VERSIONS))})")
    tensors, pairs = cursor.unpack("<Q"), cursor.unpack("<Q")
    alignment = DEFAULT_ALIGNMENT
    for _ in range(pairs):
        key = cursor.string()
        value = cursor.skip_value(cursor.unpack("<I"))
        if key == "general.alignment" and isinstance(value, int) and value > 0:
            alignment = value
    end = 0
    for _ in range(tensors):
        name, n_dims = cursor.string(), cursor.unpack("<I")
        if n_dims > MAX_DIMS:
            raise ValueError(f"tensor '{name}' claims {n_dims} dimensions")
        dims = [cursor.unpack("<Q") for _ in range(n_dims)]
        kind, offset = cursor.unpack("<I"), cursor.unpack("<Q")
        end = max(end, offset + _tensor_bytes(kind, dims, name))
    data_start = -(-cursor.offset // alignment) * alignment
    return tensors, data_start + end


def check_gguf_file(path: str | Path) -> None:
    """Check that ``path`` is a GGUF file an engine can read: a regular file that can be opened, not empty,
    starting with the magic ``GGUF``, of version 2 or 3, whose header parses to its end and whose tensors' data
    (offsets and sizes in bytes from the header, by each ggml type's block size) lies within the file.

    Raises :class:`GGUFFileError` naming ``path`` and what is wrong: ``is empty``, ``cannot be read`` (with the
    system's reason), ``is not a GGUF file`` (with its first bytes), ``has a damaged header`` (where and why), or
    ``is truncated`` (the bytes its tensors need against the bytes it holds)."""
    shown = str(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                raise GGUFFileError(f"model file '{shown}' is empty (0 bytes): not a GGUF file; copy or download "
                                    "it again")
            magic = handle.read(len(MAGIC))
            if magic != MAGIC:
                raise GGUFFileError(f"model file '{shown}' is not a GGUF file: it starts with {magic!r}, not "
                                    f"{MAGIC!r}")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                try:
                    tensors, end = _data_end(_Cursor(data, len(MAGIC)))
                except (EOFError, ValueError, struct.error) as exc:
                    raise GGUFFileError(f"model file '{shown}' has a damaged GGUF header ({size:,} bytes): "
                                        f"{exc}") from None
    except OSError as exc:
        raise GGUFFileError(f"model file '{shown}' cannot be read: {exc.strerror or exc}") from None
    if end > size:
        raise GGUFFileError(f"model file '{shown}' is truncated: its {tensors} tensors need {end:,} bytes, the "
                            f"file holds {size:,}; copy or download it again")
