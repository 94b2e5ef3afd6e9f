"""graftbench's attention path: ``scaled_dot_product_attention`` on grouped-query keys and values, never expanded.

``transformers``' own ``sdpa`` path repeats every key/value head for its group of query heads (``repeat_kv``)
whenever an attention mask is passed, which is every prefill chunk after a graft: with ``smollm2-135m``'s 9 query
and 3 key/value heads that writes three copies of the whole cache per layer per chunk. Here:

- a forward of several tokens calls SDPA with ``enable_gqa=True`` (the kernel indexes the shared head);
- a one-token forward (decode) folds each group's query heads into query rows of their key/value head,
  ``[batch, kv_heads, group, head_dim]``, and calls SDPA on that, which on CPU is faster than ``enable_gqa``
  (measured here: 1.1 ms against 1.6 ms per layer at 8,192 positions in float32, 1.6 against 8.2 in bfloat16).

The name :data:`ATTENTION` is registered with ``transformers``' attention and mask interfaces (the mask is
``sdpa``'s) and is what models load with, so the config pin records it as ``attn_implementation``.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

ATTENTION = "graftbench_sdpa"


def grouped_sdpa(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """Attention for ``query`` ``[batch, heads, q_len, head_dim]`` over ``key``/``value``
    ``[batch, kv_heads, kv_len, head_dim]`` (``heads`` a multiple of ``kv_heads``) with an additive or boolean
    ``attention_mask`` broadcastable to ``[batch, 1, q_len, kv_len]``, or none (then causal when ``q_len > 1``).

    Returns ``([batch, q_len, heads, head_dim], None)``, the layout ``transformers``' attention modules expect.
    Raises ``ValueError`` for a logit soft-cap, which SDPA cannot apply.
    """
    if kwargs.get("softcap") is not None:
        raise ValueError(f"{ATTENTION} cannot apply an attention logit soft-cap")
    batch, heads, q_len, head_dim = query.shape
    groups = heads // key.shape[1]
    gqa = groups > 1
    if gqa and q_len == 1:
        query = query.reshape(batch, key.shape[1], groups, head_dim)
        gqa = False
    causal = q_len > 1 and attention_mask is None and (is_causal if is_causal is not None
                                                       else getattr(module, "is_causal", True))
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
        enable_gqa=gqa)
    return out.reshape(batch, heads, q_len, value.shape[-1]).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, grouped_sdpa)
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)
