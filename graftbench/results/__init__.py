"""Samples, run folders, manifests and metrics (imports no torch)."""
