"""The scale stage: merged shards and runs over Ray workers."""
