"""The torch engine's side of ``check-exact`` (:class:`graftbench.engine.base.ExactnessChecks`): the deposit (an
artifact's bytes round trip), the graft, the fresh chunked recompute, and its negative controls.

Controls (each against the fresh recompute unless said otherwise; those of :data:`MUST_DIFFER` are claimed to differ
on every pair, the others are reported as measured):

- ``monolithic``: one forward over artifact + query (other matmul shapes);
- ``chunk-N``: the artifact prefilled with another chunk size;
- ``shift-k``: the artifact's keys computed at positions 0..n-1 and re-rotated by RoPE to k..k+n-1
  (:meth:`TorchExactness.shift_positions`), against a fresh computation at k..k+n-1 (RoPE rotations compose
  exactly in real numbers, not in floating point);
- ``naive-restore`` (models with sliding-window layers): kept keys and values copied back with ``update`` so the
  layer forgets how many tokens it has seen;
- ``key-bit-flip`` (the sensitivity control): the graft with one bit of one restored key flipped
  (:data:`KEY_BIT_FLIP`), which must differ: the check sees one wrong value in the restored bytes.
"""

from __future__ import annotations

import inspect
from typing import Iterator

import torch
from transformers.models.llama.modeling_llama import rotate_half

from . import forward, graft
from ..base import CONTROL_SHIFTS, Deposited
from ...store.codec import decode_artifact
from ...store.ids import artifact_id_of

# Where the key-bit-flip control flips one bit of the restored state, recorded in the manifest's settings
KEY_BIT_FLIP = {"layer": 0, "kv_head": 0, "token": "the artifact's last", "element": 0,
                "bit": "the highest mantissa bit (float32 22, bfloat16 6, float16 9)"}
# The controls claimed to differ on every pair (recorded in the settings); the others are reported as measured:
# another chunk schedule gives the same bytes on most pairs, a naive restore on an artifact inside the window
MUST_DIFFER = sorted(["monolithic", *(f"shift-{k}" for k in CONTROL_SHIFTS), "key-bit-flip"])


def sliding_window(session) -> int | None:
    """The model's sliding window in tokens, when it has sliding-window layers (``session``: a torch
    :class:`graftbench.engine.torch.session.TorchSession`)."""
    config = session.model.config.get_text_config()
    if any(graft.layer_kind(layer) == "sliding" for layer in forward.new_cache(session.model).layers):
        return int(config.sliding_window)
    return None


def rotate_cache(session, cache, shift: int) -> None:
    """Re-rotate every cached key by ``shift`` positions with the model's own RoPE (per layer type's base)."""
    rotary = session.model.model.rotary_emb
    layer_types = getattr(session.model.config.get_text_config(), "layer_types", None)
    if "layer_type" not in inspect.signature(rotary.forward).parameters:
        layer_types = None  # one RoPE base for every layer (e.g. Qwen2, whose config lists layer types too)
    for i, layer in enumerate(cache.layers):
        kwargs = {"layer_type": layer_types[i]} if layer_types else {}
        cos, sin = rotary(layer.keys, torch.tensor([[shift]], device=layer.keys.device), **kwargs)
        cos, sin = cos[:, None], sin[:, None]
        layer.keys = layer.keys * cos + rotate_half(layer.keys) * sin


class TorchExactness:
    """check-exact on a torch session: a deposit is the artifact's bytes written and parsed back (its id commits
    it), restored at its own positions."""

    deposit_field = "artifact_id"
    deposit_label = "artifact id"

    def __init__(self, session):
        self.session = session

    @property
    def window(self) -> int:
        """The model's sliding window in tokens (0: none)."""
        return sliding_window(self.session) or 0

    def deposit(self, artifact: list[int]) -> Deposited:
        """The artifact of ``artifact`` built (:func:`graftbench.engine.torch.graft.build_artifact`), serialized and
        parsed back: its id, and the parsed artifact."""
        data, _ = graft.build_artifact(self.session.model, self.session.config, artifact, {})
        parsed = decode_artifact(artifact_id_of(data), data)
        return Deposited(parsed.id, parsed)

    def graft_logits(self, deposited: Deposited, query: list[int]) -> torch.Tensor:
        """The query's logits ``[len(query), vocab]`` after the artifact is restored at its own positions."""
        cache = graft.restore(self.session.model, self.session.config, deposited.payload)
        return forward.prefill(self.session.model, cache, query, self.session.config.chunk_size, all_logits=True)

    def fresh_logits(self, artifact: list[int], query: list[int], chunk_size: int | None = None,
                     offset: int = 0) -> torch.Tensor:
        """The query's logits ``[len(query), vocab]`` from a fresh cache
        (:func:`graftbench.engine.torch.graft.fresh_recompute`),
        the artifact prefilled in chunks of ``chunk_size`` (default: the pin's) at positions from ``offset``."""
        return graft.fresh_recompute(self.session.model, self.session.config, [artifact], query, all_logits=True,
                                     segment_chunk_size=chunk_size, offset=offset)

    def shift_positions(self, cache, shift: int) -> None:
        """Move a restored cache ``shift`` positions on: every key re-rotated by the model's own RoPE
        (:func:`rotate_cache`; the torch counterpart of llama.cpp's ``shift_positions``)."""
        rotate_cache(self.session, cache, shift)

    def controls(self, artifact: list[int], query: list[int], fresh: torch.Tensor,
                 deposited: Deposited) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
        """The negative controls of one pair (see the module docstring), each ``(name, reference, other)``."""
        session = self.session
        model, chunk = session.model, session.config.chunk_size
        mono = forward.forward(model, forward.new_cache(model), artifact + query, all_logits=True)
        yield "monolithic", fresh, mono[len(artifact):]
        other_chunk = chunk // 2 if chunk > 1 else 2
        yield f"chunk-{other_chunk}", fresh, self.fresh_logits(artifact, query, other_chunk)
        for shift in CONTROL_SHIFTS:
            cache = graft.restore(model, session.config, deposited.payload)
            self.shift_positions(cache, shift)
            shifted = forward.prefill(model, cache, query, chunk, all_logits=True, offset=shift)
            yield f"shift-{shift}", self.fresh_logits(artifact, query, offset=shift), shifted
        if sliding_window(session):
            cache = forward.new_cache(model)
            device = forward.model_device(model)
            for layer, (keys, values) in zip(cache.layers, deposited.payload.layers):
                layer.update(keys.to(device, copy=True), values.to(device, copy=True))
            yield "naive-restore", fresh, forward.prefill(model, cache, query, chunk, all_logits=True)
        cache = graft.restore(model, session.config, deposited.payload)
        graft.flip_key_bit(cache, layer=KEY_BIT_FLIP["layer"], element=KEY_BIT_FLIP["element"])
        yield "key-bit-flip", fresh, forward.prefill(model, cache, query, chunk, all_logits=True)

    def control_settings(self) -> dict:
        """The controls claimed to differ (:data:`MUST_DIFFER`) and where the bit is flipped (:data:`KEY_BIT_FLIP`)."""
        return {"must_differ": MUST_DIFFER, "key_bit_flip": KEY_BIT_FLIP}

    def settings(self, problems: list, layout) -> dict:
        """No settings beyond the common ones."""
        return {}
