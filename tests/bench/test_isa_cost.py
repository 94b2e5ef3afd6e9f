"""The cost of ``--isa avx2`` against native (``graftbench bench-isa``): pins alternate in fresh processes, cells
are medians, ratios are avx2 over native (the same alternation and cells as :mod:`graftbench.bench.portable_cost`)."""

from __future__ import annotations

from graftbench.bench import isa_cost


def test_pins_alternate_per_dtype_and_cells_are_medians_with_avx2_over_native_ratios(monkeypatch):
    order, after = [], []
    speeds = {"native": iter([100.0, 90.0, 110.0, 10.0]), "avx2": iter([50.0, 60.0, 40.0, 5.0])}

    def probe(isa, model, dtype, prompt, decode, threads, problems):
        order.append((dtype, isa))
        value = next(speeds[isa])
        return {"isa": isa, "cpu_capability": isa.upper(), "dtype": dtype, "prefill_tok_per_s": value,
                "decode_tok_per_s": value / 10}

    monkeypatch.setattr(isa_cost, "probe_in_subprocess", probe)
    result = isa_cost.measure("smollm2-135m", ["float32", "bfloat16"], "p.jsonl", repeats=2,
                              on_probe=lambda: after.append(len(order)))
    assert order == [(d, isa) for d in ("float32", "bfloat16") for _ in range(2) for isa in ("native", "avx2")]
    assert after == [1, 2, 3, 4, 5, 6, 7, 8]  # called after each probe, with nothing
    first = result["rows"][0]
    assert first["native"] == {"cpu_capability": "NATIVE", "prefill_tok_per_s": 95.0, "decode_tok_per_s": 9.5,
                               "runs": first["native"]["runs"]} and len(first["native"]["runs"]) == 2
    assert first["prefill_ratio"] == 55.0 / 95.0 and first["decode_ratio"] == 5.5 / 9.5
    result["environment"] = {"cpu_model": "AMD EPYC", "cpu_capability_native": "AVX512"}
    assert "| float32 | 95.0 | 55.0 | 0.58× | 9.5 | 5.5 | 0.58× |" in isa_cost.markdown(result)
