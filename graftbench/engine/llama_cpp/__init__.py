"""The llama.cpp engine: a GGUF file run by llama.cpp through llama-cpp-python's low-level bindings, its sequence states as artifacts, decode and the exactness controls it supports."""

from ..base import ACROSS_CPU_KINDS, BENCHMARK, EXACTNESS_CONTROLS, LAYER_TRACE, REPLAY_RANGE

NAME = "llama.cpp"  # the registry's name of this engine (graftbench.engine.registry)
CAPABILITIES = frozenset({EXACTNESS_CONTROLS, ACROSS_CPU_KINDS, BENCHMARK, LAYER_TRACE, REPLAY_RANGE})  # what it can do (graftbench.engine.base)
