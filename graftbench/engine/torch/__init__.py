"""The torch engine: a transformers model on CPU or CUDA, its KV cache, chunked prefill, decode, sampling, graft and capture, and the CUDA pin."""
