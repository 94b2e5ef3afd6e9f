"""The cost rows of the portable pins: pins alternate in fresh processes, cells are medians, ratios are portable over
native, and the table shows what was not measured as such."""

from __future__ import annotations

import json
import subprocess

import pytest
from typer.testing import CliRunner

from graftbench.bench import portable_cost
from graftbench.cli.app import app

from ..conftest import AIME2024
from ..prereqs import need


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


def test_a_run_on_an_emulated_cpu_says_so_under_the_title():
    env = {"cpu_model": "AMD EPYC", "cpu_capability_native": "AVX512",
           "emulated": {"seen": "GenuineIntel <i>Haswell</i>", "host": "AuthenticAMD AMD EPYC"}}
    assert portable_cost.emulated_note(env) == ", emulated as GenuineIntel &lt;i&gt;Haswell&lt;/i&gt;"
    assert portable_cost.emulated_note({**env, "emulated": None}) == ""
    unchecked = {**env, "emulated": None, "emulation_unchecked": "CPUID could not be run <here>"}
    assert portable_cost.emulated_note(unchecked) == ", emulation not checked (CPUID could not be run &lt;here&gt;)"


def test_a_row_without_a_graft_figure_says_not_measured(monkeypatch):
    monkeypatch.setattr(portable_cost, "probe_in_subprocess", lambda engine, pin, *a: {
        "pin": pin, "cpu_capability": "AVX2", "prompt_tokens": 8, "prefill_tok_per_s": 4.0, "decode_tok_per_s": 2.0,
        "graft_plus_one_s": None})
    result = portable_cost.measure([("torch", "smollm2-135m")], "p.jsonl", repeats=1)
    assert result["rows"][0]["graft_plus_one_s_ratio"] is None
    assert portable_cost.markdown(result).rstrip().endswith("| n/a | n/a |")


@pytest.mark.parametrize("spec, message", [
    ("smollm2-135m", "is not ENGINE:MODEL"), (":smollm2-135m", "is not ENGINE:MODEL"),
    ("torch:", "is not ENGINE:MODEL"), ("vllm:smollm2-135m", "no engine 'vllm'")])
def test_a_row_that_is_not_a_known_engine_and_a_model_is_named(spec, message):
    with pytest.raises(ValueError, match=message):
        portable_cost.parse_rows(["torch:smollm2-135m", spec])
    assert portable_cost.parse_rows(list(portable_cost.DEFAULT_ROWS)) == [("llama.cpp", "smollm2-135m"),
                                                                           ("torch", "smollm2-135m")]


def test_bench_portable_refuses_a_bad_row_before_any_probe(monkeypatch):
    monkeypatch.setattr(portable_cost, "probe_in_subprocess", lambda *a: pytest.fail("probed"))
    result = CliRunner().invoke(app, ["bench-portable", "torch:smollm2-135m", "smollm2-135m"])
    assert result.exit_code == 2 and "'smollm2-135m' is not ENGINE:MODEL" in result.output, result.output


def test_bench_portable_names_a_model_it_cannot_load_before_any_probe(monkeypatch):
    monkeypatch.setattr(portable_cost, "probe_in_subprocess", lambda *a: pytest.fail("probed"))
    result = CliRunner().invoke(app, ["bench-portable", "torch:../no-such-model"])
    assert result.exit_code == 2 and "model '../no-such-model'" in result.output, result.output
    assert "Traceback" not in result.output


def test_a_failed_probe_is_named_by_its_last_line(monkeypatch):
    failed = subprocess.CompletedProcess([], 1, "", "Traceback (most recent call last):\n  File x\nOSError: disk full\n")
    monkeypatch.setattr(portable_cost.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(RuntimeError, match=r"^the torch probe of m \(native\) failed: OSError: disk full$"):
        portable_cost.probe_in_subprocess("torch", "native", "m", 8, 2, 1, "p.jsonl")


def test_bench_portable_writes_the_table_it_prints(monkeypatch, tmp_path):
    pins = []

    def probe(engine, pin, model, prompt, decode, threads, problems):
        pins.append((engine, pin, prompt, decode, threads))
        speed = 100.0 if pin == "native" else 50.0
        return {"pin": pin, "cpu_capability": pin, "prompt_tokens": prompt, "prefill_tok_per_s": speed,
                "decode_tok_per_s": speed / 10, "graft_plus_one_s": None}

    monkeypatch.setattr(portable_cost, "probe_in_subprocess", probe)
    result = CliRunner().invoke(app, ["bench-portable", "torch:smollm2-135m", "--prompt-tokens", "16",
                                      "--decode-tokens", "4", "--repeats", "2", "--problems", str(AIME2024),
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert pins == [("torch", "native", 16, 4, 1), ("torch", "portable", 16, 4, 1)] * 2
    written = json.loads((tmp_path / "portable-cost.json").read_text())
    assert written["rows"][0]["prefill_tok_per_s_ratio"] == 0.5 and "provenance" in written
    row = "| torch | smollm2-135m | 100.0 | 50.0 | 0.50× | 10.0 | 5.0 | 0.50× | n/a | n/a |"
    assert row in (tmp_path / "portable-cost.md").read_text() and row in result.output


@pytest.mark.model
@pytest.mark.slow
def test_bench_portable_measures_both_engines_in_fresh_processes(tmp_path):
    """Both engines' probes really run: native and portable each in its own process, on the pins they name."""
    from graftbench.engine.llama_cpp import portable_build

    try:
        import llama_cpp  # noqa: F401
        portable_build.identity()
    except ImportError as exc:
        need("llama.cpp", f"llama-cpp-python not installed ({exc})")
    except portable_build.LlamaBuildError as exc:
        need("llama.cpp", str(exc))
    result = CliRunner().invoke(app, ["bench-portable", "llama.cpp:smollm2-135m", "torch:smollm2-135m",
                                      "--prompt-tokens", "16", "--decode-tokens", "2", "--repeats", "1",
                                      "--problems", str(AIME2024), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    llama, torch_row = json.loads((tmp_path / "portable-cost.json").read_text())["rows"]
    assert llama["portable"]["cpu_capability"].startswith("portable: ") and "AVX512" not in llama["portable"][
        "cpu_capability"]
    assert llama["native"]["graft_plus_one_s"] > 0 and llama["portable"]["graft_plus_one_s"] > 0
    assert torch_row["portable"]["cpu_capability"] == "AVX2" and torch_row["graft_plus_one_s_ratio"] is None
    for row in (llama, torch_row):
        assert all(row[pin]["prefill_tok_per_s"] > 0 and row[pin]["decode_tok_per_s"] > 0 for pin in ("native",
                                                                                                       "portable"))
        assert [probe["prompt_tokens"] for pin in ("native", "portable") for probe in row[pin]["runs"]] == [16, 16]
