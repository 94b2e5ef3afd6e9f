"""``verify-manifest``'s dispatch: a run manifest or an exactness manifest, told apart by its ``schema``, each
refused when its content is not what that schema says, then checked against what anchors it from outside (the
problem set, the results index: :mod:`graftbench.results.anchor`).

Imports no torch, so a manifest can be re-checked on a machine without a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .exact_manifest import SCHEMA as EXACTNESS_SCHEMA
from .exact_manifest import load_expectation, verify_exactness_manifest
from .layout import moved_manifest
from .manifest import ManifestError, ManifestRefused, check_body, load_manifest, run_folder_manifest
from .anchor import ProblemSet, anchor_manifest, exactness_shape, index_mismatch, run_shape
from ..util.strict_json import StrictJSONError, load_strict

# verify-manifest's exit codes (``report`` refuses an unanchored run with EXIT_UNANCHORED too). When several hold,
# the first in this order is the one: a mismatch, then an unanchored problem set, then unchecked payloads.
EXIT_OK = 0  # every check ran and held
EXIT_MISMATCH = 1  # a check failed, or the document is not what its schema says
EXIT_ERROR = 2  # not a manifest at all, a --store or --problems that cannot be read
EXIT_UNANCHORED = 3  # no problem set could be checked against it (unless --allow-unanchored)
EXIT_UNCHECKED_PAYLOADS = 4  # artifact payloads it lists were not checked (unless --allow-unchecked-payloads)


@dataclass(frozen=True)
class Verification:
    """What re-checking a manifest found: ``mismatches`` (it holds only when empty), ``notes`` (what was checked),
    and what could not be checked: ``unanchored`` (why no problem set could be checked against it) and
    ``unchecked_payloads`` (how many artifact payloads, and why), each ``None`` when it was checked."""

    mismatches: list[str]
    notes: list[str]
    unanchored: str | None = None
    unchecked_payloads: str | None = None

    def unverified(self, allow_unanchored: bool = False, allow_unchecked_payloads: bool = False) -> list[str]:
        """What could not be checked, one line each, leaving out what the caller accepts (``allow_*``): by
        default everything that was not checked."""
        lines = []
        if self.unanchored is not None and not allow_unanchored:
            lines.append(f"problem set not anchored: {self.unanchored}")
        if self.unchecked_payloads is not None and not allow_unchecked_payloads:
            lines.append(self.unchecked_payloads)
        return lines

    def exit_code(self, allow_unanchored: bool = False, allow_unchecked_payloads: bool = False) -> int:
        """:data:`EXIT_MISMATCH` for a mismatch; else :data:`EXIT_UNANCHORED` or :data:`EXIT_UNCHECKED_PAYLOADS`
        for what could not be checked and the caller does not accept (in that order); else :data:`EXIT_OK`."""
        if self.mismatches:
            return EXIT_MISMATCH
        if self.unanchored is not None and not allow_unanchored:
            return EXIT_UNANCHORED
        if self.unchecked_payloads is not None and not allow_unchecked_payloads:
            return EXIT_UNCHECKED_PAYLOADS
        return EXIT_OK


def manifest_file(path: str | Path) -> Path:
    """The manifest ``path`` names: a run folder's ``manifest.json`` when ``path`` is a folder
    (:func:`graftbench.results.manifest.run_folder_manifest`, which raises ``ManifestError`` for a symlink out of
    the folder), else ``path`` itself (read by :func:`graftbench.results.manifest.load_manifest`, which names what
    is wrong)."""
    path = Path(path)
    return run_folder_manifest(path) if path.is_dir() else path


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


def verify_run(manifest: dict, path: str | Path, store: str | Path | None = None, require_artifacts: bool = False,
               problems: ProblemSet | None = None) -> Verification:
    """Re-check a loaded run manifest (:func:`graftbench.results.manifest.check_body`, which includes the verifier
    version its schema requires), then what anchors it: the problem set (``problems``, else the one it records when
    graftbench can rebuild it: :func:`graftbench.results.anchor.anchor_manifest`) and the results index that lists
    ``path``. Raises :class:`~graftbench.results.manifest.ManifestRefused` when the document lacks a run manifest's
    fields or carries another kind's."""
    _refuse_unless_shaped(path, manifest, run_shape(manifest))
    body = check_body(manifest, store, require_artifacts)
    anchoring = anchor_manifest(manifest, problems)
    indexed, index_note = index_mismatch(Path(path))
    return Verification(body.mismatches + list(anchoring.mismatches) + indexed,
                        body.notes + [anchoring.note] + ([index_note] if index_note else []),
                        anchoring.unanchored, body.unchecked_payloads)


def verify_file(path: str | Path, store: str | Path | None = None, require_artifacts: bool = False,
                problems: ProblemSet | None = None) -> Verification:
    """Re-check the manifest at ``path`` (a file, or a run folder: :func:`manifest_file`) of either kind. ``store``
    and ``require_artifacts`` apply to run manifests (see :func:`verify_run`); an exactness manifest is re-checked
    (:func:`graftbench.results.exact_manifest.verify_exactness_manifest`) and anchored by its
    ``problem_set.sha256`` to ``problems``, else to the problem file it records
    (:func:`graftbench.results.anchor.anchor_manifest`), and checked against the results index.

    Raises :class:`graftbench.results.manifest.ManifestError` when the file is not a manifest at all (a path of the
    earlier layout, ``results/<kind>/manifests/<name>``, names where the file lies now), and its subclass
    :class:`~graftbench.results.manifest.ManifestRefused` when its content is not what its declared schema says.
    """
    path = manifest_file(path)
    moved = moved_manifest(path)
    if moved is not None:  # named by the earlier layout (results/<kind>/manifests/)
        raise ManifestError(f"manifest '{path}' does not exist: the committed manifests moved to manifests/<kind>/, "
                            f"and this one to {moved}")
    if _schema_of(path) != EXACTNESS_SCHEMA:
        return verify_run(load_manifest(path), path, store, require_artifacts, problems)
    manifest = load_expectation(path)
    _refuse_unless_shaped(path, manifest, exactness_shape(manifest))
    anchoring = anchor_manifest(manifest, problems, exactness=True)
    indexed, index_note = index_mismatch(path)
    return Verification(verify_exactness_manifest(manifest) + list(anchoring.mismatches) + indexed,
                        ["exactness manifest re-checked", anchoring.note] + ([index_note] if index_note else []),
                        anchoring.unanchored)


def check_run_manifest(manifest: dict, path: str | Path, store: str | Path | None = None,
                       require_artifacts: bool = False,
                       problems: ProblemSet | None = None) -> tuple[list[str], list[str]]:
    """:func:`verify_run` as ``(mismatches, notes)``; a note beginning ``problem set not anchored`` or holding
    ``not checked`` names what was not checked."""
    checked = verify_run(manifest, path, store, require_artifacts, problems)
    return checked.mismatches, checked.notes


def check_manifest(path: str | Path, store: str | Path | None = None, require_artifacts: bool = False,
                   problems: ProblemSet | None = None) -> tuple[list[str], list[str]]:
    """:func:`verify_file` as ``(mismatches, notes)``, holding only when ``mismatches`` is empty; raises as it
    does."""
    checked = verify_file(path, store, require_artifacts, problems)
    return checked.mismatches, checked.notes
