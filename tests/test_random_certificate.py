"""The committed CPU certificate of a random-weights Gemma 3 model (the reduced config, labelled reduced): 50
distinct pairs, all byte-exact, with controls, and its replay in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graftbench.util import isa
from graftbench.results.exact_manifest import known_to_reproduce, read_replay_log, verify_exactness_manifest
from graftbench.results.layout import REPLAY_LOG
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[1]
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
def test_the_reduced_gemma3_certificate_replays_in_a_fresh_process():
    expected = json.loads(CERTIFICATE.read_text())
    here = isa.environment()
    done = subprocess.run([sys.executable, "-m", "graftbench.cli.app", "check-exact", "--expect", str(CERTIFICATE),
                           "--limit", str(REPLAY_PAIRS), "--device", "cpu"], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800)
    output = done.stdout + done.stderr
    if not known_to_reproduce(expected, read_replay_log(ROOT / REPLAY_LOG), here) \
            and done.returncode != 0:
        pytest.xfail(f"recorded on {isa.describe_cpu(expected['environment'])}, not reproduced on "
                     f"{isa.describe_cpu(here)}: {output.strip().splitlines()[-1]}")
    assert done.returncode == 0, output
    assert f"{REPLAY_PAIRS} compared, {REPLAY_PAIRS} equal" in output
