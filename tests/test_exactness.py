"""check-exact: byte-exact pairs, controls with teeth, the chunk schedule, and the pre-registered replay."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from graftbench import engine, exactness
from graftbench.exact_manifest import pin_differences, verify_exactness_manifest
from graftbench.exactness import build_pairs, replay, run_check_exact

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_manifest(session, aime2024):
    return run_check_exact(session, aime2024, "aime2024", samples=5, with_controls=True, control_pairs=2)


def test_pairs_cover_short_long_and_cross_window_on_real_text(session, aime2024):
    pairs = build_pairs(session, aime2024, 10)
    kinds = [p.kind for p in pairs]
    assert kinds.count("long") == 2 and kinds.count("cross-window") == 2 and kinds.count("short") == 6
    for pair in pairs:
        if pair.kind == "long":
            assert len(pair.artifact) >= exactness.LONG_MIN and len(pair.problems) >= 2
        if pair.kind == "cross-window":
            assert len(pair.artifact) < 512 < len(pair.artifact) + len(pair.query)


def test_every_pair_is_byte_exact_at_every_query_position(small_manifest):
    totals = small_manifest["totals"]
    assert totals["pairs"] == totals["exact_pairs"] == 5
    for record in small_manifest["pairs"]:
        assert record["graft_logits_sha256"] == record["fresh_logits_sha256"]
        assert record["kl_max"] == 0.0 and record["max_abs_delta"] == 0.0 and record["argmax_agreement"] == 1.0
    assert verify_exactness_manifest(small_manifest) == []


def test_controls_have_teeth(small_manifest):
    controls = small_manifest["totals"]["controls"]
    assert set(controls) == {"monolithic", "chunk-32", "shift-8", "shift-128", "shift-1024"}
    for name in ("monolithic", "shift-8", "shift-128", "shift-1024"):
        assert controls[name]["exact_pairs"] == 0 and controls[name]["max_abs_delta"] > 0, name
        assert controls[name]["max_abs_delta"] < 1e-2, name  # small float differences, not a broken graft


def test_chunk_boundaries_restart_at_each_segment(session, monkeypatch):
    sizes = []
    real = engine.forward

    def spy(model, cache, ids, all_logits=False, offset=0):
        sizes.append(len(ids))
        return real(model, cache, ids, all_logits=all_logits, offset=offset)

    monkeypatch.setattr(engine, "forward", spy)
    cache = engine.new_cache(session.model)
    engine.prefill(session.model, cache, list(range(100, 250)), 64)  # artifact: 150 tokens
    engine.prefill(session.model, cache, list(range(300, 370)), 64)  # query: 70 tokens, from its own start
    assert sizes == [64, 64, 22, 64, 6]


def test_replay_passes_then_fails_on_a_changed_hash(session, aime2024, small_manifest):
    result = replay(session, small_manifest, aime2024, limit=2)
    assert (result.compared, result.equal, result.passed) == (2, 2, True)
    tampered = copy.deepcopy(small_manifest)
    record = tampered["pairs"][1]
    record["graft_logits_sha256"] = ("0" if record["graft_logits_sha256"][0] != "0" else "1") + record["graft_logits_sha256"][1:]
    result = replay(session, tampered, aime2024, limit=3)
    assert not result.passed and result.first_difference.startswith("pair-001: graft logits")
    assert (result.compared, result.equal) == (2, 1)


def test_replay_under_another_pin_is_not_comparable(session, aime2024, small_manifest):
    other = copy.deepcopy(small_manifest)
    other["config"]["threads"] += 1
    other["config"]["libraries"]["torch"] = "0.0"
    result = replay(session, other, aime2024, limit=1)
    assert not result.passed and result.compared == 0
    assert result.pin_differences == ["libraries.torch", "threads"]
    assert pin_differences(small_manifest["config"], {**small_manifest["config"], "model": "alias"}) == []


COMMITTED_FLOAT32 = sorted(p.name for p in (ROOT / "manifests").glob("exact-*.json") if "-bf16" not in p.name)


def test_the_default_model_float32_expectation_is_committed():
    assert "exact-smollm2-135m.json" in COMMITTED_FLOAT32


@pytest.mark.parametrize("name", COMMITTED_FLOAT32)
def test_committed_float32_expectation_replays_on_this_machine(name, aime2024):
    """The cross-machine check: 5 pairs of each committed float32 manifest recomputed here, hash for hash."""
    from graftbench.session import open_session

    import torch

    expected = json.loads((ROOT / "manifests" / name).read_text())
    pin = expected["config"]
    threads = torch.get_num_threads()
    try:
        session = open_session(pin["model"], dtype=pin["dtype"], chunk_size=pin["chunk_size"], threads=pin["threads"])
        result = replay(session, expected, aime2024, limit=5)
    finally:
        torch.set_num_threads(threads)
    assert result.pin_differences == []
    assert (result.compared, result.equal, result.first_difference) == (5, 5, None)
