"""The llama.cpp engine's per-op trace (graftbench/engine/llama_cpp/layer_trace.py): two traces of one run are equal,
the eval callback only reads (the traced logits and KV cells are the untraced ones byte for byte), an altered step
is named by ``trace-compare``, and ``trace-pair --engine llama.cpp`` writes a trace.

smollm2-135m on llama.cpp as built here, one thread, batches of 8 tokens (several micro-batches per segment), short
token lists: every hash is compared with one measured in the same process, nothing recorded on another CPU.
"""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.eval import layer_trace

from tests.conftest import AIME2024
from tests.prereqs import llama_missing, need

CHUNK = 8


def _open(kv_type: str = "f16"):
    from graftbench.engine.llama_cpp.session import open_llama_session

    return open_llama_session("smollm2-135m", chunk_size=CHUNK, threads=1, n_ctx=512, kv_type=kv_type,
                              flash_attn=kv_type != "f16")


@pytest.fixture(scope="module")
def llama():
    """smollm2-135m on llama.cpp: f16 KV cache, flash attention off, one thread, chunks of ``CHUNK`` tokens."""
    need("llama.cpp", llama_missing())
    return _open()


@pytest.fixture(scope="module")
def pair(llama):
    """A short (artifact, query) of AIME 2024 text: 30 and 11 tokens (4 and 2 micro-batches)."""
    first, second = (json.loads(line) for line in AIME2024.read_text().splitlines()[:2])
    artifact = llama.engine.tokenize(f"Problem: {first['problem']}")[:30]
    query = llama.engine.tokenize(f"Problem: {second['problem']}")[:11]
    return artifact, query


def _document(steps: list[dict]) -> dict:
    return {"schema": layer_trace.SCHEMA, "pin": {}, "pair": {"id": "p", "tokens_sha256": "t"}, "environment": {},
            "steps": steps}


def _untraced(session, artifact, query) -> tuple[str, list[dict]]:
    """The query's logits hash and the K and V steps of the same pair with no callback set."""
    from graftbench.engine.llama_cpp.exactness import deposit_state, fresh_logits
    from graftbench.engine.llama_cpp.layer_trace import _kv_steps

    logits = fresh_logits(session, artifact, query)
    assert logits.shape == (len(query), session.engine.n_vocab)
    return session.logits_sha256(logits), _kv_steps(deposit_state(session, artifact).state)


@pytest.mark.model
def test_two_traces_of_one_run_are_equal_and_cover_every_layer(llama, pair):
    artifact, query = pair
    first, second = llama.layer_trace(*pair), llama.layer_trace(*pair)
    assert layer_trace.first_difference(_document(first), _document(second)) is None
    ops = [step["op"] for step in first]
    layers = sum(op.startswith("kv.") and op.endswith(".k") for op in ops)
    assert layers == 30  # smollm2-135m's layers, each with its K and V
    for layer in range(layers):
        assert f"l_out-{layer} ADD" in ops and f"kv.{layer}.k" in ops and f"kv.{layer}.v" in ops
    assert ops[-1] == "logits.query" and first[-1]["shape"] == [len(query), llama.engine.n_vocab]
    # one step per micro-batch: the artifact's 4 (30 tokens in 8s) and the query's 2 (11 tokens)
    assert [step["call"] for step in first if step["op"] == "l_out-0 ADD"] == list(range(6))
    assert not [step for step in first if step.get("skipped") or not step["output_sha256"]]
    assert len({step["output_sha256"] for step in first}) > len(first) // 2  # not one constant


@pytest.mark.model
@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
def test_the_trace_only_reads_its_logits_and_kv_cells_are_the_untraced_ones(llama, pair, kv_type):
    session = llama if kv_type == "f16" else _open(kv_type)  # q8_0: flash attention on, another graph
    steps = session.layer_trace(*pair)
    logits, kv = _untraced(session, *pair)
    assert steps[-1]["output_sha256"] == logits
    assert [step for step in steps if step["op"].startswith("kv.")] == kv
    assert {step["dtype"] for step in kv} == {kv_type}


@pytest.mark.model
def test_trace_compare_names_the_op_whose_hash_was_changed(llama, pair, tmp_path):
    steps = llama.layer_trace(*pair)
    ops = [step["op"] for step in steps]
    where = [i for i, op in enumerate(ops) if op == "kqv_out-14 CONT"][1]  # its second micro-batch
    altered = copy.deepcopy(steps)
    altered[where]["output_sha256"] = "0" * 64
    layer_trace.write_trace(tmp_path / "a.json", _document(steps))
    layer_trace.write_trace(tmp_path / "b.json", _document(altered))
    result = CliRunner().invoke(app, ["trace-compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert result.exit_code == 1, result.output
    assert f"first difference at step {where}: kqv_out-14 CONT (call 1" in " ".join(result.output.split())
    assert "from equal inputs" in result.output


@pytest.mark.model
def test_trace_pair_on_the_llama_cpp_engine_writes_a_trace(tmp_path):
    rows = [json.loads(line) for line in AIME2024.read_text().splitlines()[:2]]
    problems = tmp_path / "short.jsonl"
    problems.write_text("".join(json.dumps({**row, "solution": row["solution"][:120]}) + "\n" for row in rows))
    out = tmp_path / "trace.json"
    result = CliRunner().invoke(app, ["trace-pair", "--engine", "llama.cpp", "--chunk-size", "64", "--threads", "1",
                                      "--problems", str(problems), "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = layer_trace.read_trace(out)
    assert document["pin"]["engine"]["engine"] == "llama.cpp" and document["pin"]["chunk_size"] == 64
    assert document["steps"][-1]["op"] == "logits.query" and "kv.29.v" in [s["op"] for s in document["steps"]]
    assert f"{len(document['steps'])} steps of {document['pair']['id']} written" in " ".join(result.output.split())
    refused = CliRunner().invoke(app, ["trace-pair", "--engine", "llama.cpp", "--isa", "avx2", "--problems",
                                       str(problems), "--out", str(tmp_path / "no.json")])
    assert refused.exit_code == 2 and "--isa" in refused.output and not (tmp_path / "no.json").exists()


@pytest.mark.model
def test_an_error_inside_the_callback_is_raised_after_the_decode(llama, pair, monkeypatch):
    from graftbench.engine.llama_cpp import layer_trace as llama_trace

    def refuse(self, address, tensor):
        raise RuntimeError("layout refused")

    monkeypatch.setattr(llama_trace.OpRecorder, "_check_layout", refuse)
    with pytest.raises(RuntimeError, match="layout refused"):
        llama.layer_trace(*pair)
