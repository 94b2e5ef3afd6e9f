"""``verify-manifest``'s dispatch: a run manifest or an exactness manifest, told apart by its ``schema``.

Imports no torch, so a manifest can be re-checked on a machine without a model.
"""

from __future__ import annotations

from pathlib import Path

from .exact_manifest import SCHEMA as EXACTNESS_SCHEMA
from .exact_manifest import load_expectation, verify_exactness_manifest
from .manifest import verify_manifest
from .strict_json import StrictJSONError, load_strict


def _schema_of(path: Path) -> str | None:
    # The same strict reader as load_manifest: a file it refuses has no schema here, and load_manifest then
    # names what is wrong with it.
    try:
        return load_strict(path).get("schema")
    except (OSError, StrictJSONError, AttributeError):
        return None


def check_manifest(path: str | Path, store: str | Path | None = None,
                   require_artifacts: bool = False) -> tuple[list[str], list[str]]:
    """Re-check the manifest at ``path`` of either kind; returns ``(mismatches, notes)``, holding only when
    ``mismatches`` is empty. ``store`` and ``require_artifacts`` apply to run manifests (see
    :func:`graftbench.manifest.verify_manifest`).

    Raises :class:`graftbench.manifest.ManifestError` when the file is not a manifest at all.
    """
    if _schema_of(Path(path)) == EXACTNESS_SCHEMA:
        return verify_exactness_manifest(load_expectation(path)), ["exactness manifest re-checked"]
    return verify_manifest(path, store, require_artifacts)
