"""Re-score a run manifest's samples under another verifier version (by default the current one).

A separate, labelled report, never part of ``verify-manifest``'s check: a manifest is checked under the verifier
version it records, and a verdict that a later rule changes is a re-score, not tampering. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .manifest import recorded_reasoning, recorded_verifier_version
from ..programs.mode import sample_verdict
from ..verify.answers import VERIFIER_VERSION, check_version


@dataclass(frozen=True)
class ScoreChange:
    """One sample whose extracted answer or verdict differs between the recorded and the re-scoring version."""

    problem_id: str
    recorded_extracted: str | None
    recorded_correct: bool
    extracted: str | None
    correct: bool


@dataclass(frozen=True)
class Rescore:
    """The samples of one manifest scored under ``version`` next to what it recorded under ``recorded_version``.

    ``samples`` counts the samples re-scored; ``recorded_correct`` / ``correct`` count correct verdicts before and
    after; ``changes`` lists every sample whose extracted answer or verdict changed, in manifest order.
    """

    recorded_version: int
    version: int
    samples: int
    recorded_correct: int
    correct: int
    changes: tuple[ScoreChange, ...]

    @property
    def verdicts_changed(self) -> int:
        """Samples whose verdict (not only the extracted answer) changed."""
        return sum(1 for c in self.changes if c.recorded_correct != c.correct)


def rescore_manifest(manifest: dict, version: int = VERIFIER_VERSION) -> Rescore:
    """Re-extract and re-verify every sample of the run ``manifest`` (a dict from
    :func:`graftbench.results.manifest.load_manifest`) from its stored output, cue and key under verifier ``version`` (a
    program-mode sample from its recorded stdout: :func:`graftbench.programs.mode.sample_verdict`).

    A run whose layout names reasoning delimiters is re-scored past its reasoning (from verifier 4 on).

    Raises ``ValueError`` when ``version`` or the manifest's recorded ``settings.verifier_version`` is unknown, or
    its recorded reasoning delimiters are malformed.
    Samples that are not objects are skipped; ``verify-manifest`` reports them.
    """
    check_version(version)
    recorded = recorded_verifier_version(manifest)
    reasoning = recorded_reasoning(manifest)
    samples = [s for s in manifest.get("samples", []) if isinstance(s, dict)] if isinstance(
        manifest.get("samples"), list) else []
    changes, correct = [], 0
    for sample in samples:
        verdict = sample_verdict(sample, version, reasoning)
        correct += verdict.correct
        if (verdict.extracted, verdict.correct) != (sample.get("extracted"), sample.get("correct")):
            changes.append(ScoreChange(str(sample.get("problem_id")), sample.get("extracted"),
                                       bool(sample.get("correct")), verdict.extracted, verdict.correct))
    return Rescore(recorded, version, len(samples), sum(1 for s in samples if s.get("correct") is True), correct,
                   tuple(changes))
