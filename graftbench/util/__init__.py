"""Helpers below every stage: hashing, strict JSON, durable writes, seeds, bounded file reads, the CPU pin, a
result's provenance (code version, machine, date)."""
