"""The pin's fingerprint: the SHA-256 a manifest, an artifact and an expectation record of the pinned config."""

from __future__ import annotations

from ..util.hashing import sha256_json

# Fields of the pin that do not change a byte: the model's display name (an alias and a path to the same GGUF are one
# pin). The fingerprint leaves them out, and so do a manifest's fingerprint check and an expectation's replay.
UNPINNED_FIELDS = ("model",)


def pin_fingerprint(pin: dict) -> str:
    """SHA-256 of the canonical JSON of a pin (a :meth:`PinnedConfig.to_dict`) without :data:`UNPINNED_FIELDS`."""
    return sha256_json({k: v for k, v in pin.items() if k not in UNPINNED_FIELDS})
