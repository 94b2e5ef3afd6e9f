"""Runs across processes and machines: shard runs merged into one run, runs over Ray workers and the driver's
bookkeeping of them."""
