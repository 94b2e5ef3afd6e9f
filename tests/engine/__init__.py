"""The engines (torch, llama.cpp) and the seam they share: attention, KV cache and pool, graft, models, devices, sampling, the registry."""
