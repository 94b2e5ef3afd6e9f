"""The engine seam (graftbench/engine/base.py, graftbench/engine/registry.py): engines are found by name, lazily and
without loading a model library; a missing capability is refused naming the engine and the capability; an engine
registered from outside the package is found; the torch session is the seam's session and computes through it the
bytes the direct calls compute."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graftbench.engine import base, registry


def test_the_built_in_engines_are_found_by_name_without_importing_torch_or_llama_cpp():
    code = ("import sys; from graftbench.engine import registry; "
            "factories = [registry.get(n) for n in ('torch', 'llama.cpp')]; "
            "print([f.name for f in factories], 'torch' in sys.modules, 'llama_cpp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['torch', 'llama.cpp'] False False"


def test_each_built_in_engine_is_a_factory_with_known_capabilities():
    for name in ("torch", "llama.cpp"):
        factory = registry.get(name)
        assert isinstance(factory, base.EngineFactory) and factory.name == name
        assert factory.capabilities <= set(base.CAPABILITIES), factory.capabilities - set(base.CAPABILITIES)


def test_an_unknown_engine_is_refused_naming_the_known_ones():
    with pytest.raises(registry.UnknownEngineError, match="'no-such-engine' is not one of torch, llama.cpp"):
        registry.get("no-such-engine")


def test_a_missing_capability_is_refused_naming_engine_and_capability():
    llama = registry.get("llama.cpp")
    with pytest.raises(base.CapabilityError) as caught:
        base.require(llama, base.RAY, "--executor ray")
    assert caught.value.engine == "llama.cpp" and caught.value.capability == base.RAY
    assert "engine 'llama.cpp' does not support Ray workers" in str(caught.value)
    base.require(registry.get("torch"), base.RAY)  # declared: no error


class _Outside:
    """An engine defined outside the package (what an entry point would name)."""

    name = "outside"
    capabilities = frozenset({base.SAMPLE_BATCH})
    options = frozenset()
    pinned_dtype = "own"

    def open(self, options):
        raise base.EngineOpenError(f"{options.model}: the outside engine opens nothing")

    def loading_text(self, options):
        return f"loading {options.model} outside"

    def replay_options(self, pin):
        return {"model": pin["model"]}


def test_an_engine_registered_from_outside_is_found_and_forgotten():
    registry.register("outside", _Outside)  # a zero-argument callable returning the factory
    try:
        assert "outside" in registry.engine_names()
        assert registry.get("outside").pinned_dtype == "own"
        with pytest.raises(base.EngineOpenError, match="m.bin: the outside engine opens nothing"):
            registry.open_engine("outside", base.EngineOptions(model="m.bin"))
        with pytest.raises(base.CapabilityError, match="'outside' does not support Ray"):
            base.require(registry.get("outside"), base.RAY)
    finally:
        registry.unregister("outside")
    assert "outside" not in registry.engine_names()


def test_an_entry_point_target_that_names_nothing_is_refused_naming_it():
    table = registry.Registry({}, group="graftbench.no-such-group")
    table.register("broken", "graftbench.engine.base:NO_SUCH_FACTORY")
    with pytest.raises(base.EngineOpenError, match="'broken'.*NO_SUCH_FACTORY"):
        table.get("broken")


DEPOSIT = "Problem: What is 6 times 7?\nFinal answer: 42\nSolution: 6 times 7 is 42.\nFinal answer: 42\n\n"
QUERY = "Problem: What is 6 times 7?\nFinal answer:"


@pytest.mark.model
def test_the_torch_session_is_the_seam_session(session):
    assert isinstance(session, base.EngineSession)
    assert session.engine_name == "torch" and session.capabilities == registry.get("torch").capabilities
    assert isinstance(session.exactness(), base.ExactnessChecks)


@pytest.mark.model
def test_a_graft_through_the_seam_hashes_as_a_fresh_recompute(session):
    from graftbench.engine.torch import forward, graft

    deposit, query = session.tokenizer(DEPOSIT).input_ids, session.query_ids("What is 6 times 7?")
    checks = session.exactness()
    deposited = checks.deposit(deposit)
    grafted = checks.graft_logits(deposited, query)
    fresh = checks.fresh_logits(deposit, query)
    assert grafted.shape == (len(query), session.model.config.vocab_size)
    assert session.logits_sha256(grafted) == session.logits_sha256(fresh)
    direct = graft.fresh_recompute(session.model, session.config, [deposit], query, all_logits=True)
    assert session.logits_sha256(fresh) == forward.logits_sha256(direct)
    _, chained = session.prefill_chain([deposit], query)
    assert session.logits_sha256(session.recompute([deposit], query)) == session.logits_sha256(chained)
