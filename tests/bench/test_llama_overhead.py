"""bench-llama's rows (graftbench/bench/llama_overhead.py, llama_raw.py, overhead.py) on smollm2-135m with small sizes:
what each row computes and that both sides ran the same tokens, not how fast they are (speed belongs to the
committed benchmark files). The llama.cpp state container's fast read (parse_state) without a model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.store.codec import ArtifactError
from graftbench.store.llama_state import decode_state, encode_state, parse_state
from graftbench.store.ids import artifact_id_of

from tests.conftest import AIME2024
from tests.prereqs import llama_missing, need

runner = CliRunner()


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    need("llama.cpp", llama_missing())
    from graftbench.bench.overhead import run_engine_bench
    from graftbench.bench.llama_overhead import LlamaBenchSettings
    from graftbench.problems.loading import load_problems

    settings = LlamaBenchSettings(sizes=(96, 160), prefill_tokens=48, decode_tokens=6, repeats=2)
    steps = []
    done = run_engine_bench("smollm2-135m", load_problems(str(AIME2024)), str(AIME2024), settings, 1,
                            ["f16", "f16+fa", "q8_0"], (96,), steps.append)
    done["steps"] = steps
    return done


@pytest.mark.model
def test_both_sides_run_the_same_tokens_and_the_graft_gives_the_prefills_logits(result):
    llama = result["llama_cpp"]
    assert llama["decode"]["same_tokens"] is True  # our greedy loop and llama.cpp's greedy sampler agree
    assert [row["tokens"] for row in llama["state"]] == [96, 160]
    for row in llama["state"]:
        # the graft, llama.cpp's own state load and a fresh prefill give the query the same logits bytes
        assert row["logits_equal"] is True
        assert row["ratio"] == row["graft_1tok_s"]["median"] / row["llama_cpp_load_1tok_s"]["median"]
        assert row["ttft_ratio"] == row["prefill_1tok_s"]["median"] / row["graft_1tok_s"]["median"]
        assert row["graft_1tok_s"]["n"] == row["llama_cpp_load_1tok_s"]["n"] == 2
        assert row["artifact_bytes"] > row["state_file_bytes"] * 0.9
        # both zero a used context first: graftbench beside its read, llama.cpp inside its timed load
        assert 0 < row["graft_parts"]["clear_s"]["median"] < row["graft_1tok_s"]["median"]
        assert 0 < row["llama_cpp_clear_s"]["median"] < row["llama_cpp_load_s"]["median"]
        assert row["graft_parts"]["clear_s"]["n"] == row["llama_cpp_clear_s"]["n"] == 2
    assert result["torch"]["state"][0]["logits_equal"] is True


@pytest.mark.model
def test_the_decode_bound_is_the_empty_rate_scaled_by_weight_over_weight_and_cache_bytes(result):
    rows = result["llama_cpp"]["decode_after_graft"]
    assert [(r["kv_type"], r["flash_attn"]) for r in rows] == [("f16", False), ("f16", True), ("q8_0", True)]
    for row in rows:
        w, c = row["weight_bytes"], row["cache_bytes"]
        assert 50e6 < w < 300e6 and 0 < c < w  # smollm2-135m as its GGUF stores it; 160 tokens of KV cache
        assert row["context_tokens"] == 160
        assert row["bound_tok_per_s"] == pytest.approx(row["empty_cache_tok_per_s"]["median"] * w / (w + c))
        assert row["of_bound"] == pytest.approx(row["after_graft_tok_per_s"]["median"] / row["bound_tok_per_s"])
        raw = row["llama_cpp_after_load_tok_per_s"]
        assert raw["n"] == row["after_graft_tok_per_s"]["n"] == row["empty_cache_tok_per_s"]["n"] == 2
        assert row["ratio_to_llama_cpp"] == pytest.approx(row["after_graft_tok_per_s"]["median"] / raw["median"])
        assert row["llama_cpp_of_bound"] == pytest.approx(raw["median"] / row["bound_tok_per_s"])
    f16, f16_fa, q8 = rows
    assert q8["cache_bytes"] < 0.6 * f16["cache_bytes"]  # q8_0: 34 bytes per 32 values against 64
    assert f16_fa["cache_bytes"] == pytest.approx(f16["cache_bytes"], rel=0.01)  # the same f16 cells, V untransposed


@pytest.mark.model
def test_llama_cpp_decodes_the_same_greedy_tokens_after_its_state_load_as_graftbench_after_its_graft(tmp_path):
    """The decode-after-graft row's two sides run the same computation: graftbench's greedy loop after its graft and
    llama.cpp's greedy sampler after ``llama_state_seq_load_file`` of a state saved from that graft."""
    from graftbench.bench.llama_overhead import deposit_state
    from graftbench.bench.llama_raw import RawLlama
    from graftbench.engine.llama_cpp import decode as llama_decode
    from graftbench.engine.llama_cpp.session import open_llama_session
    from graftbench.problems.loading import load_problems

    session = open_llama_session("smollm2-135m", chunk_size=64, threads=1, n_ctx=512)
    problem = load_problems(str(AIME2024), limit=1)[0]
    ids = session.tokenizer(problem.solution, add_special_tokens=False).input_ids[:200]
    raw = RawLlama(session.engine)
    try:
        store, artifact_id, state_file = deposit_state(session, raw, tmp_path, ids[:-1])
        _, theirs = raw.load_state_and_decode(state_file, len(ids) - 1, ids[-1], 8)
        grafted = session.graft(store, artifact_id, room=9)
        logits = session.prefill_after(grafted.cache, [ids[-1]])
        ours = llama_decode.decode(session.engine, session.tokenizer, grafted.cache, logits, 8, set()).token_ids
        grafted.cache.close()
    finally:
        raw.close()
        session.engine.close()
    assert len(theirs) == 8 and ours == theirs


@pytest.mark.model
def test_the_result_reports_every_step_and_renders_as_tables(result):
    from graftbench.bench.overhead import markdown, steps
    from graftbench.bench.llama_overhead import LlamaBenchSettings

    settings = LlamaBenchSettings(sizes=(96, 160), prefill_tokens=48, decode_tokens=6, repeats=2)
    assert len(result["steps"]) == steps(settings, ["f16", "f16+fa", "q8_0"], (96,))
    text = markdown(result)
    assert "| graft + 1 token vs state load + 1 token at 160 (ms) |" in text
    assert "| q8_0 (flash attention) | 160 |" in text and "| f16 | 160 |" in text
    assert "| f16 (flash attention) | 160 |" in text and "| graft + 1 token at 96 (ms) |" in text
    assert result["environment"]["system_info"].startswith("CPU :")


def test_a_run_at_another_thread_count_gets_files_of_its_own():
    from graftbench.bench.llama_overhead import result_name

    assert result_name("qwen2.5-coder-1.5b", 1) == "llama-engine-qwen2.5-coder-1.5b"
    assert result_name("qwen2.5-coder-1.5b", 2) == "llama-engine-qwen2.5-coder-1.5b-threads-2"


@pytest.mark.parametrize("kv_types", ["q8_0,f16", "f16,q5_1", "f16,f16+fa,f16+fa", "f16,q8_0+fa"])
def test_bench_llama_refuses_kv_types_that_do_not_start_with_f16_or_name_an_unknown_variant(tmp_path, kv_types):
    done = runner.invoke(app, ["bench-llama", "--model", "smollm2-135m", "--kv-types", kv_types,
                               "--out", str(tmp_path)])
    assert done.exit_code == 2 and "--kv-types must start with f16" in done.output and repr(kv_types) in done.output
    assert list(tmp_path.iterdir()) == []


def _container(ids=(1, 2, 3), state=b"\x00\x01\x02\x03state"):
    data = encode_state({"model": "m"}, list(ids), state)
    return artifact_id_of(data), data


def test_the_fast_read_parses_views_of_the_bytes_and_the_full_read_checks_the_hashes():
    artifact_id, data = _container()
    header, token_ids, state = parse_state(artifact_id, data)
    assert token_ids.tolist() == [1, 2, 3] and bytes(state) == b"\x00\x01\x02\x03state"
    assert state.obj is data  # a view, not a copy
    assert decode_state(artifact_id, data)[1] == [1, 2, 3]
    with pytest.raises(ArtifactError, match="hash"):
        decode_state("0" * 64, data)


@pytest.mark.parametrize("edit, check", [
    (lambda t: t.update(extra={"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}), "tensors"),
    (lambda t: t["state"].update(dtype="I64"), "tensors"),
    (lambda t: t["token_ids"].update(shape=[2]), "tensors"),
    (lambda t: t["state"].update(data_offsets=[24, 30]), "tensors"),
])
def test_the_fast_read_refuses_a_container_whose_tensors_are_not_token_ids_and_state(edit, check):
    _, data = _container()
    length = int.from_bytes(data[:8], "little")
    table = json.loads(data[8:8 + length])
    edit(table)
    header = json.dumps(table).encode()
    forged = len(header).to_bytes(8, "little") + header + data[8 + length:]
    with pytest.raises(ArtifactError) as refused:
        parse_state(artifact_id_of(forged), forged)
    assert refused.value.check == check


def test_the_fast_read_refuses_positions_that_do_not_match_the_token_ids():
    data = encode_state({"model": "m"}, [5, 6], b"xy")
    length = int.from_bytes(data[:8], "little")
    table = json.loads(data[8:8 + length])
    inner = json.loads(table["__metadata__"]["graftbench"])
    table["__metadata__"]["graftbench"] = json.dumps({**inner, "positions": [0, 3]})
    header = json.dumps(table).encode()
    forged = len(header).to_bytes(8, "little") + header + data[8 + length:]
    with pytest.raises(ArtifactError, match="positions"):
        parse_state(artifact_id_of(forged), forged)
    assert np.frombuffer(data[-2:], dtype=np.uint8).tolist() == [120, 121]


def _speed_table(doc: str, caption: str) -> dict[str, list[str]]:
    """The rows (cells by row name) of the first table after the line that starts with ``caption``."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(caption))
    table = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return {line.split(" | ")[0]: line.split(" | ") for line in table}


# Each speed table in docs/llama-cpp.md: the line its caption starts with, the kind of machine, its columns.
SPEED_TABLES = [("On the 2-core AMD EPYC, one thread, chunk 256", "amd-epyc-avx512", {"smollm2-135m": 1, "qwen2.5-coder-1.5b": 2}),
                ("On the 2-core Intel Xeon", "intel-xeon-amx", {"smollm2-135m": 1, "qwen2.5-coder-1.5b": 2})]


@pytest.mark.parametrize("caption, kind, model, column",
                         [(caption, kind, model, column) for caption, kind, columns in SPEED_TABLES
                          for model, column in columns.items()])
def test_the_docs_llama_speed_tables_are_the_committed_benchmark_files(caption, kind, model, column):
    from tests.conftest import ROOT

    result = json.loads((ROOT / "results" / kind / "bench" / f"llama-engine-{model}.json").read_text())
    rows = _speed_table((ROOT / "docs" / "llama-cpp.md").read_text(), caption)
    decode, state = result["llama_cpp"]["decode"], result["llama_cpp"]["state"]
    assert f"**{decode['ratio']:.2f}×**" in rows["| decode, graftbench against llama.cpp"][column]
    for row in state:
        cell = rows[f"| graft + 1 token against state load + 1 token, {row['tokens']:,} tokens"][column]
        assert cell.startswith(f"{row['graft_1tok_s']['median'] * 1e3:.1f} against "
                               f"{row['llama_cpp_load_1tok_s']['median'] * 1e3:.1f} ms, **{row['ratio']:.2f}×**")
        assert row["logits_equal"] is True
    f16 = result["llama_cpp"]["decode_after_graft"][0]
    assert f"**{f16['of_bound']:.2f}** of it" in rows["| decode after an 8,192-token graft, f16 KV cache"][column]
    assert result["environment"]["processor"].split()[0].replace("(R)", "") in caption


@pytest.mark.model
def test_a_sliding_window_model_longer_than_its_window_gets_the_rows_it_can_and_says_why(monkeypatch):
    from graftbench.bench.overhead import markdown, run_engine_bench
    from graftbench.bench.llama_overhead import LlamaBenchSettings
    from graftbench.engine.llama_cpp.engine import LlamaCppEngine
    from graftbench.problems.loading import load_problems

    original = LlamaCppEngine.__init__

    def with_window(self, *args, **kwargs):  # smollm2-135m given a 64-token window
        original(self, *args, **kwargs)
        self.n_swa = 64

    monkeypatch.setattr(LlamaCppEngine, "__init__", with_window)
    settings = LlamaBenchSettings(sizes=(96,), prefill_tokens=32, decode_tokens=4, repeats=1)
    result = run_engine_bench("smollm2-135m", load_problems(str(AIME2024)), str(AIME2024), settings, 1, ["f16"], None)
    llama = result["llama_cpp"]
    assert "state" not in llama and "64-token sliding window" in llama["skipped"]
    assert llama["decode"]["same_tokens"] is True
    assert "Not measured: state and decode-after-graft rows" in markdown(result)
