"""Reports over finished runs and the results index."""
