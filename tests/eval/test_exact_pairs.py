"""``check-exact --expect E --pairs START:END``: a replay of a range of an expectation's pairs (the GPU window
replays pairs past the ones already replayed), and its refusals before any model loads."""

from __future__ import annotations

import copy
import json
import os
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.eval.exactness import replay, replay_and_log, run_check_exact


SOLUTION_CHARS = 300  # characters of each worked solution kept: artifacts of a few hundred tokens, not 768


@pytest.fixture(scope="module")
def short_problems(aime2024):
    """AIME 2024 with each worked solution cut to ``SOLUTION_CHARS`` characters. Which pairs a range replays, and
    where it stops, do not depend on how long a pair's artifact is; short artifacts make each pair a few times
    cheaper to measure and to replay."""
    return [replace(p, solution=p.solution[:SOLUTION_CHARS]) for p in aime2024]


@pytest.fixture(scope="module")
def three_pairs(session, short_problems):
    return run_check_exact(session, short_problems, "aime2024", samples=3, with_controls=False, control_pairs=0)


def test_a_range_replays_those_pairs_only_and_stops_at_a_changed_hash(session, short_problems, three_pairs, tmp_path):
    """On three pairs of short artifacts (``short_problems``: a range's bookkeeping is the same at any length)."""
    seen = []
    result = replay(session, three_pairs, short_problems, limit=3, on_pair=seen.append, first=1)
    assert (result.compared, result.equal, result.passed) == (2, 2, True)
    assert [r["id"] for r in seen] == [r["id"] for r in three_pairs["pairs"][1:3]]
    tampered = copy.deepcopy(three_pairs)
    tampered["pairs"][0]["graft_logits_sha256"] = "0" * 64  # outside the range: not looked at
    record = tampered["pairs"][2]
    record["graft_logits_sha256"] = ("0" if record["graft_logits_sha256"][0] != "0" else "1") + \
        record["graft_logits_sha256"][1:]
    result = replay(session, tampered, short_problems, first=1)
    assert not result.passed and result.first_difference.startswith("pair-002: graft logits")
    assert (result.compared, result.equal) == (2, 1)
    log = tmp_path / "replays.jsonl"
    outcome, logged = replay_and_log(session, three_pairs, short_problems, None, log, first=2)
    assert (outcome.compared, outcome.equal) == (1, 1) and logged["first_pair"] == 2
    assert json.loads(log.read_text().splitlines()[-1])["first_pair"] == 2
    with pytest.raises(ValueError, match="pairs 3: hold none of the expectation's 3 pairs"):
        replay(session, three_pairs, short_problems, first=3)


@pytest.mark.parametrize("arguments, message", [
    (["--pairs", "5:3"], "--pairs '5:3' is not START:END with whole numbers START < END"),
    (["--pairs", "a:b"], "--pairs 'a:b' is not START:END"),
    (["--pairs", "1:2", "--limit", "2"], "--pairs and --limit both choose the pairs replayed: give one"),
    (["--pairs", "99:"], "--pairs starts at pair 99, but"),
])
def test_a_bad_pair_range_is_refused_before_any_model_loads(arguments, message):
    from tests.conftest import REFERENCE_MANIFESTS

    result = CliRunner().invoke(app, ["check-exact", "--expect", str(REFERENCE_MANIFESTS / "exact-gemma3-270m.json"),
                                      *arguments])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_a_pair_range_without_an_expectation_is_refused():
    result = CliRunner().invoke(app, ["check-exact", "--model", "no-such-model", "--pairs", "1:2"])
    assert result.exit_code == 2 and "--pairs applies with --expect only" in result.output


@pytest.mark.parametrize("where, message", [("missing/replays.jsonl", "its folder does not exist"),
                                            (".", "is a folder")])
def test_a_replay_log_that_cannot_be_appended_to_is_refused_before_any_model_loads(tmp_path, where, message):
    """Not after the replay: a replay of 50 pairs takes hours, and its record would be lost."""
    from tests.conftest import REFERENCE_MANIFESTS

    log = tmp_path / where
    result = CliRunner().invoke(app, ["check-exact", "--expect", str(REFERENCE_MANIFESTS / "exact-gemma3-270m.json"),
                                      "--pairs", "1:", "--log", str(log)])
    assert result.exit_code == 2 and f"--log {log}: {message}" in " ".join(result.output.split()), result.output
    assert not (tmp_path / "missing").exists()


def test_a_replay_on_an_emulated_or_unchecked_cpu_is_never_logged_to_the_replay_log(tmp_path, monkeypatch):
    """The replay log of CPUs (manifests/replays.jsonl) proves pins; a replay under an emulator, or where the
    emulation check could not be made, proves none: refused before it starts, pointing to the emulated log."""
    from graftbench.results.exact_manifest import replay_log_refusal
    from graftbench.util import isa
    from tests.conftest import REFERENCE_MANIFESTS

    here = {"cpu_model": "AMD EPYC", "cpu_capability_native": "AVX512"}
    emulated = {**here, "emulated": {"seen": "GenuineIntel Intel Core Processor (Haswell)"}}
    unchecked = {**here, "emulation_unchecked": "CPUID could not be run in this process"}
    log = tmp_path / "replays.jsonl"
    assert replay_log_refusal(log, here) is None
    assert replay_log_refusal(tmp_path / "emulated-replays.jsonl", emulated) is None
    assert replay_log_refusal(tmp_path / "mine.jsonl", unchecked) is None
    assert "this CPU is emulated" in replay_log_refusal(log, emulated)
    assert "not checked for emulation" in replay_log_refusal(log, unchecked)
    (tmp_path / "elsewhere.jsonl").symlink_to(log)  # a link to the replay log is the replay log
    assert "this CPU is emulated" in replay_log_refusal(tmp_path / "elsewhere.jsonl", emulated)
    os.mkfifo(tmp_path / "fifo.jsonl")  # an append would block once the replay is done, its record lost
    assert "not a regular file" in replay_log_refusal(tmp_path / "fifo.jsonl", here)
    monkeypatch.setattr(isa, "environment", lambda: emulated)
    result = CliRunner().invoke(app, ["check-exact", "--expect", str(REFERENCE_MANIFESTS / "exact-gemma3-270m.json"),
                                      "--pairs", "1:", "--log", str(log)])
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and "log it to emulated-replays.jsonl" in output, result.output
    assert not log.exists()
