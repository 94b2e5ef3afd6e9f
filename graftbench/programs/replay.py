"""Re-run the recorded programs of a program-mode manifest in today's sandbox and compare their verdicts with the
recorded ones: a check that a change of sandbox changed no program's verdict. No model; imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..results.manifest import load_manifest, recorded_verifier_version
from .mode import program_verdict, sample_verdict
from .sandbox import run_program
from ..settings import SandboxLimits


@dataclass(frozen=True)
class Replayed:
    """One recorded program run again: its sample (``problem_id#sample_index``), the recorded and the new
    ``stopped`` reason, and the recorded and the new verdict (``extracted``, ``correct``)."""

    sample: str
    recorded_stopped: str | None
    stopped: str | None
    recorded: tuple[str | None, bool]
    verdict: tuple[str | None, bool]

    @property
    def same_verdict(self) -> bool:
        return self.recorded == self.verdict


def replay_programs(path: str | Path) -> list[Replayed]:
    """Run every recorded program of the manifest at ``path`` in the sandbox under the manifest's own sandbox
    limits, and judge it under its recorded verifier version. Raises ``ValueError`` for a manifest of no program
    (its settings record no ``sandbox`` limits), :class:`graftbench.results.manifest` errors for an unreadable manifest,
    and :class:`graftbench.programs.sandbox.SandboxError` when the sandbox cannot be built."""
    manifest = load_manifest(path)
    recorded_limits = (manifest.get("settings") or {}).get("sandbox")
    if not isinstance(recorded_limits, dict):
        raise ValueError(f"{path}: not a program-mode manifest (its settings record no sandbox limits)")
    limits = SandboxLimits(**recorded_limits)
    version = recorded_verifier_version(manifest)
    replayed = []
    for sample in manifest["samples"]:
        if not isinstance(sample.get("program"), str):
            continue
        result = run_program(sample["program"], limits)
        old = sample_verdict(sample, version)
        new = program_verdict(result.stdout, result.stopped, sample.get("key") or "", version)
        replayed.append(Replayed(f"{sample.get('problem_id')}#{sample.get('sample_index', 0)}",
                                 sample.get("stopped"), result.stopped, (old.extracted, old.correct),
                                 (new.extracted, new.correct)))
    return replayed
