"""What the running command was given: its options as given on the command line or by environment variable (the
manifest's ``command_options``), and why an engine option it was given is refused when the chosen engine does not
take it (:mod:`graftbench.engine.options_taken`; :func:`graftbench.cli.common.refuse_options_not_taken` fails with
it before any model loads)."""

from __future__ import annotations

from pathlib import PurePath


def _running_context():
    """The click context of the running command (``None`` outside one). typer 0.2x runs its own copy of click
    (``typer._click``), earlier versions click itself; either keeps the running command's context."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # a typer that runs click itself
        from click import get_current_context
    return get_current_context(silent=True)


def _given(ctx) -> list[tuple[object, object, str | None]]:
    """``(parameter, value, environment variable or None)`` of each option of ``ctx``'s command given on the
    command line or by its environment variable, in the command's order."""
    given = []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name else None
        name = getattr(source, "name", None)
        if name in ("COMMANDLINE", "ENVIRONMENT"):
            given.append((param, ctx.params.get(param.name), param.envvar if name == "ENVIRONMENT" else None))
    return given


def _flag(param, value) -> str:
    """The option as typed: ``--no-flash-attn`` for a false boolean switch, else its first name."""
    if value is False and getattr(param, "secondary_opts", None):
        return param.secondary_opts[0]
    return param.opts[0] if param.opts else str(param.name)


def _json_value(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return str(value)


def given_options() -> dict[str, object]:
    """The running command's options given on the command line or by environment variable, by parameter name
    (``kv_type``), as parsed; empty outside a command."""
    ctx = _running_context()
    return {} if ctx is None else {param.name: value for param, value, _ in _given(ctx)}


def command_options() -> dict[str, object]:
    """What a run manifest records as ``command_options``: every option of the running command given on the
    command line or by environment variable, by its first flag (``--kv-type``; a switch by its first name and its
    value, ``"--flash-attn": false`` for ``--no-flash-attn``), JSON-ready (a path as text); empty outside a
    command."""
    ctx = _running_context()
    if ctx is None:
        return {}
    return {(param.opts[0] if param.opts else str(param.name)): _json_value(value)
            for param, value, _ in _given(ctx)}


def options_refusal(engine: str) -> str | None:
    """Why the running command cannot run on the engine ``engine``: it was given an engine option
    (:data:`graftbench.engine.options_taken.ENGINE_OPTIONS`) that the engine does not take, named as typed with its
    value (and the environment variable that gave it), with the engine options the engine does take here; ``None``
    when every option given is taken, outside a command, or for an engine the registry does not know (left to the
    command's own refusal)."""
    from ..engine.options_taken import ENGINE_OPTIONS, options_not_taken
    from ..engine.registry import get

    ctx = _running_context()
    if ctx is None:
        return None
    try:
        factory = get(engine)
    except ValueError:
        return None
    given = _given(ctx)
    refused = options_not_taken(factory, {param.name: value for param, value, _ in given})
    if not refused:
        return None
    param, value, envvar = next(item for item in given if item[0].name == refused[0])
    flag = _flag(param, value)
    shown = "" if isinstance(value, bool) else f" {_json_value(value)}"
    by = f" (given by ${envvar})" if envvar else ""
    takes = [_flag(p, True) for p in ctx.command.params if p.name in ENGINE_OPTIONS & frozenset(factory.options)]
    return (f"--engine {engine} does not take {flag}{shown}{by}; of the engine options, it takes "
            f"{', '.join(takes) or 'none'} here. Leave {flag} out" + (f" (unset ${envvar})" if envvar else "")
            + " or choose an engine that takes it")
