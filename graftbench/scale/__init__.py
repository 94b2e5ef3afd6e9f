"""Shards across machines: merge, dispatch, the Ray executor."""
