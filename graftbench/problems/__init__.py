"""Problem sets: the record, built-in and file sources, loading, prompt layouts, shards."""
