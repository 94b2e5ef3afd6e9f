"""The llama.cpp engine: a GGUF file run by llama.cpp through llama-cpp-python's low-level bindings, its sequence states as artifacts, decode and the exactness controls it supports."""
