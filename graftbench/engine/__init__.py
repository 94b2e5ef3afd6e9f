"""The torch engine: models, forward passes, KV cache, attention, sampling, the pin, graft and capture."""
