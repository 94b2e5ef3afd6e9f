"""The torch engine: a transformers model on CPU or CUDA, its KV cache, chunked prefill, decode, sampling, graft and capture, and the CUDA pin."""

from ..base import (BENCHMARK, EXACTNESS_CONTROLS, EXTEND_EXPECTATION, FAULT_SCENARIOS, LAYER_TRACE, RAY, REPLAY_RANGE,
                    SAMPLE_BATCH)

NAME = "torch"  # the registry's name of this engine (graftbench.engine.registry)
CAPABILITIES = frozenset({SAMPLE_BATCH, RAY, EXACTNESS_CONTROLS, EXTEND_EXPECTATION, REPLAY_RANGE, LAYER_TRACE,
                          BENCHMARK, FAULT_SCENARIOS})  # what it can do (graftbench.engine.base)
