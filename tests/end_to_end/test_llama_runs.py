"""solve, deposit and eval on the llama.cpp engine (graftbench/engine/llama_cpp/session.py), and llama.cpp states in
the store (graftbench/store/llama_state.py).

The container tests make states from synthetic bytes (no llama.cpp needed); the run tests run smollm2-135m on
llama.cpp as built on this machine, with two built-in problems and short budgets, and compare what this machine
measures with itself: nothing recorded on another CPU is expected.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.store.codec import LLAMA_FORMAT, ArtifactError, audit_artifact
from graftbench.store.folder import Store
from graftbench.store.ids import artifact_id_of
from graftbench.store.llama_state import audit_any, decode_state, encode_state

from tests.prereqs import llama_missing, need

HEADER = {"config_fingerprint": "f" * 64, "problem_key": "k", "problem_text": "a problem", "answer": "7"}
STATE = bytes(range(256)) * 3


def _state_artifact(token_ids=(1, 2, 3), state=STATE, header=HEADER) -> tuple[str, bytes]:
    data = encode_state(dict(header), list(token_ids), state)
    return artifact_id_of(data), data


def test_a_llama_state_container_round_trips_and_is_deterministic():
    artifact_id, data = _state_artifact()
    assert _state_artifact()[1] == data
    header, token_ids, state = decode_state(artifact_id, data)
    assert (header["format"], header["positions"], token_ids, state) == (LLAMA_FORMAT, [0, 3], [1, 2, 3], STATE)
    assert audit_any(artifact_id, data) == header


def _edited(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1
    return data.replace(old, new)


@pytest.mark.parametrize("edit, check", [
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "payload"),  # the state's last byte flipped, id recomputed
    (lambda d: _edited(d, b'\\"positions\\":[0,3]', b'\\"positions\\":[0,2]'), "header"),  # payload intact
])
def test_a_llama_state_with_edited_bytes_is_refused_naming_the_check(edit, check):
    _, data = _state_artifact()
    forged = edit(data)
    with pytest.raises(ArtifactError) as caught:
        decode_state(artifact_id_of(forged), forged)
    assert caught.value.check == check
    with pytest.raises(ArtifactError):
        audit_any(artifact_id_of(forged), forged)


def test_a_llama_state_under_another_id_is_refused_as_a_hash_mismatch():
    artifact_id, data = _state_artifact()
    other = artifact_id_of(data + b"x")
    with pytest.raises(ArtifactError) as caught:
        decode_state(other, data)
    assert caught.value.check == "hash"


def test_a_llama_state_is_never_read_as_torch_kv_tensors():
    artifact_id, data = _state_artifact()
    with pytest.raises(ArtifactError) as caught:
        audit_artifact(artifact_id, data)
    assert caught.value.check == "format" and "llama-state" in str(caught.value)


def test_the_store_indexes_audits_and_serves_a_llama_state(tmp_path):
    store = Store(tmp_path / "store")
    artifact_id, data = _state_artifact()
    assert store.put(data) == artifact_id
    assert store.verify() == []
    assert store.audit(artifact_id)["format"] == LLAMA_FORMAT
    assert store.token_ids(artifact_id) == [1, 2, 3]
    assert store.read_state(artifact_id)[2] == STATE
    assert store.find_exact(HEADER["config_fingerprint"], "k") == artifact_id
    path = store.path(artifact_id)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(ArtifactError) as caught:
        store.read_state(artifact_id)
    assert caught.value.check == "hash"
    assert any(artifact_id[:16] in line for line in store.verify())


@pytest.mark.parametrize("where", ["first block", "a middle block", "last byte"])
def test_a_state_of_many_read_blocks_is_hashed_as_it_is_read_and_one_edited_byte_anywhere_is_refused(tmp_path, where):
    from graftbench.util.safe_files import READ_BLOCK_BYTES

    state = bytes(range(256)) * (5 * READ_BLOCK_BYTES // 256 // 2)  # 2.5 read blocks
    store = Store(tmp_path / "store")
    artifact_id, data = _state_artifact(state=state)
    store.put(data)
    buffer = bytearray()
    timing: dict = {}
    assert store.read_state(artifact_id, timing=timing, buffer=buffer)[2] == state
    assert set(timing) == {"read_s", "integrity_s", "parse_s"}
    path = store.path(artifact_id)
    raw = bytearray(path.read_bytes())
    raw[{"first block": 100, "a middle block": READ_BLOCK_BYTES + 7, "last byte": len(raw) - 1}[where]] ^= 1
    path.write_bytes(bytes(raw))
    for kept in (buffer, None):
        with pytest.raises(ArtifactError) as caught:
            store.read_state(artifact_id, buffer=kept)
        assert caught.value.check == "hash"


def test_a_blockwise_read_hands_each_block_in_order_and_covers_the_file(tmp_path):
    from graftbench.util.safe_files import READ_BLOCK_BYTES, read_regular_into

    data = bytes(range(251)) * (2 * READ_BLOCK_BYTES // 251 + 3)
    path = tmp_path / "file"
    path.write_bytes(data)
    blocks = []
    view = read_regular_into(path, bytearray(), max_bytes=len(data), on_block=lambda b: blocks.append(bytes(b)))
    assert bytes(view) == data and b"".join(blocks) == data
    assert [len(b) for b in blocks] == [READ_BLOCK_BYTES, READ_BLOCK_BYTES, len(data) - 2 * READ_BLOCK_BYTES]



def test_the_blocks_are_handled_beside_the_read_and_all_done_when_it_returns(tmp_path):
    import threading

    from graftbench.util.safe_files import READ_BLOCK_BYTES, read_regular_into

    data = bytes(range(256)) * (3 * READ_BLOCK_BYTES // 256)
    path = tmp_path / "file"
    path.write_bytes(data)
    seen = []

    def slow_hash(block):
        threading.Event().wait(0.01)  # slower than the read: blocks queue up, and the read does not wait for them
        seen.append((threading.current_thread().name, len(block)))

    read_regular_into(path, bytearray(), max_bytes=len(data), on_block=slow_hash)
    assert seen == [("graftbench-read-block", READ_BLOCK_BYTES)] * 3  # every call made before the return


def test_an_error_in_the_block_handler_reaches_the_reader_and_stops_the_handling(tmp_path):
    from graftbench.util.safe_files import READ_BLOCK_BYTES, read_regular_into

    path = tmp_path / "file"
    path.write_bytes(bytes(3 * READ_BLOCK_BYTES))
    calls = []

    def failing(block):
        calls.append(len(block))
        raise ValueError("digest failed")

    with pytest.raises(ValueError, match="digest failed"):
        read_regular_into(path, bytearray(), max_bytes=3 * READ_BLOCK_BYTES, on_block=failing)
    assert calls == [READ_BLOCK_BYTES]


# ------------------------------------------------------------------------------------ runs on llama.cpp


LLAMA = ["--engine", "llama.cpp", "-m", "smollm2-135m", "--chunk-size", "64"]


def _invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def _manifest(runs, name) -> dict:
    return json.loads((runs / name / "manifest.json").read_text())


@pytest.fixture(scope="module")
def llama_runs(tmp_path_factory):
    """A solve, a deposit of the references and a certified graft eval of two built-in problems on llama.cpp."""
    need("llama.cpp", llama_missing())
    root = tmp_path_factory.mktemp("llama-runs")
    runs, store = root / "runs", root / "store"
    common = [*LLAMA, "--limit", "2", "--runs-dir", str(runs)]
    _invoke("solve", *common, "--max-new-tokens", "8", "--run", "base")
    _invoke("deposit", *LLAMA, "--limit", "2", "--store", str(store))
    again = _invoke("deposit", *LLAMA, "--limit", "2", "--store", str(store))
    _invoke("eval", *common, "--max-new-tokens", "8", "--graft", "--certify", "--store", str(store), "--run", "graft")
    _invoke("eval", *common, "--max-new-tokens", "8", "--graft", "--store", str(store), "--run", "prompt",
            "--example-as", "prompt")
    return runs, store, again.output


@pytest.mark.model
def test_a_llama_cpp_graft_eval_is_certified_and_its_manifest_verifies(llama_runs):
    runs, store, _ = llama_runs
    base, graft = _manifest(runs, "base"), _manifest(runs, "graft")
    for manifest in (base, graft):
        assert manifest["config"]["engine"]["engine"] == "llama.cpp"
        assert manifest["config"]["dtype"] == "gguf"
    assert base["config_fingerprint"] == graft["config_fingerprint"]
    samples = graft["samples"]
    assert [s["mode"] for s in samples] == ["graft", "graft"]
    assert [s["route"] for s in samples] == ["exact", "exact"]
    assert all(s["certified"] is True and s["certificate_sha256"] == s["logits_sha256"] for s in samples)
    assert all(s["correct"] for s in samples)  # a recurring problem answered after its own verified solution
    verified = CliRunner().invoke(app, ["verify-manifest", str(runs / "graft" / "manifest.json"), "--store",
                                        str(store)])
    assert verified.exit_code == 0, verified.output
    listed = CliRunner().invoke(app, ["store", "verify", "--store", str(store)])
    assert listed.exit_code == 0 and "verifies" in listed.output


@pytest.mark.model
def test_a_second_llama_cpp_deposit_reuses_the_stored_states_without_a_prefill(llama_runs):
    assert "2 deposited (2 reused without a prefill), 0 refused" in llama_runs[2]


@pytest.mark.model
def test_the_example_as_prompt_arm_on_llama_cpp_gives_the_graft_arms_logits(llama_runs):
    runs = llama_runs[0]
    graft, prompt = _manifest(runs, "graft")["samples"], _manifest(runs, "prompt")["samples"]
    assert [s["logits_sha256"] for s in prompt] == [s["logits_sha256"] for s in graft]
    assert [s["prefill_tokens_saved"] for s in prompt] == [0, 0]
    assert [s["prefill_tokens"] for s in prompt] == [g["artifact_tokens"] + g["prefill_tokens"] for g in graft]


@pytest.mark.model
def test_the_report_sets_the_prompt_arm_beside_the_graft_arm(llama_runs, tmp_path):
    runs = llama_runs[0]
    done = CliRunner().invoke(app, ["report", str(runs / "graft"), str(runs / "prompt"), "--out",
                                    str(tmp_path / "report")])
    assert done.exit_code == 0, done.output
    row = json.loads((tmp_path / "report" / "summary.json").read_text())["prompt_arms"]
    assert [(r["prompt"], r["graft"], r["samples"], r["logits_equal"]) for r in row] == [("prompt", "graft", 2, 2)]
    assert row[0]["prompt_ttft_s"] > 0 and row[0]["graft_ttft_s"] > 0
    assert "| prompt | graft | 2 | 2 of 2 |" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.model
def test_a_torch_run_finds_no_artifact_of_its_pin_in_a_llama_cpp_store(llama_runs, session):
    from graftbench.store.open import open_store

    store = open_store(llama_runs[1], readonly=True)
    fingerprints = {row["config_fingerprint"] for row in store.rows()}
    assert len(fingerprints) == 1 and session.config.fingerprint not in fingerprints


@pytest.fixture(scope="module")
def llama_session():
    need("llama.cpp", llama_missing())
    from graftbench.engine.llama_cpp.session import open_llama_session

    return open_llama_session("smollm2-135m", chunk_size=64, threads=1, n_ctx=1024)


@pytest.mark.model
def test_a_llama_cpp_state_of_another_pin_or_with_a_flipped_byte_is_refused(llama_session, tmp_path, monkeypatch):
    from dataclasses import replace

    store = Store(tmp_path / "store")
    ids = llama_session.tokenizer("Problem: 2+2?\nSolution: 4.\nFinal answer: 4").input_ids
    artifact_id = store.put(llama_session.build_artifact(ids, {"problem_key": "k"}))
    grafted = llama_session.graft(store, artifact_id, room=16)
    assert grafted.segments == [ids] and grafted.cache.n_past == len(ids)
    grafted.cache.close()
    other = replace(llama_session, config=replace(llama_session.config, chunk_size=32))
    with pytest.raises(ArtifactError) as caught:
        other.graft(store, artifact_id)
    assert caught.value.check == "config"
    with pytest.raises(ArtifactError) as caught:
        llama_session.graft(store, artifact_id, room=2000)
    assert caught.value.check == "config" and "do not fit" in str(caught.value)
    path = store.path(artifact_id)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 1
    path.write_bytes(bytes(raw))
    restored = []
    with monkeypatch.context() as patch:
        patch.setattr(llama_session.engine, "restore", lambda payload, cache: restored.append(cache))
        with pytest.raises(ArtifactError) as caught:
            llama_session.graft(store, artifact_id)
    assert caught.value.check == "hash" and restored == []  # the flipped byte never reaches llama.cpp


@pytest.mark.model
def test_a_graft_empties_its_context_beside_the_read_and_a_refused_one_hands_the_context_back(llama_session, tmp_path,
                                                                                             monkeypatch):
    import gc

    from graftbench.engine.llama_cpp.engine import LlamaCppError

    gc.collect()  # a cache another test left open goes back now, not in the middle of this one
    store = Store(tmp_path / "store")
    ids = llama_session.tokenizer("Problem: 3+4?\nSolution: 7.\nFinal answer: 7").input_ids
    artifact_id = store.put(llama_session.build_artifact(ids, {"problem_key": "k"}))
    timing = {}
    grafted = llama_session.graft(store, artifact_id, room=16, timing=timing)
    assert set(timing) == {"read_s", "integrity_s", "parse_s", "checks_s", "clear_s", "rebuild_s"}
    assert all(seconds >= 0 for seconds in timing.values())
    logits = llama_session.prefill_after(grafted.cache, [ids[0]])
    kept = grafted.cache.ctx
    grafted.cache.close()  # the engine keeps it as its spare
    restored = []
    with monkeypatch.context() as patch:
        patch.setattr(llama_session.engine, "restore", lambda payload, cache: restored.append(cache))
        # refused after the read; the exception (kept) holds the graft's frame, so only the hand-back returns it
        with pytest.raises(ArtifactError) as no_room:
            llama_session.graft(store, artifact_id, room=2000)
    assert no_room.value.check == "config" and restored == []  # nothing restored before the checks pass

    def refuse(payload, cache):
        raise LlamaCppError("llama_state_seq_set_data read 0 bytes")

    with monkeypatch.context() as patch:
        patch.setattr(llama_session.engine, "restore", refuse)
        with pytest.raises(ArtifactError) as caught:
            llama_session.graft(store, artifact_id)
    assert caught.value.check == "read" and "read 0 bytes" in str(caught.value)
    again = llama_session.graft(store, artifact_id, room=16)
    assert again.cache.ctx is kept  # both refusals handed the one context back, cleared
    assert llama_session.logits_sha256(llama_session.prefill_after(again.cache, [ids[0]])) == \
        llama_session.logits_sha256(logits)
    again.cache.close()


    def no_context():
        raise LlamaCppError("llama.cpp could not make a context")

    monkeypatch.setattr(llama_session.engine, "cleared_cache", no_context)
    with pytest.raises(ArtifactError) as caught:  # as before the clear moved beside the read: a fallback, not a crash
        llama_session.graft(store, artifact_id)
    assert caught.value.check == "read" and "could not make a context" in str(caught.value)


@pytest.mark.model
def test_a_state_longer_than_a_sliding_window_is_refused_and_one_within_it_grafts(llama_session, tmp_path,
                                                                                   monkeypatch):
    """gemma3-270m's certificate on llama.cpp is byte-exact within its 512-token window and not past it: a
    sliding-window model's state longer than the window is refused (a prefill instead). smollm2-135m has no window:
    it is given one here."""
    store = Store(tmp_path / "store")
    ids = llama_session.tokenizer("Problem: 2+2?\nSolution: 4.\nFinal answer: 4").input_ids
    artifact_id = store.put(llama_session.build_artifact(ids, {"problem_key": "k"}))
    monkeypatch.setattr(llama_session.engine, "n_swa", len(ids) - 1)
    with pytest.raises(ArtifactError) as caught:
        llama_session.graft(store, artifact_id)
    assert caught.value.check == "config" and f"{len(ids) - 1}-token sliding window" in str(caught.value)
    monkeypatch.setattr(llama_session.engine, "n_swa", len(ids))
    assert llama_session.graft(store, artifact_id).cache.n_past == len(ids)


@pytest.mark.model
def test_seeded_samples_on_llama_cpp_repeat_and_each_starts_from_the_prompts_state(llama_session):
    from graftbench.engine.torch.sampling import SamplingSettings

    ids = llama_session.solve_prompt_ids("What is 12 times 13?")
    sampling = SamplingSettings(0.7, 0.95, 0)

    def samples(seeds):
        cache, logits = llama_session.prefill_prompt(ids)
        return [d.token_ids for d in llama_session.decode(cache, logits, 12, sampling, seeds, None, 0.0)]

    first = samples([11, 12, 13])
    assert samples([11, 12, 13]) == first
    assert [samples([seed])[0] for seed in (11, 12, 13)] == first  # each sample as if decoded alone
    assert len({tuple(tokens) for tokens in first}) > 1


def test_ray_workers_refuse_the_llama_cpp_engine_before_any_model_loads():
    result = CliRunner().invoke(app, ["solve", "--engine", "llama.cpp", "--executor", "ray", "--limit", "1"])
    assert result.exit_code == 2
    assert "engine 'llama.cpp' does not support Ray workers (--executor ray)" in result.output


def test_an_instruction_set_pin_is_refused_on_the_llama_cpp_engine(tmp_path):
    result = CliRunner().invoke(app, ["solve", *LLAMA, "--isa", "avx2", "--limit", "1", "--runs-dir",
                                      str(tmp_path)])
    assert result.exit_code == 2
    assert "--engine llama.cpp does not take --isa avx2" in result.output
    assert "Leave --isa out or choose an engine that takes it" in result.output
    assert not any(tmp_path.iterdir())


def test_an_unknown_engine_on_solve_is_refused_naming_the_option(tmp_path):
    result = CliRunner().invoke(app, ["solve", "--engine", "vllm", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "'vllm' is not one of torch, llama.cpp" in result.output
    assert not any(tmp_path.iterdir())


def test_a_llama_states_token_ids_keep_their_int64_values():
    artifact_id, data = _state_artifact(token_ids=(2**40, 5))
    assert decode_state(artifact_id, data)[1] == [2**40, 5]
