"""The cost rows of the portable pins: pins alternate in fresh processes, cells are medians, ratios are portable over
native, and the table shows what was not measured as such."""

from __future__ import annotations

from graftbench.bench import portable_cost


def test_pins_alternate_and_cells_are_medians_with_portable_over_native_ratios(monkeypatch):
    order = []
    speeds = {"native": iter([100.0, 90.0, 110.0]), "portable": iter([50.0, 60.0, 40.0])}

    def probe(engine, pin, model, prompt, decode, threads, problems):
        order.append(pin)
        value = next(speeds[pin])
        return {"pin": pin, "cpu_capability": pin, "prompt_tokens": prompt, "prefill_tok_per_s": value,
                "decode_tok_per_s": value / 10, "graft_plus_one_s": 1.0 if pin == "native" else 2.0}

    monkeypatch.setattr(portable_cost, "probe_in_subprocess", probe)
    result = portable_cost.measure([("llama.cpp", "smollm2-135m")], "p.jsonl", repeats=3)
    assert order == ["native", "portable"] * 3
    row = result["rows"][0]
    assert (row["native"]["prefill_tok_per_s"], row["portable"]["prefill_tok_per_s"]) == (100.0, 50.0)
    assert row["prefill_tok_per_s_ratio"] == 0.5 and row["graft_plus_one_s_ratio"] == 2.0
    table = portable_cost.markdown(result)
    assert "| llama.cpp | smollm2-135m | 100.0 | 50.0 | 0.50× | 10.0 | 5.0 | 0.50× | 1.000 | 2.000 |" in table


def test_a_row_without_a_graft_figure_says_not_measured(monkeypatch):
    monkeypatch.setattr(portable_cost, "probe_in_subprocess", lambda engine, pin, *a: {
        "pin": pin, "cpu_capability": "AVX2", "prompt_tokens": 8, "prefill_tok_per_s": 4.0, "decode_tok_per_s": 2.0,
        "graft_plus_one_s": None})
    result = portable_cost.measure([("torch", "smollm2-135m")], "p.jsonl", repeats=1)
    assert result["rows"][0]["graft_plus_one_s_ratio"] is None
    assert portable_cost.markdown(result).rstrip().endswith("| n/a | n/a |")
