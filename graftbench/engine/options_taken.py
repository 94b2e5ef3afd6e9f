"""Which of the options a command was given its engine takes: an option the chosen engine does not take is refused
before the model loads, never ignored (``--device cuda`` on llama.cpp, ``--dtype`` on llama.cpp, ``--kv-type`` on
torch).

Each engine declares the options it takes (:attr:`graftbench.engine.base.EngineFactory.options`: names of
:class:`graftbench.engine.base.EngineOptions` fields, and ``isa``); :data:`ENGINE_OPTIONS` are the names any engine
may take. An option given at its default value (:data:`NO_OP_VALUES`) asks for nothing and is not refused.
Imports no torch and no llama.cpp.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from .base import EngineOptions

# The options an engine may take: every EngineOptions field but the two every engine takes, and the instruction-set
# pin (``--isa``), which a command applies before the engine is imported.
ENGINE_OPTIONS = frozenset({f.name for f in fields(EngineOptions)} - {"model", "chunk_size"} | {"isa"})
# Values that ask an engine for nothing: the default of each option that has one a command may spell out
NO_OP_VALUES = {f.name: f.default for f in fields(EngineOptions) if f.name in ENGINE_OPTIONS} | {"isa": None}


class OptionNotTakenError(ValueError):
    """``engine`` does not take ``option`` (a name of :data:`ENGINE_OPTIONS`), which was given ``value``."""

    def __init__(self, engine: str, option: str, value: object, takes: frozenset[str]):
        self.engine, self.option, self.value = engine, option, value
        taken = ", ".join(sorted(takes & ENGINE_OPTIONS)) or "none of them"
        super().__init__(f"engine {engine!r} does not take the option {option!r} (given {value!r}); of the engine "
                         f"options it takes {taken}")


def options_not_taken(factory, given: Mapping[str, object]) -> list[str]:
    """The names in ``given`` (option name to the value it was given) that are engine options (:data:`ENGINE_OPTIONS`)
    the engine ``factory`` does not declare in its ``options``, in ``given``'s order; an option at its no-op value
    (:data:`NO_OP_VALUES`) is left out."""
    takes = frozenset(getattr(factory, "options", ()))
    return [name for name, value in given.items()
            if name in ENGINE_OPTIONS and name not in takes and value != NO_OP_VALUES.get(name, object())]


def check_options_taken(factory, given: Mapping[str, object]) -> None:
    """Raise :class:`OptionNotTakenError` for the first option of ``given`` the engine ``factory`` does not take
    (:func:`options_not_taken`)."""
    refused = options_not_taken(factory, given)
    if refused:
        name = refused[0]
        raise OptionNotTakenError(factory.name, name, given[name], frozenset(getattr(factory, "options", ())))
