"""The recorded programs of a committed program-mode run, re-run in today's sandbox, give their recorded verdicts
(no model). Where the sandbox cannot be built the replay is refused with what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from graftbench.programs import sandbox
from graftbench.eval.program_replay import replay_programs
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[1]
BASELINE = REFERENCE_MANIFESTS / "transfer-qwen2.5-coder-0.5b-program-baseline.json"


@pytest.mark.slow
def test_the_committed_program_baseline_replays_with_the_same_verdicts():
    why = sandbox._probe()
    if why:
        with pytest.raises(sandbox.SandboxError, match="cannot be built here"):
            replay_programs(BASELINE)
        return
    replayed = replay_programs(BASELINE)
    assert len(replayed) == 60
    assert [r.sample for r in replayed if not r.same_verdict] == []
    assert [r.sample for r in replayed if r.stopped != r.recorded_stopped] == []
    assert sum(r.verdict[1] for r in replayed) == 48


def test_a_text_mode_manifest_is_not_replayed():
    with pytest.raises(ValueError, match="not a program-mode manifest"):
        replay_programs(REFERENCE_MANIFESTS / "transfer-smollm2-135m-baseline.json")
