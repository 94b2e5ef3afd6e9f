"""``verify-manifest``'s dispatch: a run manifest or an exactness manifest, told apart by its ``schema``, each
refused when its content is not what that schema says, then checked against what anchors it from outside (the
problem set, the results index: :mod:`graftbench.results.anchor`).

Imports no torch, so a manifest can be re-checked on a machine without a model.
"""

from __future__ import annotations

from pathlib import Path

from .exact_manifest import SCHEMA as EXACTNESS_SCHEMA
from .exact_manifest import load_expectation, verify_exactness_manifest
from .manifest import ManifestRefused, check_manifest as check_run_body, load_manifest
from .anchor import (ProblemSet, anchor, anchor_digest, exactness_shape, index_mismatch, resolve_recorded,
                     run_shape)
from ..util.strict_json import StrictJSONError, load_strict


def _schema_of(path: Path) -> str | None:
    # The same strict reader as load_manifest: a file it refuses has no schema here, and load_manifest then
    # names what is wrong with it.
    try:
        return load_strict(path).get("schema")
    except (OSError, StrictJSONError, AttributeError):
        return None


def _refuse_unless_shaped(path, manifest: dict, problems: list[str]) -> None:
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ManifestRefused(f"manifest '{path}' is not what its schema {str(manifest.get('schema'))[:60]!r} "
                              f"says it is: {shown}")


def check_run_manifest(manifest: dict, path: str | Path, store: str | Path | None = None,
                       require_artifacts: bool = False,
                       problems: ProblemSet | None = None) -> tuple[list[str], list[str]]:
    """Re-check a loaded run manifest (:func:`graftbench.results.manifest.check_manifest`, which includes the verifier
    version its schema requires), then what anchors it: the problem set (``problems``, else the one it records when
    graftbench can rebuild it: :func:`graftbench.results.anchor.resolve_recorded`) and the results index that lists
    ``path``. Returns ``(mismatches, notes)``; a note beginning ``problem set not anchored`` names what was not
    checked. Raises :class:`~graftbench.results.manifest.ManifestRefused` when the document lacks a run manifest's
    fields or carries another kind's."""
    _refuse_unless_shaped(path, manifest, run_shape(manifest))
    mismatches, notes = check_run_body(manifest, store, require_artifacts)
    why = ""
    if problems is None:
        problems, why = resolve_recorded(manifest)
    if problems is None:
        notes.append(f"problem set not anchored: {why}")
    else:
        anchored, note = anchor(manifest, problems)
        mismatches += anchored
        notes.append(note)
    indexed, index_note = index_mismatch(Path(path))
    mismatches += indexed
    notes += [index_note] if index_note else []
    return mismatches, notes


def check_manifest(path: str | Path, store: str | Path | None = None, require_artifacts: bool = False,
                   problems: ProblemSet | None = None) -> tuple[list[str], list[str]]:
    """Re-check the manifest at ``path`` of either kind; returns ``(mismatches, notes)``, holding only when
    ``mismatches`` is empty. ``store`` and ``require_artifacts`` apply to run manifests (see
    :func:`check_run_manifest`); an exactness manifest is checked against the results index too, and its
    ``problem_set.sha256`` against ``problems`` when given.

    Raises :class:`graftbench.results.manifest.ManifestError` when the file is not a manifest at all, and its subclass
    :class:`~graftbench.results.manifest.ManifestRefused` when its content is not what its declared schema says.
    """
    if _schema_of(Path(path)) == EXACTNESS_SCHEMA:
        manifest = load_expectation(path)
        _refuse_unless_shaped(path, manifest, exactness_shape(manifest))
        indexed, index_note = index_mismatch(Path(path))
        notes = ["exactness manifest re-checked"] + ([index_note] if index_note else [])
        anchored = anchor_digest(manifest, problems) if problems is not None else []
        notes += [f"problem set anchored to {problems.label}"] if problems is not None and not anchored else []
        return verify_exactness_manifest(manifest) + anchored + indexed, notes
    return check_run_manifest(load_manifest(path), path, store, require_artifacts, problems)
