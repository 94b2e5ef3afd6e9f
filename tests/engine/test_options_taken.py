"""Each engine declares the options it takes (its factory's ``options``, graftbench/engine/options_taken.py): an
option given that the chosen engine does not take is refused before any model loads, naming the engine and the
option, on every command that opens a model; one at its default value asks for nothing and passes."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.engine import registry
from graftbench.engine.base import EngineOpenError
from graftbench.engine.options_taken import (ENGINE_OPTIONS, OptionNotTakenError, check_options_taken,
                                             options_not_taken)

OPENED = "the engine was opened"


def test_each_engine_declares_which_engine_options_it_takes_and_the_others_are_found():
    torch, llama = registry.get("torch"), registry.get("llama.cpp")
    assert {"dtype", "device", "kernels", "isa"} <= torch.options <= ENGINE_OPTIONS | {"threads"}
    assert not {"dtype", "device", "kernels", "isa"} & llama.options and {"kv_type", "flash_attn"} <= llama.options
    assert options_not_taken(llama, {"device": "cuda", "dtype": "float32", "threads": 2, "limit": 3}) == \
        ["device", "dtype"]
    assert options_not_taken(torch, {"kv_type": "q8_0", "flash_attn": False, "dtype": "bfloat16"}) == \
        ["kv_type", "flash_attn"]
    assert options_not_taken(llama, {"device": "auto", "dtype": "auto", "kernels": "certified"}) == []  # defaults
    assert options_not_taken(torch, {"kv_type": "f16", "isa": "avx2"}) == []
    with pytest.raises(OptionNotTakenError, match="engine 'llama.cpp' does not take the option 'isa'") as caught:
        check_options_taken(llama, {"isa": "avx2"})
    assert (caught.value.engine, caught.value.option, caught.value.value) == ("llama.cpp", "isa", "avx2")


@pytest.fixture
def no_engine_opens(monkeypatch):
    """Every built-in engine's ``open`` fails with :data:`OPENED` instead of loading a model."""
    def refuse(self, options):
        raise EngineOpenError(OPENED)

    for name in ("torch", "llama.cpp"):
        monkeypatch.setattr(type(registry.get(name)), "open", refuse)


@pytest.mark.parametrize("args, engine, flag", [
    (["solve", "--engine", "llama.cpp", "--device", "cuda"], "llama.cpp", "--device cuda"),
    (["solve", "--engine", "llama.cpp", "--dtype", "float32"], "llama.cpp", "--dtype float32"),
    (["eval", "--kv-type", "q8_0"], "torch", "--kv-type q8_0"),
    (["eval", "--engine", "torch", "--no-flash-attn", "--graft", "--new-store"], "torch", "--no-flash-attn"),
    (["deposit", "--engine", "llama.cpp", "--isa", "avx2"], "llama.cpp", "--isa avx2"),
    (["check-exact", "--flash-attn", "--samples", "2"], "torch", "--flash-attn"),
    (["check-exact", "--engine", "llama.cpp", "--kernels", "certified", "--dtype", "bfloat16", "--samples", "2"],
     "llama.cpp", "--dtype bfloat16"),
    (["run", "--engine", "llama.cpp", "--device", "cpu"], "llama.cpp", "--device cpu"),
    (["flywheel", "--engine", "torch", "--kv-type", "q4_0"], "torch", "--kv-type q4_0"),
])
def test_an_option_the_engine_does_not_take_is_refused_before_the_model_loads(no_engine_opens, args, engine, flag):
    result = CliRunner().invoke(app, [*args, "--limit", "1"] if args[0] not in ("check-exact", "run", "flywheel")
                                else args)
    text = " ".join(result.output.split())
    assert result.exit_code == 2, text
    assert f"--engine {engine} does not take {flag}" in text and "Leave" in text, text
    assert OPENED not in text


def test_an_option_given_by_its_environment_variable_is_refused_naming_the_variable(no_engine_opens):
    result = CliRunner().invoke(app, ["solve", "--engine", "llama.cpp", "--limit", "1"],
                                env={"GRAFTBENCH_DEVICE": "cuda"})
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "--engine llama.cpp does not take --device cuda (given by $GRAFTBENCH_DEVICE)" \
        in text and "unset $GRAFTBENCH_DEVICE" in text, text


@pytest.mark.parametrize("args", [
    ["solve", "--engine", "llama.cpp", "--dtype", "auto", "--device", "auto", "--kv-type", "q8_0", "--flash-attn"],
    ["solve", "--engine", "torch", "--kv-type", "f16", "--dtype", "float32", "--device", "cpu"],
])
def test_options_the_engine_takes_and_options_at_their_default_pass_to_the_engine(no_engine_opens, args):
    result = CliRunner().invoke(app, [*args, "--limit", "1"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and OPENED in text and "does not take" not in text, text
