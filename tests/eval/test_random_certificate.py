"""The committed CPU certificate of a random-weights Gemma 3 model (the reduced config, labelled reduced): 50
distinct pairs, all byte-exact, with controls, and its replay in a fresh process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graftbench.eval.replay_committed import DIFFERS_UNPROVEN, EQUAL, judge, replay_once
from graftbench.util import isa
from graftbench.results.exact_manifest import read_replay_log, verify_exactness_manifest
from graftbench.results.layout import REPLAY_LOG
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
CERTIFICATE = REFERENCE_MANIFESTS / "exact-random-gemma3-reduced.json"
REPLAY_PAIRS = 5


def test_the_reduced_gemma3_certificate_is_fifty_distinct_byte_exact_pairs_and_says_what_it_is():
    manifest = json.loads(CERTIFICATE.read_text())
    assert verify_exactness_manifest(manifest) == []
    assert manifest["totals"]["pairs"] == manifest["totals"]["exact_pairs"] == 50
    assert len({record["tokens_sha256"] for record in manifest["pairs"]}) == 50
    assert {record["kind"] for record in manifest["pairs"]} == {"short", "long", "cross-window"}
    assert sum("controls" in record for record in manifest["pairs"]) == 5
    controls = [(name, result["equal"]) for record in manifest["pairs"] for name, result in
                record.get("controls", {}).items()]
    assert {name for name, _ in controls} == {"monolithic", "chunk-128", "shift-8", "shift-128", "shift-1024",
                                               "naive-restore"}
    assert all(not equal for name, equal in controls if name == "monolithic" or name.startswith("shift"))
    # another chunk size or a naive restore changes nothing for an artifact shorter than the chunk and the window
    # (pair-003: 8 tokens); on every longer artifact each control differs
    assert all(not equal for record in manifest["pairs"] if record["artifact_tokens"] > 128
               for equal in (c["equal"] for c in record.get("controls", {}).values()))
    pin = manifest["config"]
    assert (pin["model"], pin["isa"], pin["threads"], pin["device"]) == ("random:gemma3-reduced", "avx2", 1, "cpu")
    assert pin["random_weights"]["label"] == ("random weights: architecture only (reduced dimensions, not a "
                                              "published model)")
    assert "accelerator" not in pin


@pytest.mark.slow
def test_the_reduced_gemma3_certificate_replays_in_a_fresh_process(tmp_path):
    """5 pairs recomputed in a fresh process under the certificate's pin, judged from the replay record it logged
    (:func:`graftbench.eval.replay_committed.judge`). Strict on the kinds of CPU it is known to reproduce on; on
    another kind a completed comparison that found a difference is an expected failure naming it; a crash, a
    missing record or a pin that is not comparable fails everywhere."""
    expected = json.loads(CERTIFICATE.read_text())
    done, record = replay_once(ROOT, CERTIFICATE, REPLAY_PAIRS, tmp_path / "replay", timeout_s=1800)
    output = done.stdout + done.stderr
    outcome = judge(CERTIFICATE.name, expected, record, done.returncode, output, REPLAY_PAIRS,
                    read_replay_log(ROOT / REPLAY_LOG), isa.environment())
    if outcome.verdict == DIFFERS_UNPROVEN:
        pytest.xfail(outcome.detail)
    assert outcome.verdict == EQUAL, f"{outcome.verdict}: {outcome.detail}\n{output}"
    assert f"{REPLAY_PAIRS} compared, {REPLAY_PAIRS} equal" in output
