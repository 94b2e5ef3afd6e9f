"""Deposit a text as a KV artifact, and restore an artifact into a fresh cache at its own positions.

A restore rebuilds each cache layer's whole state, not only its tensors: a sliding-window layer also gets the
number of tokens it has seen (``cumulative_length``), without which Gemma 3's logits come out off by about 30 while
nothing raises (docs/exactness.md). The exactness test is what catches a restore that forgets state.
"""

from __future__ import annotations

import time

import torch
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from . import forward
from .kv_cache import PreallocatedLayer
from ...store.codec import Artifact, ArtifactError, encode_artifact
from ..pin import PinnedConfig
from ...store.folder import Store

# Header fields that must equal the current pinned config for an artifact to be grafted.
PINNED_HEADER_FIELDS = ("config_fingerprint", "weights_sha256", "tokenizer_sha256", "dtype", "chunk_size")


def layer_kind(layer) -> str:
    """``sliding`` or ``full`` for the cache layer classes graftbench can save and restore.

    Raises ``TypeError`` for any other kind (e.g. a quantized or static layer), rather than guessing its state.
    """
    if isinstance(layer, DynamicSlidingWindowLayer):
        return "sliding"
    if isinstance(layer, PreallocatedLayer) or type(layer) is DynamicLayer:
        return "full"
    raise TypeError(f"cache layer {type(layer).__name__} is not supported for deposit or graft")


def _host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``tensor`` in host memory (an artifact is written from the host)."""
    if tensor.device.type == "cpu":
        return tensor.contiguous().clone()
    return tensor.to("cpu", copy=True).contiguous()


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (read on the host) on ``device``: itself on the CPU, else copied through pinned host memory."""
    if device.type == "cpu":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def capture(cache, start: int) -> tuple[list[dict], list[tuple[torch.Tensor, torch.Tensor]]]:
    """The per-layer state to store for a segment that began at position ``start``.

    Full layers keep the segment's own rows (positions ``start..end-1``); sliding layers keep their whole
    window as it stands at the end. Returns (layer specs for the header, ``(keys, values)`` per layer).
    """
    specs, tensors = [], []
    for layer in cache.layers:
        kind = layer_kind(layer)
        seen = layer.get_seq_length()
        keys, values = layer.keys, layer.values
        if kind == "full":
            keys, values = keys[:, :, start:, :], values[:, :, start:, :]
        specs.append({"kind": kind, "seen": int(seen), "kept": int(keys.shape[-2])})
        tensors.append((_host_copy(keys), _host_copy(values)))
    return specs, tensors


def build_artifact(
    model, config: PinnedConfig, token_ids: list[int], meta: dict, parent: Artifact | None = None
) -> tuple[bytes, dict]:
    """Prefill ``token_ids`` (after ``parent``'s state when given) with the pinned chunk schedule and encode it.

    ``meta`` adds fields to the header (problem key and text, answer, text hash, source). Returns
    (safetensors bytes, header). Raises :class:`ArtifactError` if ``parent`` cannot be grafted.
    """
    cache = restore(model, config, parent) if parent is not None else forward.new_cache(model)
    start = int(parent.header["positions"][1]) if parent is not None else 0
    forward.prefill(model, cache, token_ids, config.chunk_size)
    specs, tensors = capture(cache, start)
    text_config = model.config.get_text_config()
    header = {
        **meta,
        "config_fingerprint": config.fingerprint,
        "weights_sha256": config.weights_sha256,
        "tokenizer_sha256": config.tokenizer_sha256,
        "model": config.model,
        "dtype": config.dtype,
        "chunk_size": config.chunk_size,
        "positions": [start, start + len(token_ids)],
        "parent": parent.id if parent is not None else None,
        "layers": specs,
        "kv_heads": int(text_config.num_key_value_heads),
        "head_dim": int(tensors[0][0].shape[-1]),
        "libraries": config.libraries,
    }
    data = encode_artifact(header, torch.tensor(token_ids, dtype=torch.long), tensors)
    return data, header


def check_compatible(artifact: Artifact, config: PinnedConfig, cache) -> None:
    """Refuse an artifact whose header does not match the pinned config and the layout of ``cache`` (a cache of
    the model it is to be grafted into).

    Raises :class:`ArtifactError` (check ``config``) naming the first differing field.
    """
    header = artifact.header
    current = {**config.to_dict(), "config_fingerprint": config.fingerprint}
    for name in PINNED_HEADER_FIELDS:
        if header.get(name) != current[name]:
            raise ArtifactError(artifact.id, "config", f"{name} is {header.get(name)!r}, this run pins {current[name]!r}")
    kinds = [layer_kind(layer) for layer in cache.layers]
    if [spec.get("kind") for spec in header["layers"]] != kinds:
        raise ArtifactError(artifact.id, "config", "cache layer kinds differ from this model's")
    start, end = header["positions"]
    for spec in header["layers"]:
        if spec["seen"] != end or (spec["kind"] == "full" and spec["kept"] != end - start):
            raise ArtifactError(artifact.id, "config", f"layer state {spec} does not match positions {start}..{end}")


def restore(model, config: PinnedConfig, artifact: Artifact, cache=None, timing: dict | None = None):
    """Graft ``artifact`` at its own positions: into a fresh cache, or after ``cache`` for a chained artifact.

    A chained artifact needs ``cache`` to hold exactly its parent's state (``seen`` equal to its start).
    On a CUDA model ``timing`` (when given) gets ``copy_s``: the seconds of the to-device copy, waited for; on the
    CPU nothing is copied and nothing is added. Returns the cache. Raises :class:`ArtifactError` (``config`` or
    ``parent``).
    """
    cache = cache if cache is not None else forward.new_cache(model)
    check_compatible(artifact, config, cache)
    start, end = artifact.header["positions"]
    if (artifact.header.get("parent") is None) != (start == 0) or cache.get_seq_length() != start:
        raise ArtifactError(artifact.id, "parent", f"starts at {start} but the cache holds {cache.get_seq_length()}")
    device = forward.model_device(model)
    # On a GPU the read's spare room stays on the host: the layers get device copies without room
    room = artifact.claim_room() if start == 0 and device.type == "cpu" else None
    layers = _on_device(artifact.layers, device, timing)
    for i, (layer, spec, (keys, values)) in enumerate(zip(cache.layers, artifact.header["layers"], layers)):
        _restore_layer(layer, spec, keys, values, room[i] if room else None)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the rebuild is done when restore returns (restore timings include it)
    return cache


def _on_device(layers: list, device: torch.device, timing: dict | None) -> list:
    """The artifact's ``(keys, values)`` per layer on ``device``: the tensors as read on the CPU; on CUDA copied
    through pinned host memory and waited for, the copy's seconds in ``timing["copy_s"]`` when ``timing`` is given."""
    if device.type == "cpu":
        return layers
    started = time.perf_counter()
    moved = [(to_device(keys, device), to_device(values, device)) for keys, values in layers]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if timing is not None:
        timing["copy_s"] = time.perf_counter() - started
    return moved


def _restore_layer(layer, spec: dict, keys: torch.Tensor, values: torch.Tensor,
                   buffers: tuple[torch.Tensor, torch.Tensor] | None) -> None:
    # The artifact's tensors are adopted, not copied. A preallocated layer adopts them with no room left (so its
    # first append moves them to a new buffer) unless it was handed the read's buffers with spare positions, which
    # only the artifact's first restore gets (Artifact.claim_room); the other layers never write in place (every
    # update is a torch.cat into a new tensor). Either way a restored cache cannot alter the artifact's positions.
    if isinstance(layer, PreallocatedLayer):
        if layer.get_seq_length():
            layer.update(keys, values)  # a chained artifact: after its parent's positions
        else:
            layer.adopt(keys, values, *(buffers or ()))
        return
    if not layer.is_initialized:
        layer.lazy_initialization(keys, values)
    if spec["kind"] == "full":
        layer.keys = torch.cat([layer.keys, keys], dim=-2) if layer.keys.numel() else keys
        layer.values = torch.cat([layer.values, values], dim=-2) if layer.values.numel() else values
    else:
        layer.keys, layer.values = keys, values
        layer.cumulative_length = spec["seen"]


# Mantissa bits of the floating-point dtypes a cache holds, and the integer type of the same width to flip them in
_MANTISSA_BITS = {torch.float32: (23, torch.int32), torch.bfloat16: (7, torch.int16), torch.float16: (10, torch.int16)}


def flip_key_bit(cache, layer: int = 0, element: int = 0, bit: int | None = None) -> dict:
    """Flip mantissa bit ``bit`` (0: the lowest; default: the highest, which moves the value by a quarter to a half of
    itself) of one key value in a restored ``cache``: element ``element`` of KV
    head 0 of layer ``layer``'s key of the last cached token, in a copy that replaces the layer's keys (the
    artifact's tensors, which a restore adopts, are left as they were). The sensitivity control: one wrong bit of
    one restored key must change the query's logits.

    Returns where the flip was (``layer``, ``position``, ``element``, ``bit``, ``what``: the value before and
    after). Raises ``ValueError`` for a bit outside the keys' mantissa or an element outside the head, ``TypeError``
    for keys of another dtype or a cache layer of another class."""
    target = cache.layers[layer]
    kind = layer_kind(target)
    keys = target.keys  # [batch, kv_heads, tokens, head_dim]
    if keys.dtype not in _MANTISSA_BITS:
        raise TypeError(f"keys of dtype {keys.dtype} have no known mantissa")
    width, as_int = _MANTISSA_BITS[keys.dtype]
    bit = width - 1 if bit is None else bit
    if not 0 <= bit < width:
        raise ValueError(f"bit {bit} is outside a {keys.dtype} mantissa ({width} bits)")
    if not 0 <= element < keys.shape[-1]:
        raise ValueError(f"element {element} is outside a head of {keys.shape[-1]}")
    flipped = keys.clone()
    raw = flipped.view(as_int)
    raw[0, 0, -1, element] ^= 1 << bit
    before, after = float(keys[0, 0, -1, element]), float(flipped[0, 0, -1, element])
    if kind == "full" and isinstance(target, PreallocatedLayer):
        target.adopt(flipped, target.values)  # no room: the query's first append moves both to a new buffer
    else:
        target.keys = flipped
    return {"layer": layer, "position": int(cache.get_seq_length()) - 1, "element": element, "bit": bit,
            "what": f"{keys.dtype} mantissa bit {bit}: {before!r} -> {after!r}"}


def restore_chain(model, config: PinnedConfig, store: Store, artifact_id: str, integrity: str = "xxh3_128",
                  room: int = 0):
    """Read ``artifact_id`` and its ancestors from ``store`` (checked with ``integrity``, see
    :meth:`Store.read`) and graft them root first. ``room`` (tokens: the query and the decode budget) is read
    into spare positions after an artifact with no parent, so the query and the decode append without moving it.

    Returns (cache, list of artifacts root first). Raises :class:`ArtifactError` if any link is refused,
    including a parent that is missing from the store (check ``parent``).
    """
    first = store.read(artifact_id, integrity, room=room)
    chain = [first]
    while chain[-1].header.get("parent"):
        parent_id = chain[-1].header["parent"]
        try:
            chain.append(store.read(parent_id, integrity))
        except ArtifactError as exc:
            raise ArtifactError(artifact_id, "parent", f"parent {parent_id[:16]} refused: {exc}") from exc
    chain.reverse()
    cache = None
    for link in chain:
        cache = restore(model, config, link, cache)
    return cache, chain


def fresh_recompute(model, config: PinnedConfig, segments: list[list[int]], query: list[int], *,
                    all_logits: bool = False, segment_chunk_size: int | None = None, offset: int = 0) -> torch.Tensor:
    """Independent reference: a new cache, each segment prefilled with the pinned chunk schedule, then the query.

    Returns the query's last-position logits ``[1, vocab]``, or every query position's ``[len(query), vocab]``
    with ``all_logits``; shares no state with any grafted cache. ``segment_chunk_size`` prefills the segments with
    another chunk size and ``offset`` moves every RoPE position (both for ``check-exact``'s negative controls).
    """
    return prefill_chain(model, config, segments, query, all_logits=all_logits,
                         segment_chunk_size=segment_chunk_size, offset=offset)[1]


def prefill_chain(model, config: PinnedConfig, segments: list[list[int]], query: list[int], *,
                  all_logits: bool = False, segment_chunk_size: int | None = None, offset: int = 0):
    """:func:`fresh_recompute`, returning the cache too: ``(cache, logits)``, the cache holding every segment and the
    query, ready to decode from (the example-as-prompt arm of ``eval``)."""
    cache = forward.new_cache(model)
    for ids in segments:
        forward.prefill(model, cache, ids, segment_chunk_size or config.chunk_size, offset=offset)
    return cache, forward.prefill(model, cache, query, config.chunk_size, all_logits=all_logits, offset=offset)
