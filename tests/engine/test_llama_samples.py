"""N samples decoded together on the llama.cpp engine (graftbench/engine/llama_cpp/fanout.py, decode.py, session.py)
and the restore's pin apart from the receiving context's size (graftbench/engine/llama_cpp/codec.py).

The layout tests build sequence states from bytes (no llama.cpp needed); the model tests run smollm2-135m on llama.cpp
as built on this machine, one thread, small chunks, and compare what this machine computes with itself.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace

import numpy as np
import pytest

from graftbench.engine.llama_cpp.state_layout import SEQ_STATE_MAGIC, in_streams, parse_state
from graftbench.store.codec import ArtifactError

from tests.conftest import AIME2024
from tests.prereqs import llama_missing, need

CHUNK = 32


def _state(cells: int = 2, seq: int = 0, row: int = 4) -> bytes:
    """A one-stream, one-layer f16 sequence state of ``cells`` cells of sequence ``seq``, in llama.cpp's layout."""
    meta = b"".join(struct.pack("<iIi", pos, 1, seq) for pos in range(cells))
    keys = struct.pack("<iQ", 1, row) + bytes(range(cells * row))
    values = struct.pack("<iQ", 1, row) + bytes(range(100, 100 + cells * row))
    return struct.pack("<Ii", SEQ_STATE_MAGIC, seq) + struct.pack("<II", 1, cells) + meta + \
        struct.pack("<II", 0, 1) + keys + values


def test_a_state_widened_to_several_streams_keeps_its_cells_and_empties_the_others():
    state = _state()
    wide = in_streams(state, 3)
    block = state[12:]  # the stream: its cell count, cells, keys and values
    assert wide == state[:8] + struct.pack("<I", 3) + block + struct.pack("<II", 0, 0)
    assert in_streams(state, 1) == state
    assert in_streams(state, 3, stream=2, seq_id=2) == _state(seq=2)[:8] + struct.pack("<III", 3, 0, 0) + \
        _state(seq=2)[12:]
    assert [k.positions for k in parse_state(wide)] == [(0, 1)]
    with pytest.raises(ValueError, match="several streams"):
        in_streams(wide, 2)
    with pytest.raises(ValueError, match="stream 3 of 3"):
        in_streams(state, 3, stream=3)
    with pytest.raises(ValueError):
        in_streams(state[:-1], 2)


def _config(n_ctx: int = 8192, **engine):
    from graftbench.engine.pin import PinnedConfig
    from graftbench.problems.prompts import PromptLayout

    fields = {"engine": "llama.cpp", "n_batch": 64, "n_ubatch": 64, "n_ctx": n_ctx, "type_k": "f16",
              "type_v": "f16", "flash_attn": False, **engine}
    return PinnedConfig(model="m", weights_sha256="w" * 64, tokenizer_sha256="t" * 64, dtype="gguf", device="cpu",
                        threads=1, attn_implementation="llama.cpp", chunk_size=64, layout=PromptLayout(),
                        engine=fields)


def test_a_restore_compares_every_pin_field_but_the_receiving_contexts_size():
    from graftbench.engine.llama_cpp.codec import check_pin, pin_header

    header = pin_header(_config(8192))
    check_pin("a" * 64, header, _config(8192))
    check_pin("a" * 64, header, _config(16384))  # a larger context receives it
    check_pin("a" * 64, header, _config(1024))  # so does a smaller one (its room is the graft's own check)
    assert _config(16384).fingerprint != _config(8192).fingerprint  # the run's pin still records its size
    for other in (_config(16384, type_k="q8_0"), _config(8192, flash_attn=True), replace(_config(), chunk_size=32),
                  replace(_config(16384), threads=2)):
        with pytest.raises(ArtifactError) as caught:
            check_pin("a" * 64, header, other)
        assert caught.value.check == "config"


# ------------------------------------------------------------------------------------ on llama.cpp


@pytest.fixture(scope="module")
def llama():
    """smollm2-135m on llama.cpp: f16 KV cache, flash attention off, one thread, chunks of ``CHUNK`` tokens."""
    need("llama.cpp", llama_missing())
    from graftbench.engine.llama_cpp.session import open_llama_session

    return open_llama_session("smollm2-135m", chunk_size=CHUNK, threads=1, n_ctx=512)


@pytest.fixture(scope="module")
def text(llama):
    """150 token ids of an AIME 2024 problem and its solution (graftbench's tokenizer)."""
    row = json.loads(AIME2024.read_text().splitlines()[0])
    return llama.tokenizer(f"Problem: {row['problem']}\nSolution: {row['solution']}").input_ids[:150]


def _captured(engine, ids):
    cache = engine.new_cache()
    try:
        engine.prefill(cache, ids)
        return engine.capture(cache)
    finally:
        cache.close()


@pytest.mark.model
def test_a_state_restores_byte_exact_into_a_larger_context_of_several_sequences(llama, text):
    from graftbench.engine.llama_cpp.engine import LlamaCppEngine
    from graftbench.engine.llama_cpp.fanout import fan_out

    small = LlamaCppEngine(llama.engine.gguf_path, n_ctx=256, chunk_size=CHUNK, threads=1,
                           weights_sha256=llama.engine.weights_sha256)
    try:
        state = _captured(small, text)  # captured in a context of 256 cells, one sequence
    finally:
        small.close()
    query = text[:12]
    sequences = fan_out(llama.engine, state, 4, room=400)  # 4 streams of 768 cells
    try:
        assert sequences.cells == 768 and sequences.cells * sequences.count > 256
        rows = [sequences.step({seq: token for seq in range(4)}) for token in query]
    finally:
        sequences.close()
    fresh = llama.engine.new_cache()  # a fresh prefill in the same batches: the chunks, then one token at a time
    try:
        llama.engine.prefill(fresh, text)
        expected = [llama.engine.prefill(fresh, [token], 1) for token in query]
    finally:
        fresh.close()
    for step, want in zip(rows, expected):
        for seq in range(4):
            assert llama.logits_sha256(step[seq]) == llama.logits_sha256(want)
    assert len({llama.logits_sha256(want) for want in expected}) == len(query)


@pytest.mark.model
def test_a_session_with_a_larger_context_grafts_a_state_deposited_under_a_smaller_one(llama, text, tmp_path):
    from graftbench.engine.llama_cpp.session import open_llama_session
    from graftbench.store.folder import Store

    store = Store(tmp_path / "store")
    artifact_id = store.put(llama.build_artifact(text, {"problem_key": "k"}))
    larger = open_llama_session("smollm2-135m", chunk_size=CHUNK, threads=1, n_ctx=1024)
    assert larger.config.fingerprint != llama.config.fingerprint
    try:
        grafted = larger.graft(store, artifact_id, room=700)  # room the deposit's own context does not have
        logits = larger.prefill_after(grafted.cache, text[:9])
        grafted.cache.close()
        assert larger.logits_sha256(logits) == larger.logits_sha256(larger.recompute([text], text[:9]))
        other = replace(larger, config=replace(larger.config, chunk_size=CHUNK // 2))
        with pytest.raises(ArtifactError) as caught:
            other.graft(store, artifact_id)
        assert caught.value.check == "config"
    finally:
        larger.engine.close()


@pytest.mark.model
def test_fanned_out_sequences_hold_the_sources_state_byte_for_byte(llama, text):
    from graftbench.engine.llama_cpp.fanout import fan_out

    state = _captured(llama.engine, text)
    sequences = fan_out(llama.engine, state, 3, room=16)
    try:
        for seq in range(3):  # the same stream bytes; only the stream it lies in and the sequence id it names move
            assert sequences.state(seq) == in_streams(state.state, 3, stream=seq, seq_id=seq)
        assert sequences.lengths == [len(text)] * 3 and sequences.prefix == text
    finally:
        sequences.close()


def _samples(llama, ids, seeds, budget, eos=frozenset(), stop=None):
    from graftbench.engine.base import SamplingSettings

    cache, logits = llama.prefill_prompt(ids)
    try:
        decoded = llama.decode(cache, logits, budget, SamplingSettings(0.9, 0.95, 0), seeds, stop, 0.0)
    finally:
        cache.close()
    return decoded


@pytest.mark.model
def test_each_sample_stops_on_its_own_and_the_others_go_on_unchanged(llama, monkeypatch):
    ids = llama.solve_prompt_ids("What is 12 times 13?")
    seeds = [21, 22, 23, 24]
    monkeypatch.setattr(llama, "eos_ids", set())
    free = [d.token_ids for d in _samples(llama, ids, seeds, 16)]
    assert all(len(tokens) == 16 for tokens in free) and len({tuple(t) for t in free}) == 4
    # an end token that one sample draws early, which another never draws
    first, k = next((i, k) for k in range(2, 10) for i in range(4)
                    if free[i][k] not in free[i][:k] and any(free[i][k] not in other for other in free))
    end = free[first][k]
    monkeypatch.setattr(llama, "eos_ids", {end})
    stopped = _samples(llama, ids, seeds, 16)
    for tokens, decoded in zip(free, stopped):
        cut = tokens[:tokens.index(end) + 1] if end in tokens else tokens
        assert decoded.token_ids == cut
        assert decoded.finish_reason == ("eos" if end in tokens else "budget")
    assert stopped[first].finish_reason == "eos" and len(stopped[first].token_ids) == k + 1
    assert any(d.finish_reason == "budget" and len(d.token_ids) == 16 for d in stopped)
    # a stop string reached by one sample's text
    text = llama.tokenizer.decode(free[first][:k + 1], skip_special_tokens=True).strip()
    monkeypatch.setattr(llama, "eos_ids", set())
    by_stop = _samples(llama, ids, seeds, 16, stop=text[-3:] if len(text) >= 3 else text)
    assert by_stop[first].finish_reason == "stop" and len(by_stop[first].token_ids) <= k + 1
    for tokens, decoded in zip(free, by_stop):
        assert decoded.token_ids == tokens[:len(decoded.token_ids)]


@pytest.mark.model
def test_sample_i_of_four_equals_sample_i_decoded_alone_with_its_seed(llama):
    ids = llama.solve_prompt_ids("How many positive divisors does 360 have?")
    seeds = [101, 102, 103, 104]
    together = _samples(llama, ids, seeds, 20)
    alone = [_samples(llama, ids, [seed], 20)[0] for seed in seeds]
    assert [d.token_ids for d in together] == [d.token_ids for d in alone]
    assert [d.finish_reason for d in together] == [d.finish_reason for d in alone]
    assert len({tuple(d.token_ids) for d in together}) > 1


@pytest.mark.model
def test_the_rows_of_one_batched_step_equal_each_sequence_decoded_alone(llama, text):
    """The step-2-on logits: each sequence's row of an N-sequence batch, its own tokens at its own positions, against
    the same tokens decoded alone in the engine's own context (the non-unified cache: one stream per sequence)."""
    from graftbench.engine.llama_cpp.fanout import fan_out

    state = _captured(llama.engine, text)
    tokens = [[text[(7 * step + 13 * seq) % len(text)] for seq in range(6)] for step in range(6)]
    sequences = fan_out(llama.engine, state, 6, room=16)
    try:  # 6 sequences: a call of MAX_BATCH (4), then one of 2, per step
        rows = [sequences.step(dict(enumerate(step))) for step in tokens]
        narrower = [sequences.step({seq: 1 + seq}) for seq in (0, 2)]  # widths 1 after 6
    finally:
        sequences.close()
    for seq in range(6):
        alone = llama.engine.restore(state)
        try:
            own = [llama.engine.decode_step(alone, step[seq]) for step in tokens]
            if seq in (0, 2):
                assert np.array_equal(llama.engine.decode_step(alone, 1 + seq), narrower[seq // 2][0])
        finally:
            alone.close()
        assert all(np.array_equal(row[seq], mine) for row, mine in zip(rows, own))


@pytest.mark.model
def test_an_interrupted_sampled_run_resumes_to_the_same_samples_and_manifest(llama, tmp_path):
    from graftbench.eval.eval_run import run_eval
    from graftbench.problems.builtin import builtin_problems
    from graftbench.settings import EvalSettings

    problems = builtin_problems()[:2]
    settings = EvalSettings(max_new_tokens=12, samples=3, temperature=0.8, top_p=0.95, seed=5)
    whole = run_eval(llama, problems, "builtin", "whole", settings, runs_root=tmp_path)
    seen = []

    def cut(sample):
        seen.append(sample)
        if len(seen) == 4:  # problem 0's three samples and one of problem 1's
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_eval(llama, problems, "builtin", "cut", settings, runs_root=tmp_path, on_sample=cut)
    resumed = run_eval(llama, problems, "builtin", "cut", settings, runs_root=tmp_path)

    def stable(manifest):
        timing = {"wall_s", "energy_j", "ttft_s", "program_s", "certify_s"}
        return [{k: v for k, v in s.items() if k not in timing} for s in manifest["samples"]]

    assert stable(resumed.manifest) == stable(whole.manifest) and len(stable(whole.manifest)) == 6
    assert {k: v for k, v in resumed.manifest.items() if k in ("config", "config_fingerprint", "settings")} == \
        {k: v for k, v in whole.manifest.items() if k in ("config", "config_fingerprint", "settings")}


@pytest.mark.model
def test_the_samples_bench_rows_compare_the_same_tokens_and_keep_their_prefixes(llama, text, tmp_path, monkeypatch):
    from graftbench.bench import llama_samples as bench

    settings = bench.SamplesBenchSettings(widths=(1, 2), graft_tokens=64, tokens=3, repeats=1)
    query = llama.solve_prompt_ids("What is 6 times 7?")
    result = bench.run_model(llama, text, query, settings, keep=tmp_path)
    rows = result["rows"]
    assert [(r["prefix"], r["width"]) for r in rows] == [("graft", 1), ("graft", 2), ("prompt", 1), ("prompt", 2)]
    for row in rows:  # the sides decode the same tokens: sampled as the sequential path, greedy as llama.cpp
        assert row["batched_equals_sequential"] and row["greedy_equals_reference"] and row["batched_repeats_equal"]
        assert all(row[side]["decode_tok_per_s"]["median"] > 0 for side in bench.SIDES)
        assert row["kv_bytes_batched"] > 0 and row["kv_bytes_sequential"] > 0
    widths = result["width_dependence"]
    assert [d["width"] for d in widths] == list(range(1, 9)) and all(d["non_unified"]["rows_equal"] for d in widths)
    assert "| graft (" in bench.markdown({"model": "smollm2-135m", "threads": 1, "chunk_size": CHUNK,
                                         "environment": {"processor": "cpu", "cpu_count": 2, "system_info": "s",
                                                         "llama_cpp_python": "v", "date": "d",
                                                         "graftbench_commit": None},
                                         "settings": {"tokens": 3, "repeats": 1, "temperature": 0.7, "top_p": 0.95},
                                         "llama_cpp": result})
    assert len(list(tmp_path.iterdir())) == 2  # the two prefixes' states, kept
    fresh = bench.prefixes(llama, text, settings, query)  # prefilled again, nothing kept

    def no_prefill(*args, **kwargs):
        raise AssertionError("a kept prefix was prefilled again")

    monkeypatch.setattr(llama.engine, "prefill", no_prefill)
    again = bench.prefixes(llama, text, settings, query, tmp_path)
    assert [(p.kind, p.state.state, p.state.token_ids, p.last) for p in again] == \
        [(p.kind, p.state.state, p.state.token_ids, p.last) for p in fresh]
