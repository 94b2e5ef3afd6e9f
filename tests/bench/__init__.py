"""The benchmarks: bench, bench-llama, head-to-head, history, portable cost, TTFT on a device."""
