"""Artifact ids and where an artifact's file lives in a store: the one home of both rules. Imports no torch.

An artifact id is the SHA-256 of the artifact file's bytes, written as 64 lowercase hex digits; the file of id
``<id>`` in the store at ``<root>`` is ``<root>/artifacts/<id>.safetensors``. Only strings that match the id pattern
are ever joined to a path, so ids like ``../x``, absolute paths or NUL bytes never reach the filesystem.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..util.hashing import sha256_bytes

ARTIFACT_ID = re.compile(r"[0-9a-f]{64}")
ARTIFACTS_DIR = "artifacts"  # folder of the artifact files under a store's root
SUFFIX = ".safetensors"


def artifact_id_of(data: bytes) -> str:
    """The id of the artifact file whose bytes are ``data``: their SHA-256 (64 lowercase hex digits)."""
    return sha256_bytes(data)


def is_artifact_id(value: object) -> bool:
    """Whether ``value`` is a string of exactly 64 lowercase hex digits."""
    return isinstance(value, str) and ARTIFACT_ID.fullmatch(value) is not None


def artifacts_dir(store_root: str | Path) -> Path:
    """The folder holding a store's artifact files: ``<store_root>/artifacts``."""
    return Path(store_root) / ARTIFACTS_DIR


def artifact_path(store_root: str | Path, artifact_id: str) -> Path:
    """The file of ``artifact_id`` in the store at ``store_root``: ``<store_root>/artifacts/<id>.safetensors``.

    Raises ``ValueError`` if ``artifact_id`` is not an artifact id (check it first to report it your own way).
    """
    if not is_artifact_id(artifact_id):
        raise ValueError(f"{str(artifact_id)[:40]!r} is not an artifact id (64 lowercase hex digits)")
    return artifacts_dir(store_root) / f"{artifact_id}{SUFFIX}"


def id_of_path(path: str | Path) -> str | None:
    """The artifact id an artifact file's name carries (``<id>.safetensors``), or ``None`` for any other name."""
    name = Path(path).name
    if not name.endswith(SUFFIX):
        return None
    stem = name[: -len(SUFFIX)]
    return stem if is_artifact_id(stem) else None
