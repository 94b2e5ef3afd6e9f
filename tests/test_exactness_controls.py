"""check-exact's controls can fail: each control an engine claims moves the logits' bytes, and one flipped bit of one
restored key (the sensitivity control) is seen, on the torch engine and on the llama.cpp engine.

The layout tests build llama.cpp sequence states by hand (no llama.cpp needed); the llama.cpp model tests run
smollm2-135m through llama.cpp as built here on real AIME 2024 text and compare hashes measured here, so no figure
recorded on another CPU is expected.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from graftbench.engine.llama_state_layout import (GGML_F16, GGML_Q8_0, SEQ_STATE_MAGIC, flip_key_bit, key_bit,
                                                  parse_state)

from .conftest import AIME2024
from .prereqs import need


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


@pytest.mark.parametrize("damage", [lambda s: s[:-1], lambda s: s + b"\0", lambda s: s + b"\0" * 4,
                                    lambda s: s[:20], lambda s: b"", lambda s: b"\0" + s[1:]])
def test_a_state_that_does_not_follow_the_layout_to_its_end_is_refused(damage):
    with pytest.raises(ValueError):
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
    from graftbench.engine import forward, graft
    from graftbench.eval.exactness import _fresh, graft_pair

    pair = _short_pair(session, aime2024)
    _, grafted, artifact = graft_pair(session, pair)
    fresh = forward.logits_sha256(_fresh(session, pair.artifact, pair.query))
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
    from graftbench.eval.exactness import _fresh, controls, graft_pair

    pair = _short_pair(session, aime2024)
    _, _, artifact = graft_pair(session, pair)
    results = controls(session, pair, _fresh(session, pair.artifact, pair.query), artifact)
    assert {"monolithic", "key-bit-flip", "shift-8", "shift-128", "shift-1024"} <= set(results)
    for name in ("monolithic", "key-bit-flip", "shift-8", "shift-128", "shift-1024"):
        assert not results[name]["equal"] and results[name]["max_abs_delta"] > 0, name
