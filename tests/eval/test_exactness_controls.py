"""check-exact's controls can fail: each control an engine claims moves the logits' bytes, and one flipped bit of one
restored key (the sensitivity control) is seen, on the torch engine and on the llama.cpp engine.

The layout tests build llama.cpp sequence states by hand (no llama.cpp needed); the llama.cpp model tests run
smollm2-135m through llama.cpp as built here on real AIME 2024 text and compare hashes measured here, so no figure
recorded on another CPU is expected.
"""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

from graftbench.engine.llama_cpp.state_layout import (
    GGML_F16,
    GGML_Q8_0,
    SEQ_STATE_MAGIC,
    flip_key_bit,
    key_bit,
    parse_state,
)

from tests.prereqs import llama_missing, need


def _state(positions, layers=2, k_type=GGML_F16, row_bytes=8, v_trans=1, caches=1) -> bytes:
    """A llama.cpp sequence state as ``llama_state_seq_get_data`` writes it: its header, then ``caches`` caches of
    one stream (the layout of ``llama_kv_cache::state_write``) with one cell per position and ``layers`` layers,
    whose key row ``r`` of layer ``l`` holds the bytes ``16 * l + r``."""
    out = struct.pack("<Ii", SEQ_STATE_MAGIC, 0)
    cells = len(positions)
    for _ in range(caches):
        out += struct.pack("<II", 1, cells)
        out += b"".join(struct.pack("<iIi", pos, 1, 0) for pos in positions)
        out += struct.pack("<II", v_trans, layers)
        for layer in range(layers):
            out += struct.pack("<iQ", k_type, row_bytes)
            out += b"".join(bytes([16 * layer + row]) * row_bytes for row in range(cells))
        for layer in range(layers):
            if v_trans:
                out += struct.pack("<iII", GGML_F16, 2, row_bytes // 2) + b"\x7f" * (row_bytes * cells)
            else:
                out += struct.pack("<iQ", GGML_F16, row_bytes) + b"\x7f" * (row_bytes * cells)
    return out


@pytest.mark.parametrize("v_trans", [0, 1])
def test_the_state_layout_is_read_to_its_last_byte_and_finds_each_layers_key_rows(v_trans):
    state = _state([0, 1, 2], v_trans=v_trans)
    rows = parse_state(state)
    assert [(r.cache, r.layer, r.positions, r.row_bytes) for r in rows] == [(0, 0, (0, 1, 2), 8), (0, 1, (0, 1, 2), 8)]
    for r in rows:
        assert state[r.offset:r.offset + 3 * r.row_bytes] == b"".join(bytes([16 * r.layer + i]) * 8 for i in range(3))
    two = parse_state(_state([0, 1], caches=2))  # a sliding-window model writes two caches
    assert [(r.cache, r.layer) for r in two] == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize("damage, message", [
    (lambda s: s[:-1], r"a block of 24 bytes at byte 180 runs past the state's 203 bytes"),
    (lambda s: s + b"\0", r"the state ends at byte 205 inside a field at byte 204"),
    (lambda s: s + b"\0" * 4, r"cache 1 of the state has 0 streams; this reads 1 to 64"),
    (lambda s: s[:20], r"the state ends at byte 20 inside a field at byte 20"),
    (lambda s: b"", r"the state ends at byte 0 inside a field at byte 0"),
    (lambda s: b"\0" + s[1:], r"the state starts with 0xaf143c00, not llama.cpp's sequence state magic 0xaf143cd8"),
], ids=["last-byte-cut", "one-byte-more", "an-empty-cache-more", "cut-in-a-cell", "empty", "magic"])
def test_a_state_that_does_not_follow_the_layout_to_its_end_is_refused_naming_where(damage, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_state(damage(_state([0, 1, 2])))


def test_another_key_type_is_refused_naming_it():
    with pytest.raises(ValueError, match="key type 0"):
        parse_state(_state([0, 1], k_type=0))


def test_one_bit_of_one_f16_key_is_flipped_and_nothing_else():
    state = _state([0, 1, 2])
    flipped, where = flip_key_bit(state, position=2, element=1)
    row = parse_state(state)[0]
    assert where["byte"] == row.offset + 2 * row.row_bytes + 2 * 1 + 1 and where["bit"] == 1  # f16 bit 9: the top
    assert where["what"] == "f16 bit 9 (mantissa)" and (where["cache"], where["layer"]) == (0, 0)
    changed = [i for i, (a, b) in enumerate(zip(state, flipped)) if a != b]
    assert changed == [where["byte"]] and state[where["byte"]] ^ flipped[where["byte"]] == 0b10
    before = np.frombuffer(state, np.uint8)[where["byte"] - 1:where["byte"] + 1].view("<f2")[0]
    after = np.frombuffer(flipped, np.uint8)[where["byte"] - 1:where["byte"] + 1].view("<f2")[0]
    assert before != after and np.sign(before) == np.sign(after)  # the mantissa moved, not the sign
    assert flip_key_bit(state, position=0, bit=0)[1]["what"] == "f16 bit 0 (mantissa)"
    with pytest.raises(ValueError, match="position 3"):
        flip_key_bit(state, position=3)
    with pytest.raises(ValueError, match="element 4"):
        flip_key_bit(state, position=0, element=4)
    with pytest.raises(ValueError, match="bit 16"):
        flip_key_bit(state, position=0, bit=16)


def test_a_q8_0_keys_bit_is_in_its_quant_past_the_blocks_scale():
    rows = parse_state(_state([0, 1], k_type=GGML_Q8_0, row_bytes=68))  # 64 elements: two blocks of 2 + 32 bytes
    row = rows[0]
    assert key_bit(row, 1, element=0) == (row.offset + 68 + 2, 6, "q8_0 quant bit 6")
    assert key_bit(row, 1, element=33, bit=0) == (row.offset + 68 + 34 + 2 + 1, 0, "q8_0 quant bit 0")
    with pytest.raises(ValueError, match="bit 8"):
        key_bit(row, 0, bit=8)


# ---- the torch engine -------------------------------------------------------------------------------------------


def _short_pair(session, aime2024, artifact_tokens=200, query_tokens=24):
    """A pair of real text: check-exact's first pair cut to ``artifact_tokens`` and ``query_tokens``."""
    from graftbench.eval.exactness import Pair, build_pairs

    pair = build_pairs(session, aime2024, 1)[0]
    return Pair(pair.id, pair.kind, pair.problems, pair.artifact[:artifact_tokens], pair.query[:query_tokens])


def test_one_flipped_key_bit_in_a_restored_torch_cache_changes_the_logits_and_leaves_the_artifact(session, aime2024):
    from graftbench.engine.torch import forward, graft
    from graftbench.eval.exactness import graft_pair

    pair = _short_pair(session, aime2024)
    _, grafted, deposited = graft_pair(session, pair)
    artifact = deposited.payload
    fresh = forward.logits_sha256(session.exactness().fresh_logits(pair.artifact, pair.query))
    assert forward.logits_sha256(grafted) == fresh
    keys_before = artifact.layers[0][0].clone()
    cache = graft.restore(session.model, session.config, artifact)
    where = graft.flip_key_bit(cache)
    assert where["bit"] == 22 and where["position"] == len(pair.artifact) - 1
    flipped = forward.prefill(session.model, cache, pair.query, session.config.chunk_size, all_logits=True)
    assert forward.logits_sha256(flipped) != fresh
    assert bool((artifact.layers[0][0] == keys_before).all())  # the flip was made in a copy
    again = graft.restore(session.model, session.config, artifact)
    assert forward.logits_sha256(forward.prefill(session.model, again, pair.query, session.config.chunk_size,
                                                 all_logits=True)) == fresh
    with pytest.raises(ValueError, match="bit 23"):
        graft.flip_key_bit(graft.restore(session.model, session.config, artifact), bit=23)


def test_every_torch_control_differs_on_a_real_text_pair_the_bit_flip_included(session, aime2024):
    from graftbench.eval.exactness import controls, graft_pair

    pair = _short_pair(session, aime2024)
    _, _, deposited = graft_pair(session, pair)
    results = controls(session, pair, session.exactness().fresh_logits(pair.artifact, pair.query), deposited)
    assert {"monolithic", "key-bit-flip", "shift-8", "shift-128", "shift-1024"} <= set(results)
    for name in ("monolithic", "key-bit-flip", "shift-8", "shift-128", "shift-1024"):
        assert not results[name]["equal"] and results[name]["max_abs_delta"] > 0, name


# ---- the llama.cpp engine ---------------------------------------------------------------------------------------

LLAMA_ARTIFACT_TOKENS = 520  # with the query, past the 512 cells from which flash attention splits a decode step
FLIP_ARTIFACT_TOKENS = 100  # the key-bit flip in llama.cpp's state: a full batch of the pin's 64 tokens and a part
LLAMA_PINS = [("f16", False), ("f16", True), ("q8_0", True)]  # the KV cache types and flash attention certified


def _llama_session(kv_type: str, flash_attn: bool):
    """smollm2-135m on llama.cpp, or a named skip (a failure where GRAFTBENCH_REQUIRE requires llama.cpp) when
    llama-cpp-python is not importable."""
    from graftbench.engine.llama_cpp.session import open_llama_session

    need("llama.cpp", llama_missing())
    return open_llama_session("smollm2-135m", chunk_size=64, threads=1, kv_type=kv_type, flash_attn=flash_attn,
                              n_ctx=1024)


@pytest.fixture(scope="module", params=LLAMA_PINS, ids=[f"{kv}-fa-{'on' if fa else 'off'}" for kv, fa in LLAMA_PINS])
def llama_pair(request, aime2024):
    """smollm2-135m on llama.cpp under one of the certified cache pins, and check-exact's first AIME 2024 pair cut
    to ``LLAMA_ARTIFACT_TOKENS`` artifact tokens and 24 query tokens."""
    from graftbench.eval.exactness import Pair, build_pairs
    from graftbench.engine.llama_cpp.exactness import window_of

    ls = _llama_session(*request.param)
    pair = build_pairs(ls, aime2024, 1, window=window_of(ls))[0]
    assert len(pair.artifact) > LLAMA_ARTIFACT_TOKENS
    yield ls, Pair(pair.id, pair.kind, pair.problems, pair.artifact[:LLAMA_ARTIFACT_TOKENS], pair.query[:24])
    ls.engine.close()


@pytest.mark.model
def test_each_control_the_llama_cpp_engine_claims_differs_on_real_text_and_the_others_are_reported(llama_pair):
    from graftbench.engine.llama_cpp.exactness import must_differ
    from graftbench.eval.exactness import check_pair

    ls, pair = llama_pair
    record = check_pair(ls, pair, with_controls=True)
    assert record["equal"] and record["graft_logits_sha256"] == record["fresh_logits_sha256"]
    claimed = must_differ(ls.engine)
    switched = ["kv-f16"] if ls.engine.kv_type != "f16" else \
        ["flash-attn-off" if ls.engine.flash_attn else "flash-attn-on", "kv-q8_0"]
    decode = ["threads-2-decode"] if ls.engine.kv_type == "f16" and ls.engine.flash_attn else []
    assert sorted(claimed) == sorted([*switched, *decode, "shift-8", "shift-128", "shift-1024", "key-bit-flip"])
    assert set(record["controls"]) == {*claimed, "chunk-32", "monolithic"}  # the measured ones are reported too
    for name in claimed:
        control = record["controls"][name]
        assert not control["equal"] and control["max_abs_delta"] > 0, name


@pytest.mark.model
def test_one_flipped_key_bit_in_llama_cpps_state_changes_the_grafts_logits(llama_pair):
    """On the pair's first ``FLIP_ARTIFACT_TOKENS`` artifact tokens: the state's layout and what one flipped bit
    does to the graft do not depend on the artifact's length (the 520 tokens are for the decode control)."""
    from graftbench.engine.llama_cpp.engine import LlamaState
    from graftbench.engine.llama_cpp.exactness import deposit_state, fresh_logits, graft_logits
    from graftbench.eval.exactness import Pair

    ls, whole = llama_pair
    pair = Pair(whole.id, whole.kind, whole.problems, whole.artifact[:FLIP_ARTIFACT_TOKENS], whole.query)
    state = deposit_state(ls, pair.artifact)
    rows = parse_state(state.state)
    n = len(pair.artifact)
    assert len(rows) == 30 and all(r.positions == tuple(range(n)) for r in rows)  # smollm2: 30 layers, one cache
    assert rows[0].row_bytes == {"f16": 3 * 64 * 2, "q8_0": 3 * 64 // 32 * 34}[ls.engine.kv_type]  # 3 KV heads × 64
    flipped, where = flip_key_bit(state.state, position=n - 1)
    assert where["what"] == {"f16": "f16 bit 9 (mantissa)", "q8_0": "q8_0 quant bit 6"}[ls.engine.kv_type]
    assert sum(a != b for a, b in zip(state.state, flipped)) == 1
    h = ls.engine.logits_sha256
    fresh = h(fresh_logits(ls, pair.artifact, pair.query))
    assert h(graft_logits(ls, state, pair.query)) == fresh
    assert h(graft_logits(ls, LlamaState(flipped, state.token_ids, state.positions), pair.query)) != fresh


# ---- what the tables and check-exact say about the controls ------------------------------------------------------


def _manifest_with_controls(must_differ, equal_on):
    """A sealed exactness manifest of two pairs whose controls ``a``, ``b`` and ``chunk-8`` came out byte-exact on
    the pairs ``equal_on`` lists per control; ``must_differ`` is recorded in the settings when not ``None``."""
    from graftbench.results.exact_manifest import build_exactness_manifest

    def summary(equal):
        return {"equal": equal, "max_abs_delta": 0.0 if equal else 0.5, "kl_mean": 0.0, "kl_p99": 0.0, "kl_max": 0.0,
                "argmax_agreement": 1.0}

    def record(i):
        return {"id": f"pair-{i:03d}", "kind": "short", "problems": ["p"], "artifact_tokens": 10, "query_tokens": 2,
                "tokens_sha256": str(i), "artifact_id": str(i), "graft_logits_sha256": "h", "fresh_logits_sha256": "h",
                **summary(True),
                "controls": {name: summary(i in equal_on.get(name, ())) for name in ("a", "b", "chunk-8")}}

    records = [record(i) for i in range(2)]
    settings = {"samples": 2, "controls": True, **({"must_differ": must_differ} if must_differ is not None else {})}
    return build_exactness_manifest(config={"model": "m", "dtype": "float32"}, config_fingerprint="f",
                                    problem_set={"source": "s", "sha256": "x", "n": 2}, settings=settings,
                                    records=records)


def test_a_control_claimed_to_differ_that_came_out_equal_is_named_and_the_table_says_each_claim():
    from rich.console import Console

    from graftbench.cli.tables import exactness_tables
    from graftbench.eval.exactness import controls_without_teeth
    from graftbench.results.exact_manifest import verify_exactness_manifest

    manifest = _manifest_with_controls(["a", "b"], {"b": (1,), "chunk-8": (0, 1)})
    assert verify_exactness_manifest(manifest) == []
    assert controls_without_teeth(manifest) == ["b: byte-exact on 1 of 2 pairs"]  # chunk-8 is only measured
    console = Console(width=200, record=True)
    console.print(exactness_tables(manifest)[1])
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if line.count("│") > 3}
    assert "must differ" in rows["a"] and "must differ" in rows["b"] and "measured" in rows["chunk-8"]
    older = _manifest_with_controls(None, {"b": (1,)})  # recorded before the claim was written: nothing claimed
    assert controls_without_teeth(older) == []
    console = Console(width=200, record=True)
    console.print(exactness_tables(older)[1])
    text = console.export_text()
    assert "must differ" not in text and "—" in text


def test_the_committed_exactness_manifests_still_verify_with_their_controls_as_recorded():
    """Every committed expectation verifies, and no control one claims (``settings.must_differ``: written by the
    expectations recorded since claims exist; older ones claim none) came out byte-exact on some pair."""
    from graftbench.eval.exactness import controls_without_teeth
    from graftbench.results.exact_manifest import verify_exactness_manifest

    from tests.conftest import ROOT

    paths = sorted((ROOT / "manifests").glob("*/exact-*.json"))
    claimed = []
    for path in paths:
        manifest = json.loads(path.read_text())
        assert verify_exactness_manifest(manifest) == [], path
        assert controls_without_teeth(manifest) == [], path
        claimed.append("must_differ" in manifest["settings"])
    assert any(claimed) and not all(claimed)  # both kinds are committed, so both are checked
