"""The util stage: allocator, strict JSON, float sums, instruction-set setting, energy."""
