"""Contracts over the whole package: layers, the engine boundary, engine conformance, meta-tests, README figures, bad and hostile input."""
