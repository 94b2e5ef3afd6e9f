"""The per-op trace of one pair: two traces of one run compare equal, and the comparison names the first op whose
bytes differ (the op itself, or the gap before it)."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.eval import layer_trace


def _trace(ops: list[str]) -> dict:
    steps = []
    previous = "in"
    for index, op in enumerate(ops):
        out = f"{index:064x}"
        steps.append({"op": op, "call": 0, "input_sha256": previous, "output_sha256": out, "shape": [1, 4],
                      "dtype": "torch.float32"})
        previous = out
    return {"schema": layer_trace.SCHEMA, "pin": {"isa": "portable"}, "pair": {"id": "pair-000", "tokens_sha256": "t"},
            "environment": {}, "steps": steps}


OPS = ["model.embed_tokens", "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj",
       "model.layers.0.mlp.down_proj", "model.layers.0", "kv.0.k", "kv.0.v", "logits.query"]


def test_two_traces_of_one_run_compare_equal_and_an_altered_hash_names_its_op():
    a = _trace(OPS)
    assert layer_trace.first_difference(a, copy.deepcopy(a)) is None
    b = copy.deepcopy(a)
    b["steps"][3]["output_sha256"] = "f" * 64
    found = layer_trace.first_difference(a, b)
    assert (found.index, found.op, found.inputs_equal) == (3, "model.layers.0.mlp.down_proj", True)
    assert "the op itself computed other bytes" in found.detail


def test_a_difference_whose_inputs_already_differed_is_placed_between_two_ops():
    a, b = _trace(OPS), _trace(OPS)
    b["steps"][2]["input_sha256"] = "e" * 64  # the attention kernel, not a module, changed o_proj's input
    b["steps"][2]["output_sha256"] = "f" * 64
    found = layer_trace.first_difference(a, b)
    assert found.op == "model.layers.0.self_attn.o_proj" and not found.inputs_equal
    assert "outside a module" in found.detail


def test_traces_that_do_not_line_up_say_so():
    found = layer_trace.first_difference(_trace(OPS), _trace(OPS[:2] + ["model.norm"] + OPS[3:]))
    assert found.index == -1 and "do not line up at step 2" in found.detail
    found = layer_trace.first_difference(_trace(OPS), _trace(OPS[:-1]))
    assert found.index == -1 and "8 steps and the other 7" in found.detail


def test_a_file_that_is_not_a_trace_is_refused_naming_it(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(layer_trace.TraceError, match="bad.json: not a layer trace"):
        layer_trace.read_trace(bad)
    good = tmp_path / "good.json"
    layer_trace.write_trace(good, _trace(OPS))
    result = CliRunner().invoke(app, ["trace-compare", str(good), str(bad)])
    assert result.exit_code == 2 and "not a layer trace" in result.output


def test_trace_compare_names_the_first_differing_op_and_exits_1(tmp_path):
    a, b = _trace(OPS), _trace(OPS)
    b["steps"][4]["output_sha256"] = "f" * 64
    layer_trace.write_trace(tmp_path / "a.json", a)
    layer_trace.write_trace(tmp_path / "b.json", b)
    result = CliRunner().invoke(app, ["trace-compare", str(tmp_path / "a.json"), str(tmp_path / "a.json")])
    assert result.exit_code == 0 and "equal: all 8 steps" in result.output
    result = CliRunner().invoke(app, ["trace-compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert result.exit_code == 1 and "step 4: model.layers.0 (call 0" in result.output


def test_the_markdown_comparison_shows_the_steps_around_the_difference_and_each_traces_machine(tmp_path):
    a, b = _trace(OPS), _trace(OPS)
    b["steps"][4]["output_sha256"] = "f" * 64
    b["provenance"] = {"created_utc": "2026-12-05T19:43:12Z", "code": {"version": "0.1.0", "commit": "b" * 40},
                       "machine": {"cpu_model": "AMD EPYC", "cpu_capability_native": "AVX512", "emulated": {
                           "seen": "GenuineIntel <b>Haswell</b>", "host": "AuthenticAMD AMD EPYC"}}}
    page = layer_trace.comparison_markdown(a, b, ("here", "there"))
    assert "First difference at step 4: model.layers.0 (call 0" in page
    rows = [line for line in page.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 2", "| 3", "| 4", "| 5", "| 6", "| 7"]
    assert rows[3].split(" | ")[4:6] == [f"{4:064x}"[:12], "f" * 12] and rows[2].split(" | ")[4] == rows[2].split(" | ")[5]
    assert "GenuineIntel &lt;b&gt;Haswell&lt;/b&gt;, emulated on a host with AMD EPYC" in page  # data, not markup
    assert "Equal: all 8 steps" in layer_trace.comparison_markdown(a, copy.deepcopy(a))
    layer_trace.write_trace(tmp_path / "a.json", a)
    layer_trace.write_trace(tmp_path / "b.json", b)
    result = CliRunner().invoke(app, ["trace-compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                                      "--markdown", str(tmp_path / "out" / "cmp.md")])
    assert result.exit_code == 1 and (tmp_path / "out" / "cmp.md").read_text() == layer_trace.comparison_markdown(a, b)


@pytest.mark.model
def test_two_traces_of_a_real_pair_are_equal_and_cover_every_layer_and_its_kv(session, aime2024):
    first = layer_trace.trace_session_pair(session, aime2024, 0)
    second = layer_trace.trace_session_pair(session, aime2024, 0)
    assert layer_trace.first_difference(first, second) is None
    ops = [s["op"] for s in first["steps"]]
    layers = session.model.config.num_hidden_layers
    assert all(f"model.layers.{i}" in ops and f"kv.{i}.k" in ops and f"kv.{i}.v" in ops for i in range(layers))
    assert ops[-1] == "logits.query" and first["pin"]["fingerprint"] == session.config.fingerprint
    assert set(first["provenance"]) == {"created_utc", "code", "machine"}  # a trace says its date, code and machine
    altered = copy.deepcopy(second)
    where = ops.index(f"model.layers.{layers // 2}.self_attn.o_proj")
    altered["steps"][where]["output_sha256"] = "0" * 64
    found = layer_trace.first_difference(first, altered)
    assert (found.index, found.op) == (where, f"model.layers.{layers // 2}.self_attn.o_proj")


@pytest.mark.model
def test_a_trace_against_an_expectation_on_another_problem_set_is_not_comparable(session, aime2024):
    """Refused before any pair is built or traced, naming both problem-set SHA-256s."""
    from tests.conftest import REFERENCE_MANIFESTS

    expected = json.loads((REFERENCE_MANIFESTS / "exact-smollm2-135m.json").read_text())
    with pytest.raises(ValueError, match=r"not comparable: the problems are not the set the expectation was recorded"):
        layer_trace.trace_session_pair(session, aime2024[1:], 0, expected)
    with pytest.raises(ValueError, match=r"the expectation holds 50 pairs; pair 50 is past its last"):
        layer_trace.trace_session_pair(session, aime2024, 50, expected)  # the recorded set, a pair past its last
