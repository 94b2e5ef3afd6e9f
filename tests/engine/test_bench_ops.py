"""The benchmark's and the fault harness's way to an engine's own operations: through the registry
(``registry.benchmark_ops``, ``registry.fault_ops``), refused naming the engine and the capability where an engine
does not declare it, and holding what ``bench/`` and ``faults/`` call. Loads no model."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from graftbench.engine import registry
from graftbench.engine.base import BENCHMARK, FAULT_SCENARIOS, CapabilityError
from graftbench.engine.llama_cpp import portable_build
from graftbench.util import isa

from tests.prereqs import need

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("part, capability", [(registry.benchmark_ops, BENCHMARK),
                                              (registry.fault_ops, FAULT_SCENARIOS)])
def test_an_engine_without_the_capability_is_refused_naming_both(stand_in, part, capability):
    with pytest.raises(CapabilityError) as refused:
        part(stand_in)
    assert (refused.value.engine, refused.value.capability) == (stand_in, capability)
    assert repr(stand_in) in str(refused.value)


def _called_on(module_path: str, receiver: str) -> set[str]:
    """The attribute names a module's code reads from a name ``receiver`` (``ops.prefill`` -> ``prefill``), and from
    a call of ``benchmark_ops(...)``/``fault_ops(...)`` directly."""
    tree = ast.parse((ROOT / module_path).read_text())
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id == receiver:
            names.add(node.attr)
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) in ("benchmark_ops", "fault_ops"):
            names.add(node.attr)
    return names


def _llama_ops():
    try:
        return registry.benchmark_ops("llama.cpp")
    except ImportError as exc:
        need("llama.cpp", f"llama-cpp-python is not importable ({exc})")


def test_the_engines_modules_hold_every_operation_bench_and_faults_call():
    torch_ops, llama_ops, faults = registry.benchmark_ops("torch"), _llama_ops(), registry.fault_ops("torch")
    bench = ROOT / "graftbench" / "bench"
    llama_benches = {"llama_overhead.py", "llama_samples.py", "overhead.py", "portable_cost.py"}
    paths = sorted(bench.glob("*.py"))
    assert llama_benches <= {p.name for p in paths}, [p.name for p in paths]  # not an empty glob, nor a stale name
    for path in paths:
        calls = _called_on(str(path.relative_to(ROOT)), "ops")
        holders = [llama_ops] if path.name in llama_benches else [torch_ops]
        if path.name in ("overhead.py", "portable_cost.py"):  # the torch rows beside, the probe of each engine
            holders = [torch_ops, llama_ops]
        missing = {name for name in calls if not any(hasattr(ops, name) for ops in holders)}
        assert missing == set(), f"{path.name}: {sorted(missing)}"
    assert hasattr(torch_ops, "portable_cost_probe") and hasattr(llama_ops, "portable_cost_probe")
    fault_calls = set().union(*(_called_on(str(p.relative_to(ROOT)), "ops")
                                for p in (ROOT / "graftbench" / "faults").glob("*.py")))
    assert {"build_artifact", "open_for_faults"} <= fault_calls
    assert all(hasattr(faults, name) for name in fault_calls)


def test_the_load_probe_imports_the_engines_loading_code_alone():
    loader = registry.benchmark_loader("torch")
    assert callable(loader.load_model)
    assert not hasattr(loader, "prefill")  # not the benchmark operations: those would widen the timed imports


def test_each_engine_with_a_portable_pin_names_its_variable_and_probe():
    assert registry.get("torch").isa_variable == isa.ENV_VAR
    assert registry.get("llama.cpp").isa_variable == portable_build.ENV_VAR


def test_an_engine_that_declares_the_benchmark_but_names_no_loader_is_refused_naming_what_is_missing():
    """llama.cpp declares ``benchmark`` (its timed operations) but no ``loader_module``: asking for its load probe
    is a CapabilityError naming the engine and the missing attribute, not an AttributeError."""
    from graftbench.engine import registry
    from graftbench.engine.base import CapabilityError

    with pytest.raises(CapabilityError, match="'llama.cpp' declares 'benchmark' but its factory names no loader_module"):
        registry.benchmark_loader("llama.cpp")
