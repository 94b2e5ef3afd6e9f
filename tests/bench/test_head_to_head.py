"""The alternating graft against llama.cpp's state load: order of the sides, ratios, a failing peer, targets and
report. The peer is a stand-in script speaking ``peer_llama.py --serve-size``'s protocol (llama-cpp-python lives in
.venv-peer, which CI does not build); graftbench's graft is stubbed, so no model runs."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from graftbench.bench import head_to_head, peer
from graftbench.bench.report import head_to_head_markdown
from graftbench.bench.run import targets
from graftbench.bench.workload import Workload

FAKE_PEER = """
import json, sys
args = sys.argv[1:]
size = int(args[args.index("--serve-size") + 1])
if size == 13:
    print("boom: no state for 13 tokens", file=sys.stderr)
    sys.exit(3)
print(json.dumps({"ready": True, "n": size, "state_file_bytes": 1000}), flush=True)
for i, line in enumerate(sys.stdin):
    if line.strip() == "quit":
        break
    load = 0.010 + 0.001 * i
    print(json.dumps({"load_state_s": load, "ttft_restore_1tok_s": load + 0.040, "logits_equal": True}), flush=True)
"""

GRAFT_PARTS = {"read_s": 0.004, "integrity_s": 0.002, "parse_s": 0.001, "checks_s": 0.001, "rebuild_s": 0.002}


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A session, workload and peer script that need no model; returns the list the sides append to in order."""
    script = tmp_path / "fake_peer.py"
    script.write_text(FAKE_PEER)
    monkeypatch.setattr(peer, "SCRIPT", script)
    monkeypatch.setattr(head_to_head, "peer_skip", lambda session, python: None)
    monkeypatch.setattr(head_to_head, "deposit_tokens", lambda session, store, ids: "artifact")
    order = []

    def graft_once(session, store, artifact_id, query, integrity):
        order.append("graftbench")
        assert (artifact_id, query, integrity) == ("artifact", [7], "xxh3_128")
        return {**GRAFT_PARTS, "query_s": 0.030, "total_s": 0.040, "logits": "digest"}

    restore = head_to_head.PeerServer.restore
    monkeypatch.setattr(head_to_head, "graft_once", graft_once)
    monkeypatch.setattr(head_to_head.PeerServer, "restore", lambda self: order.append("llama.cpp") or restore(self))
    session = SimpleNamespace(loaded=SimpleNamespace(resolved=SimpleNamespace(path="model.gguf")))
    workload = Workload(context=list(range(100)), query=[7, 8, 9], query_lengths=[3], decode_prompt=[1, 2],
                        query_problem="p")
    return session, workload, order


def test_the_sides_alternate_and_the_ratios_are_llama_cpp_over_graftbench(stand_in, tmp_path):
    session, workload, order = stand_in
    result = head_to_head.measure_head_to_head(session, Path(sys.executable), workload, tmp_path / "store", 50, 4, 1)
    assert order == ["graftbench", "llama.cpp", "llama.cpp", "graftbench"] * 2
    assert [pair["first"] for pair in result["pairs"]] == ["graftbench", "llama.cpp"] * 2
    assert result["graftbench_restore_s"]["median"] == pytest.approx(0.010)
    assert result["llama_cpp_load_state_s"]["median"] == pytest.approx(0.0115)  # 10, 11, 12, 13 ms
    assert result["restore_ratio"] == pytest.approx(1.15)
    assert result["graft_ratio"] == pytest.approx(0.0515 / 0.040)
    assert result["graftbench_logits_stable"] and result["llama_cpp_logits_equal"]
    assert (result["tokens"], result["repeats"], result["state_file_bytes"]) == (50, 4, 1000)


def test_a_peer_that_fails_to_start_gives_a_skipped_section_with_its_stderr(stand_in, tmp_path):
    session, workload, order = stand_in
    result = head_to_head.measure_head_to_head(session, Path(sys.executable), workload, tmp_path / "store", 13, 4, 1)
    assert result == {"skipped": "peer failed: peer exited (status 3): boom: no state for 13 tokens"}
    assert order == []


def test_no_peer_python_skips_the_section_and_says_why(tmp_path):
    session = SimpleNamespace(loaded=SimpleNamespace(resolved=SimpleNamespace(kind="gguf", path="m.gguf")))
    result = head_to_head.measure_head_to_head(session, None, None, tmp_path, 50, 4, 1)
    assert result == {"skipped": "no --peer-python given"}


def test_alternating_ratios_become_targets_and_the_report_shows_them(stand_in, tmp_path):
    session, workload, _ = stand_in
    h2h = head_to_head.measure_head_to_head(session, Path(sys.executable), workload, tmp_path / "store", 50, 2, 1)
    result = {"only": "head-to-head", "head_to_head": h2h,
              "environment": {"model": "m", "dtype": "float32", "date": "d", "processor": "cpu", "cpu_count": 2,
                              "torch_threads": 2, "libraries": {}}}
    result["targets"] = targets(result)
    restore = result["targets"]["restore_vs_llama_cpp_state_load_50_tokens_alternating"]
    graft = result["targets"]["graft_1_token_vs_llama_cpp_state_load_1_token_50_tokens_alternating"]
    assert (restore["measured"], restore["met"]) == (pytest.approx(1.05), True)  # 10.5 ms over 10 ms
    assert (graft["measured"], graft["met"]) == (pytest.approx(0.0505 / 0.040), True)
    text = head_to_head_markdown(result)
    assert "| graftbench | 10.0 (10.0–10.0) | 40.0 (40.0–40.0) |" in text
    assert "| llama.cpp | 10.5 (10.0–11.0) | 50.5 (50.0–51.0) |" in text
    assert "restore **1.05×**" in text and "graft + 1 token **1.26×**" in text
    assert targets({**result, "head_to_head": {"skipped": "no --peer-python given"}}) == {}
