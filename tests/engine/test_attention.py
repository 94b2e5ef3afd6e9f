"""graftbench's attention path: grouped-query attention without expanded heads computes what the expanded one does
(to float32 rounding), for prefill chunks with a mask and for one-token decode, and models load with it."""

import pytest
import torch
from transformers.integrations.sdpa_attention import repeat_kv

from graftbench.engine.torch.attention import ATTENTION, grouped_sdpa


class _Module:
    is_causal = True


def _expanded(query, key, value, mask):
    groups = query.shape[1] // key.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(query, repeat_kv(key, groups), repeat_kv(value, groups),
                                                           attn_mask=mask, is_causal=mask is None and query.shape[2] > 1)
    return out.transpose(1, 2)


@pytest.mark.parametrize("q_len, kv_len, masked", [(1, 300, False), (1, 300, True), (64, 64, False), (64, 500, True)])
def test_grouped_equals_expanded(q_len, kv_len, masked):
    g = torch.Generator().manual_seed(q_len + kv_len)
    query = torch.randn(2, 9, q_len, 16, generator=g)
    key, value = torch.randn(2, 3, kv_len, 16, generator=g), torch.randn(2, 3, kv_len, 16, generator=g)
    mask = torch.ones(1, 1, q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len) if masked else None
    out, weights = grouped_sdpa(_Module(), query, key, value, mask)
    assert weights is None and out.shape == (2, q_len, 9, 16) and out.is_contiguous()
    torch.testing.assert_close(out, _expanded(query, key, value, mask), rtol=1e-5, atol=1e-6)


def test_softcap_is_refused():
    q = torch.zeros(1, 2, 1, 4)
    with pytest.raises(ValueError, match="soft-cap"):
        grouped_sdpa(_Module(), q, q[:, :1], q[:, :1], None, softcap=30.0)


@pytest.mark.model
def test_models_load_with_it_and_the_pin_records_it(session):
    assert session.model.config._attn_implementation == ATTENTION
    assert session.config.attn_implementation == ATTENTION and session.config.cache_class == "preallocated"
