"""The KV pool: memory faulted in at open is reused by later KV-sized buffers instead of faulting fresh pages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from graftbench.engine.torch import kv_pool
from graftbench.engine.torch.session import open_session

# Allocate and write 48 MiB as eight 6 MiB tensors (an 8,192-token smollm2 layer's keys are 6.3 MB) and print how
# much resident memory grew, after reserving a pool of POOL bytes (0: none).
_PROBE = """
import json, sys, torch
from graftbench.engine.torch import kv_pool
from graftbench.bench.stats import rss_bytes
report = kv_pool.reserve(int(sys.argv[1]))
before = rss_bytes()
blocks = [torch.empty(6 << 20, dtype=torch.uint8) for _ in range(8)]
for block in blocks:
    block.fill_(1)
print(json.dumps({"growth": rss_bytes() - before, "pool": report.bytes, "how": report.how}))
"""


def _growth(pool_bytes: int, **env) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(pool_bytes)], capture_output=True, text=True, check=True,
                          env={**os.environ, **env})
    return json.loads(done.stdout)


def test_kv_sized_buffers_reuse_the_pool_instead_of_new_pages():
    without, with_pool = _growth(0), _growth(64 << 20)
    assert without["pool"] == 0 and without["growth"] > 40 << 20  # 48 MiB of fresh pages faulted in
    assert with_pool == {"growth": with_pool["growth"], "pool": 64 << 20, "how": "glibc heap"}
    assert with_pool["growth"] < 8 << 20  # the pool's pages, already resident


def test_without_the_packages_allocator_setting_there_is_no_pool_and_it_says_why():
    off = _growth(64 << 20, GRAFTBENCH_MALLOC="system")
    assert off["pool"] == 0 and off["how"] == "freed memory is not kept (not glibc, or GRAFTBENCH_MALLOC): no pool"
    assert off["growth"] > 40 << 20


def _model(layers, heads, kv_heads, hidden, dtype, head_dim=None):
    config = SimpleNamespace(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                             hidden_size=hidden, head_dim=head_dim)
    return SimpleNamespace(config=SimpleNamespace(get_text_config=lambda: config), dtype=dtype)


def test_kv_bytes_per_token_counts_layers_heads_and_element_size():
    assert kv_pool.kv_bytes_per_token(_model(30, 9, 3, 576, torch.float32)) == 30 * 2 * 3 * 64 * 4  # smollm2-135m
    assert kv_pool.kv_bytes_per_token(_model(18, 4, 1, 640, torch.bfloat16, head_dim=256)) == 18 * 2 * 256 * 2
    assert kv_pool.kv_bytes_per_token(_model(24, 14, 2, 896, torch.bfloat16)) == 24 * 2 * 2 * 64 * 2  # qwen 0.5B


def test_bad_pool_sizes_are_refused_with_the_value():
    with pytest.raises(ValueError, match=">= 0 bytes, got -1"):
        kv_pool.reserve(-1)
    with pytest.raises(ValueError, match="32 MiB"):
        kv_pool.reserve(1 << 20, block_bytes=32 << 20)
    with pytest.raises(ValueError, match=">= 0 tokens, got -5"):
        kv_pool.reserve_tokens(_model(1, 1, 1, 8, torch.float32), -5)
    assert kv_pool.reserve(0) == kv_pool.PoolReport(0, 0.0, "no pool asked for")


def test_a_negative_pool_is_refused_before_the_model_loads():
    with pytest.raises(ValueError, match="kv_pool_tokens must be >= 0, got -1"):
        open_session("no-such-model", kv_pool_tokens=-1)
