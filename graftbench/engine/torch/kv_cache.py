"""The KV cache graftbench runs on: preallocated full-attention layers that grow without copying on every token.

``transformers``' ``DynamicLayer`` appends by ``torch.cat``: each decode token copies the layer's whole keys and
values, so after an 8,192-token graft of ``smollm2-135m`` every token copies 377 MB before attending to it.
:class:`PreallocatedLayer` keeps keys and values in buffers with spare positions and writes new rows in place; the
attention sees a view of the filled prefix (``[batch, kv_heads, tokens, head_dim]``, strided when the buffer has
room left). Capacity is reserved explicitly before a prefill or a decode (:func:`reserve`), and otherwise grows by a
quarter (at least :data:`GROWTH_STEP` tokens), so appends cost amortized O(1) copies.

Sliding-window layers (Gemma 3's local layers) stay ``DynamicSlidingWindowLayer``: they hold at most the window
(512 tokens for gemma3-270m), so their concatenation is bounded and their restore state (``cumulative_length``)
is the one the exactness tests already pin.

The buffers' values never change once written and the attention reads the same numbers in the same order, but the
cache class is part of the config pin (``cache_class``), since a different memory layout can change which kernel
runs.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

CACHE_CLASS = "preallocated"
GROWTH_STEP = 256  # tokens: the smallest growth of a layer that runs out of room


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


class PreallocatedLayer(DynamicLayer):
    """A full-attention cache layer whose keys and values live in buffers of ``capacity`` positions.

    ``keys`` and ``values`` are views ``[batch, kv_heads, length, head_dim]`` of the buffers' first ``length``
    positions. Writes go into positions the views never showed before, and a restored artifact's tensors are
    adopted as a buffer with no room left, so the first append moves them to a new buffer and never writes into
    the artifact.
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self._key_buffer = key_states.new_empty((*key_states.shape[:2], 0, key_states.shape[-1]))
        self._value_buffer = value_states.new_empty((*value_states.shape[:2], 0, value_states.shape[-1]))
        self.length = 0
        self._expose()
        self.is_initialized = True

    @property
    def capacity(self) -> int:
        """Positions the buffers hold before they must grow (tokens); 0 before the first write."""
        return int(self._key_buffer.shape[-2]) if self.is_initialized else 0

    def _expose(self) -> None:
        self.keys = self._key_buffer[:, :, : self.length]
        self.values = self._value_buffer[:, :, : self.length]

    def reserve(self, tokens: int) -> None:
        """Make room for ``tokens`` positions in all (one copy of the filled prefix if the buffers must move).

        A no-op before the first write (the layer's batch, heads and dtype are not known yet) and when the
        buffers already hold ``tokens``.
        """
        if not self.is_initialized or tokens <= self.capacity:
            return
        shape = (*self._key_buffer.shape[:2], tokens, self._key_buffer.shape[-1])
        keys, values = self._key_buffer.new_empty(shape), self._value_buffer.new_empty(shape)
        keys[:, :, : self.length].copy_(self.keys)
        values[:, :, : self.length].copy_(self.values)
        self._key_buffer, self._value_buffer = keys, values
        self._expose()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append ``key_states``/``value_states`` (``[batch, kv_heads, n, head_dim]``) in place and return views of
        every position held, as ``DynamicLayer.update`` returns the concatenation."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            self.reserve(_round_up(max(end, self.capacity + self.capacity // 4), GROWTH_STEP))
        self._key_buffer[:, :, self.length : end].copy_(key_states)
        self._value_buffer[:, :, self.length : end].copy_(value_states)
        self.length = end
        self._expose()
        return self.keys, self.values

    def adopt(self, keys: torch.Tensor, values: torch.Tensor, key_buffer: torch.Tensor | None = None,
              value_buffer: torch.Tensor | None = None) -> None:
        """Take ``keys``/``values`` (``[batch, kv_heads, tokens, head_dim]``, e.g. a restored artifact's) as the whole
        state, without a copy. Alone they are never written: capacity equals their length, so the next append
        moves them first. With ``key_buffer``/``value_buffer`` (``[batch, kv_heads, capacity, head_dim]`` whose first
        ``tokens`` positions ``keys``/``values`` are, as :meth:`Store.read` with room returns them) the buffers
        become the layer's and appends write into their spare positions.

        Raises ``ValueError`` when ``keys``/``values`` are not the first positions of the buffers given.
        """
        if not self.is_initialized:
            self.lazy_initialization(keys, values)
        if key_buffer is None or value_buffer is None:
            key_buffer, value_buffer = keys, values
        for part, buffer in ((keys, key_buffer), (values, value_buffer)):
            if (part.data_ptr() != buffer.data_ptr() or part.stride() != buffer.stride()
                    or part.shape[-2] > buffer.shape[-2] or part.shape[:2] != buffer.shape[:2]):
                raise ValueError("adopted keys/values are not the first positions of the buffers given")
        self._key_buffer, self._value_buffer = key_buffer, value_buffer
        self.length = int(keys.shape[-2])
        self._expose()

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def reset(self) -> None:
        if self.is_initialized:
            self.lazy_initialization(self._key_buffer, self._value_buffer)

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last ``-tokens_to_remove`` positions (a negative count, as ``DynamicLayer.crop`` takes)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of tokens to remove, got {tokens_to_remove}")
        self.length = max(self.length + tokens_to_remove, 0)
        self._expose()

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row ``repeats`` times in the batch dimension, keeping the spare positions."""
        if self.is_initialized:
            self._key_buffer = self._key_buffer.repeat_interleave(repeats, dim=0)
            self._value_buffer = self._value_buffer.repeat_interleave(repeats, dim=0)
            self._expose()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the batch rows ``indices`` (a new buffer; the views of earlier rows stay valid)."""
        if self.is_initialized:
            self._key_buffer = self._key_buffer[indices, ...]
            self._value_buffer = self._value_buffer[indices, ...]
            self._expose()


def new_cache(model) -> DynamicCache:
    """An empty cache for ``model``: a :class:`PreallocatedLayer` for every full-attention layer and the model's own
    sliding-window layers (``DynamicCache(config=...)`` decides which layers slide)."""
    cache = DynamicCache(config=model.config)
    cache.layers = [PreallocatedLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def reserve(cache: DynamicCache, tokens: int) -> None:
    """Make room for ``tokens`` positions in every preallocated layer of ``cache`` (see
    :meth:`PreallocatedLayer.reserve`); sliding layers need none."""
    for layer in cache.layers:
        if isinstance(layer, PreallocatedLayer):
            layer.reserve(tokens)
