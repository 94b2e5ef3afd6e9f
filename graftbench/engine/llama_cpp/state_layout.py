"""Where each cached key lies in llama.cpp's sequence state bytes, so that a control can change one bit of one key.

The layout read is the one ``llama_state_seq_get_data`` writes (the version llama-cpp-python 0.3.36 vendors): a
header, then llama.cpp's ``llama_kv_cache::state_write`` once per KV cache of the model (a sliding-window model
writes two: its full-attention layers' cache, then its window's), all integers little-endian::

    u32 magic (:data:`SEQ_STATE_MAGIC`), i32 seq_id                            the header
    per cache: u32 n_stream
    per stream: u32 cell_count; when cell_count > 0:
        cell_count × (i32 pos, u32 n_seq_id, n_seq_id × i32 seq_id)            the cells' metadata
        u32 v_trans, u32 n_layer
        n_layer × (i32 k_type, u64 k_row_bytes, cell_count × k_row_bytes)       keys, one row per cell
        v_trans == 0: n_layer × (i32 v_type, u64 v_row_bytes, cell_count × v_row_bytes)
        v_trans == 1: n_layer × (i32 v_type, u32 v_element_bytes, u32 n_embd_v,
                                 n_embd_v × cell_count × v_element_bytes)

:func:`parse_state` reads it and accepts it only when it accounts for every byte, so another llama.cpp version whose
layout differs is refused (``ValueError``) rather than misread. Imports no llama.cpp and no torch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# ggml type ids (ggml.h) of the KV cache types offered, with their block size (elements) and block bytes
GGML_F16, GGML_Q4_0, GGML_Q8_0 = 1, 2, 8
KEY_TYPES = {GGML_F16: ("f16", 1, 2), GGML_Q4_0: ("q4_0", 32, 18), GGML_Q8_0: ("q8_0", 32, 34)}
SEQ_STATE_MAGIC = 0xAF143CD8  # llama.cpp's sequence state magic, as the vendored build writes it
TOP_BITS = {"f16": 9, "q8_0": 6, "q4_0": 2}  # the highest mantissa bit, or the highest magnitude bit of a quant


@dataclass(frozen=True)
class KeyRows:
    """One layer's keys in one cache of a state: ``offset`` (bytes into the state) of the first cell's row,
    ``row_bytes`` per cell, the ggml ``key_type`` id, and the cells' positions in row order."""

    cache: int
    layer: int
    key_type: int
    offset: int
    row_bytes: int
    positions: tuple[int, ...]


@dataclass(frozen=True)
class ValueBlock:
    """One layer's values in one cache of a state: ``offset`` (bytes into the state) and ``size`` (bytes) of the
    block, the ggml ``value_type`` id and whether it is ``transposed`` (llama.cpp stores V transposed without flash
    attention: ``n_embd_v`` rows of one element per cell, else one row per cell)."""

    cache: int
    layer: int
    value_type: int
    offset: int
    size: int
    transposed: bool


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ValueError(f"the state ends at byte {len(self.data)} inside a field at byte {self.at}")
        value = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += size
        return value

    def skip(self, size: int) -> int:
        start = self.at
        if size < 0 or start + size > len(self.data):
            raise ValueError(f"a block of {size} bytes at byte {start} runs past the state's {len(self.data)} bytes")
        self.at += size
        return start


def _stream(reader: _Reader, cache: int, cells: int, seq_offsets: list[int] | None = None,
            values: list[ValueBlock] | None = None) -> list[KeyRows]:
    positions = []
    for _ in range(cells):
        positions.append(reader.take("<i"))
        n_seq = reader.take("<I")
        if n_seq > 1:
            raise ValueError(f"a cell of the state lists {n_seq} sequences; a sequence state lists one")
        at = reader.skip(4 * n_seq)
        if seq_offsets is not None and n_seq:
            seq_offsets.append(at)
    v_trans, n_layer = reader.take("<I"), reader.take("<I")
    if v_trans > 1 or not 0 < n_layer < 10_000:
        raise ValueError(f"the state's data header (v_trans {v_trans}, {n_layer} layers) is not one this reads")
    keys = []
    for layer in range(n_layer):
        key_type, row_bytes = reader.take("<i"), reader.take("<Q")
        if key_type not in KEY_TYPES:
            raise ValueError(f"layer {layer}'s key type {key_type} is not f16, q8_0 or q4_0")
        keys.append(KeyRows(cache, layer, key_type, reader.skip(cells * row_bytes), row_bytes, tuple(positions)))
    for layer in range(n_layer):
        value_type = reader.take("<i")
        if v_trans:
            element_bytes, n_embd = reader.take("<I"), reader.take("<I")
            size = n_embd * cells * element_bytes
        else:
            size = cells * reader.take("<Q")
        at = reader.skip(size)
        if values is not None:
            values.append(ValueBlock(cache, layer, value_type, at, size, bool(v_trans)))
    return keys


def parse_state(state: bytes) -> list[KeyRows]:
    """Every layer's key rows in llama.cpp's sequence state ``state``, cache by cache, layer by layer.

    Raises ``ValueError`` when the bytes do not follow the layout in the module docstring to their very end (another
    llama.cpp version's layout, a truncated or foreign state, a cache type other than f16, q8_0 or q4_0)."""
    return _parse(state)


def layer_blocks(state: bytes) -> list[tuple[KeyRows, ValueBlock]]:
    """Every layer's key rows and value block in llama.cpp's sequence state ``state``, cache by cache, layer by
    layer (the per-layer K and V of a layer trace). Raises ``ValueError`` as :func:`parse_state`."""
    values: list[ValueBlock] = []
    keys = _parse(state, values)
    return list(zip(keys, values, strict=True))


def _parse(state: bytes, values: list[ValueBlock] | None = None) -> list[KeyRows]:
    """:func:`parse_state`, appending each layer's :class:`ValueBlock` to ``values`` when given."""
    reader, keys, cache = _Reader(state), [], 0
    magic = reader.take("<I")
    if magic != SEQ_STATE_MAGIC:
        raise ValueError(f"the state starts with {magic:#010x}, not llama.cpp's sequence state magic "
                         f"{SEQ_STATE_MAGIC:#010x}")
    reader.take("<i")  # the sequence the state was taken from
    while reader.at < len(state):
        n_stream = reader.take("<I")
        if not 0 < n_stream <= 64:
            raise ValueError(f"cache {cache} of the state has {n_stream} streams; this reads 1 to 64")
        for _ in range(n_stream):
            cells = reader.take("<I")
            if cells:
                keys += _stream(reader, cache, cells, values=values)
        cache += 1
    if not keys:
        raise ValueError("the state holds no cached keys")
    return keys


def in_streams(state: bytes, n_stream: int, stream: int = 0, seq_id: int | None = None) -> bytes:
    """``state`` (a sequence state of a context with one stream per cache: a unified cache or one sequence) laid out
    as llama.cpp writes a sequence of a context of ``n_stream`` streams per cache (its non-unified cache of
    ``n_seq_max`` = ``n_stream`` sequences): each cache's cells in stream ``stream``, every other stream empty (a
    cell count of 0); with ``seq_id``, the header's and every cell's sequence id set to it. llama.cpp restores a
    sequence's cells into the stream of the sequence it is asked to fill, whichever stream held them, ignoring the
    ids; it refuses a state whose stream count is not its context's. The cells, their positions and every key and
    value byte are unchanged.

    Raises ``ValueError`` as :func:`parse_state`, for a state with more than one stream in a cache, or for a
    ``stream`` outside ``0..n_stream-1`` or an ``n_stream`` outside 1..64."""
    if not 0 < n_stream <= 64 or not 0 <= stream < n_stream:
        raise ValueError(f"stream {stream} of {n_stream}: llama.cpp's sequence states hold 1 to 64 streams")
    parse_state(state)  # the whole layout, every byte accounted for
    reader = _Reader(state)
    head = bytearray(state[:8])
    if seq_id is not None:
        struct.pack_into("<i", head, 4, seq_id)
    pieces = [bytes(head)]
    reader.skip(8)  # the magic and the sequence id
    while reader.at < len(state):
        if reader.take("<I") != 1:
            raise ValueError("the state already holds several streams in a cache")
        start = reader.at
        cells, offsets = reader.take("<I"), []
        if cells:
            _stream(reader, 0, cells, offsets)
        block = bytearray(state[start:reader.at])
        for at in offsets if seq_id is not None else ():
            struct.pack_into("<i", block, at - start, seq_id)
        empty = struct.pack("<I", 0)
        pieces += [struct.pack("<I", n_stream), empty * stream, bytes(block), empty * (n_stream - 1 - stream)]
    return b"".join(pieces)


def key_bit(rows: KeyRows, position: int, element: int = 0, bit: int | None = None) -> tuple[int, int, str]:
    """Where one bit of one key value lies: ``(byte offset into the state, bit in that byte, what it is)`` for
    element ``element`` of the key ``rows`` holds for ``position``.

    The bit is ``bit`` of the element's stored value, counted from the least significant bit of the little-endian
    value: an f16 key's bits 0-9 are its mantissa; a q8_0 key's stored value is its int8 quant (bit 7 its sign), a
    q4_0 key's its 4-bit quant (offset by 8, bits 0-3). By default the highest bit below the sign and exponent
    (:data:`TOP_BITS`: f16 bit 9, q8_0 bit 6, q4_0 bit 2), which moves the value by a quarter to a half of itself or
    of its block's range. Raises ``ValueError`` for a position the rows do not hold, an element past the row or a bit
    outside the stored value."""
    if position not in rows.positions:
        raise ValueError(f"no cell of cache {rows.cache} holds position {position}")
    name, block, block_bytes = KEY_TYPES[rows.key_type]
    if not 0 <= element < rows.row_bytes // block_bytes * block:
        raise ValueError(f"element {element} is outside a key row of {rows.row_bytes} bytes")
    row = rows.offset + rows.positions.index(position) * rows.row_bytes
    bit = TOP_BITS[name] if bit is None else bit
    if name == "f16":
        if not 0 <= bit < 16:
            raise ValueError(f"bit {bit} is outside an f16 value")
        return row + 2 * element + bit // 8, bit % 8, f"f16 bit {bit}" + (" (mantissa)" if bit < 10 else "")
    start = row + element // block * block_bytes + 2  # past the block's f16 scale
    within = element % block
    if name == "q8_0":
        if not 0 <= bit < 8:
            raise ValueError(f"bit {bit} is outside a q8_0 quant")
        return start + within, bit, f"q8_0 quant bit {bit}"
    if not 0 <= bit < 4:
        raise ValueError(f"bit {bit} is outside a q4_0 quant")
    # q4_0: elements 0..15 are the low nibbles of the block's 16 bytes, 16..31 the high nibbles
    return start + within % 16, bit + (4 if within >= 16 else 0), f"q4_0 quant bit {bit}"


def flip_key_bit(state: bytes, position: int, element: int = 0, bit: int | None = None) -> tuple[bytes, dict]:
    """``state`` with one bit of one key value flipped: element ``element`` of the first layer of the first cache's
    key at ``position`` (bit ``bit``, by default the highest mantissa or magnitude bit, as :func:`key_bit`).
    Returns the new bytes and where the flip was (``cache``, ``layer``, ``position``, ``element``, ``byte``,
    ``bit`` in that byte, ``what``).

    Raises ``ValueError`` as :func:`parse_state` and :func:`key_bit` do."""
    rows = parse_state(state)[0]
    byte, bit_in_byte, what = key_bit(rows, position, element, bit)
    flipped = bytearray(state)
    flipped[byte] ^= 1 << bit_in_byte
    return bytes(flipped), {"cache": rows.cache, "layer": rows.layer, "position": position, "element": element,
                            "byte": byte, "bit": bit_in_byte, "what": what}
