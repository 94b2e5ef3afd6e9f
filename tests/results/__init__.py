"""The results stage: metrics, manifests (anchors, versions), the results index and layout."""
