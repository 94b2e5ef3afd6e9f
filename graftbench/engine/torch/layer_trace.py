"""The torch engine's per-op trace of one (artifact, query) pair: the SHA-256 of every module's input and output as it
completes, each layer's K and V block after the artifact's prefill, and the query's logits (the steps of
:mod:`graftbench.eval.layer_trace`).

The artifact is prefilled into a fresh cache in the pin's chunk schedule (as a deposit is), then the query is
prefilled after it with every position's logits (as ``check-exact``'s fresh side is); hooks only read tensors, so the
bytes computed are the ones an untraced run computes."""

from __future__ import annotations

import hashlib

import torch

from . import forward


def tensor_sha256(tensor: torch.Tensor) -> str:
    """SHA-256 of ``tensor``'s raw bytes in row-major order (any dtype, any device)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()


def _first_tensor(value) -> torch.Tensor | None:
    """``value`` when it is a tensor, else the first tensor of a tuple or list (a layer's ``(hidden, ...)``)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None


def _step(op: str, call: int, output: torch.Tensor, inputs=None) -> dict:
    given = _first_tensor(inputs) if inputs is not None else None
    return {"op": op, "call": call, "input_sha256": tensor_sha256(given) if given is not None else "",
            "output_sha256": tensor_sha256(output), "shape": list(output.shape), "dtype": str(output.dtype)}


def trace_pair(model, chunk_size: int, artifact: list[int], query: list[int]) -> list[dict]:
    """The steps of one pair on ``model`` (a torch causal LM as loaded by graftbench) with the pin's ``chunk_size``
    (tokens per prefill forward): each named module's hashes per call, in completion order, over the artifact's
    prefill; ``kv.<layer>.k`` and ``kv.<layer>.v`` (each layer's cached keys and values ``[1, kv_heads, tokens,
    head_dim]``); then the query's prefill and ``logits.query`` (``[len(query), vocab]``).

    Raises ``ValueError`` for an empty artifact or query."""
    if not artifact or not query:
        raise ValueError("a trace needs a non-empty artifact and query")
    steps: list[dict] = []
    calls: dict[str, int] = {}

    def hook(name: str):
        def record(_module, inputs, output):
            tensor = _first_tensor(output)
            if tensor is not None:
                calls[name] = calls.get(name, -1) + 1
                steps.append(_step(name, calls[name], tensor, inputs))
        return record

    handles = [module.register_forward_hook(hook(name)) for name, module in model.named_modules() if name]
    try:
        cache = forward.new_cache(model)
        forward.prefill(model, cache, artifact, chunk_size)
        for index, layer in enumerate(cache.layers):
            steps.append(_step(f"kv.{index}.k", 0, layer.keys))
            steps.append(_step(f"kv.{index}.v", 0, layer.values))
        logits = forward.prefill(model, cache, query, chunk_size, all_logits=True)
    finally:
        for handle in handles:
            handle.remove()
    steps.append(_step("logits.query", 0, logits))
    return steps
