"""An exactness expectation's engine reopened under its pin: the expectation, the options that open its engine as it
was recorded, and the engine option fields its pin records (what ``check-exact --expect`` and ``trace-pair --expect``
both open their model with)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..engine.base import EngineOpenError, require
from ..engine.pin_terms import engine_of
from ..engine.registry import engine_names, get
from ..results.exact_manifest import load_sealed_expectation
from ..settings import ModelOptions
from ..util import isa as isa_pin
from .errors import Refused


@dataclass(frozen=True)
class AdoptedExpectation:
    """An expectation whose pin this process has adopted: ``expected`` (the exactness manifest, as read),
    ``options`` (the command's options with the engine, model, dtype, chunk size, threads and instruction-set pin
    the expectation's pin records) and ``recorded`` (the other :class:`graftbench.engine.base.EngineOptions` fields
    its pin records, e.g. llama.cpp's cache type and context size: they replace ``options``' when the model opens)."""

    expected: dict
    options: ModelOptions
    recorded: dict


def recorded_location(model: object) -> bool:
    """Whether ``model``, the model an expectation's pin records, names a place rather than a model: a path (a
    separator, a leading ``~`` or ``.``, a ``.gguf`` file) or a hub id (``owner/name``), or is no name at all (not
    text, or blank). Such a spec is data: a replay
    never opens it (it could name any file on this machine or any repository to download), whereas a name the engine
    resolves itself (an alias such as ``smollm2-135m``, ``random:gemma3-reduced``) is opened as recorded."""
    if not isinstance(model, str):
        return True  # no name at all: nothing to open
    return ("/" in model or "\\" in model or model.startswith(("~", ".")) or model.lower().endswith(".gguf")
            or not model.strip())


def adopt_expectation(expect: Path, given: ModelOptions, *, first_pair: int | None = None,
                      needs: Sequence[tuple[str, str]] = (), named_model: str | None = None) -> AdoptedExpectation:
    """Read the expectation at ``expect`` and put this process under its pin, before any model loads: an engine that
    takes ``--isa`` runs under ``given.isa`` when given, else the recorded pin (``native`` when none is recorded),
    applied here (:func:`graftbench.util.isa.apply`) before anything imports torch; then the engine adopts what its
    pin fixes beyond the options (:meth:`graftbench.engine.base.EngineFactory.adopt_pin`, e.g. a llama.cpp build).
    An engine that does not take ``--isa`` gets none. ``given``'s device, kernels and llama.cpp cache options stay
    where the pin does not record them (:meth:`graftbench.engine.base.EngineFactory.replay_options`).

    ``first_pair``: the first pair the caller will replay (0-based; ``None``: not checked); ``needs``:
    ``(capability, what)`` pairs the engine must declare, ``what`` naming the command or option that needs it
    (:func:`graftbench.engine.base.require`). Both are checked before the pin is adopted.

    ``named_model``: the model the user named (``--model``), opened in place of the recorded one (the replay then
    compares its weights' SHA-256 with the pin's, as any pin field); ``None``: the recorded model, unless it names
    a place (:func:`recorded_location`: a path or a hub id), which is refused, never opened or downloaded.

    Raises:
        graftbench.results.manifest.ManifestError: ``expect`` is missing, not an exactness manifest, or changed
            after it was sealed (naming it).
        graftbench.eval.errors.Refused: the expectation holds no pair at ``first_pair``, its engine is not one this
            graftbench runs, the engine cannot adopt its pin, its pin lacks a field the engine reopens with, or
            its model is a path or hub id and ``named_model`` is ``None`` (naming ``expect`` and why).
        graftbench.engine.base.CapabilityError: the engine lacks a capability of ``needs``.
        graftbench.engine.base.EngineOpenError: the engine's module cannot be imported (a missing extra).
        graftbench.util.isa.IsaError: this CPU or process cannot take the instruction-set pin.
    """
    expected = load_sealed_expectation(expect)
    pin = expected["config"]
    if named_model is None and "model" in pin and recorded_location(pin["model"]):
        raise Refused(f"{expect}: its pin records the model {str(pin['model'])[:200]!r}, a path or hub id (or no "
                      "name), which a replay never opens or downloads from what a file says; pass --model naming "
                      "that model here (its weights' SHA-256 must be the recorded one)")
    if first_pair is not None and first_pair >= len(expected["pairs"]):
        raise Refused(f"--pairs starts at pair {first_pair}, but {expect} holds {len(expected['pairs'])} pairs "
                      "(0-based)")
    name = engine_of(pin)
    if name not in engine_names():
        raise Refused(f"{expect}: engine {name!r} is not one this graftbench runs")
    factory = get(name)
    for capability, what in needs:
        require(factory, capability, what)
    isa = (given.isa or pin.get("isa", "native")) if "isa" in factory.options else None
    if isa is not None:
        isa_pin.apply(isa)  # before anything below (the engine, the model) imports torch
    try:
        factory.adopt_pin(pin)
    except EngineOpenError as exc:
        raise Refused(f"{expect}: {exc}") from exc
    try:
        recorded = factory.replay_options(pin)
        model, chunk_size = recorded.pop("model"), recorded.pop("chunk_size")
    except KeyError as exc:  # a re-sealed copy whose pin lacks a field its engine reopens with
        raise Refused(f"{expect}: its pin (config) records no {exc.args[0]!r}, which {name} needs to reopen it") from exc
    options = replace(given, engine=name, isa=isa, model=named_model or model, dtype=recorded.pop("dtype", "auto"),
                      chunk_size=chunk_size, threads=recorded.pop("threads", None))
    return AdoptedExpectation(expected, options, recorded)


def expectation_problems(expect: Path, expected: dict, named: str | None = None) -> list:
    """The problems (:class:`graftbench.problems.types.Problem`) to rebuild the pairs of the expectation ``expected``
    (read from ``expect``) from: the problem set ``named`` when the user named one (``--problems``), loaded as
    named; else the one it records, found as graftbench finds any recorded set without being told
    (:func:`graftbench.results.anchor.resolve_recorded`: a generated set, or the recorded file's name under
    ``../shared/data/`` of the working folder or the checkout). The recorded path is data and never opened, so an
    expectation cannot point a replay at a file elsewhere. Whether the problems are the recorded ones is checked
    by their SHA-256 when the replay starts (:func:`graftbench.eval.exactness.not_comparable`).

    Raises:
        graftbench.eval.errors.Refused: nothing is named and the recorded set is not found (naming ``expect``, the
            recorded source and ``--problems``).
        graftbench.problems.types.ProblemSetError: the named set cannot be read.
    """
    from ..problems.loading import load_problems
    from ..results.anchor import resolve_recorded

    if named is not None:
        return load_problems(named, id_field="id", problem_field="problem", answer_field="answer",
                             solution_field="solution")
    found, why = resolve_recorded(expected)
    if found is None:
        raise Refused(f"{expect}: cannot find the problems its pairs are built from: {why}; name the problem file "
                      "with --problems")
    return list(found.problems)
