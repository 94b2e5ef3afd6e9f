"""SHA-256 of raw tensor bytes: how an artifact's tensors and a forward's logits are committed to.

A tensor is hashed as its bytes in its own dtype and row-major order; this module imports torch when a function is
called, and the torch-free modules never import it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def _tensor_buffer(tensor):
    """The raw bytes of ``tensor`` as a flat uint8 numpy array (no copy when it is contiguous)."""
    import torch

    # Viewed as uint8 before .numpy(): numpy has no bfloat16, and the bytes are the same for every dtype. A tensor
    # on another device is copied to the host first (.cpu() returns a CPU tensor itself).
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


def tensor_bytes(tensor) -> bytes:
    """The raw bytes of a CPU tensor of any shape, in its own dtype and row-major order (float32: 4 little-endian
    bytes per value, bfloat16 and float16: 2, int64: 8): what graftbench hashes for a tensor. Raises
    ``TypeError`` for a tensor that is not on the CPU."""
    return _tensor_buffer(tensor).tobytes()


def tensors_sha256(parts: Iterable) -> str:
    """SHA-256 hex digest over ``parts`` in order, each a tensor (its :func:`tensor_bytes`) or ``bytes`` (as is).

    The digest of the concatenation: ``tensors_sha256([a, b]) == sha256_bytes(tensor_bytes(a) + tensor_bytes(b))``.
    """
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, (bytes, bytearray, memoryview)) else _tensor_buffer(part))
    return digest.hexdigest()
