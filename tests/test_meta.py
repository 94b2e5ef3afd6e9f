"""Meta-tests in the habit of sqlite-utils and llm: every command and option is documented, in --help and in the
README, so neither can drift from the code."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import typer.core
import typer.main

from graftbench.cli import app

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _commands(group, prefix: str = "graftbench") -> list[tuple[str, object]]:
    found = []
    for name, command in sorted(group.commands.items()):
        path = f"{prefix} {name}"
        found.append((path, command))
        if isinstance(command, typer.core.TyperGroup):
            found += _commands(command, path)
    return found


COMMANDS = _commands(typer.main.get_command(app))
OPTIONS = [(path, param) for path, command in COMMANDS for param in command.params
           if isinstance(param, typer.core.TyperOption)]
ARGUMENTS = [(path, param) for path, command in COMMANDS for param in command.params
             if isinstance(param, typer.core.TyperArgument)]


def test_the_command_tree_is_found():
    names = {path for path, _ in COMMANDS}
    assert {"graftbench solve", "graftbench eval", "graftbench check-exact", "graftbench store verify"} <= names


@pytest.mark.parametrize("path, command", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_command_has_help_and_is_in_the_readme(path, command):
    assert (command.help or "").strip(), f"{path} has no help text"
    assert f"`{path}" in README or f"{path} " in README, f"{path} is not in README.md"


@pytest.mark.parametrize("path, option", OPTIONS, ids=[f"{p} {o.opts[0]}" for p, o in OPTIONS])
def test_every_option_has_help_and_is_in_the_readme(path, option):
    flag = max(option.opts, key=len)
    assert (option.help or "").strip(), f"{path} {flag} has no help text"
    assert f"`{flag}" in README or f"{flag} " in README or f"{flag}/" in README or f"{flag}=" in README, \
        f"{path} {flag} is not in README.md"


@pytest.mark.parametrize("path, argument", ARGUMENTS, ids=[f"{p} {a.name}" for p, a in ARGUMENTS])
def test_every_argument_has_help(path, argument):
    assert (argument.help or "").strip(), f"{path} {argument.name} has no help text"


def _is_number(option) -> bool:
    annotation = option.type_descriptor.annotation
    return any(kind in (int, float) for kind in (typing.get_args(annotation) or (annotation,)))


NUMERIC_OPTIONS = [(path, option) for path, option in OPTIONS if _is_number(option)]


@pytest.mark.parametrize("path, option", NUMERIC_OPTIONS, ids=[f"{p} {o.opts[0]}" for p, o in NUMERIC_OPTIONS])
def test_every_numeric_option_has_a_range(path, option):
    assert option.min is not None, f"{path} {max(option.opts, key=len)} accepts any number"


@pytest.mark.parametrize("args, option", [
    (["solve", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["solve", "--max-new-tokens", "-5"], "--max-new-tokens"),
    (["eval", "--token-budget", "-1"], "--token-budget"),
    (["solve", "--limit", "-1"], "--limit"),
    (["eval", "--min-similarity", "1.5"], "--min-similarity"),
    (["check-exact", "--samples", "0"], "--samples"),
])
def test_out_of_range_numbers_are_refused_naming_the_option(args, option):
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, args)
    text = " ".join("".join(" " if ch in "│╭╮╰╯─" else ch for ch in result.output).split())  # unwrap rich's box
    assert result.exit_code == 2
    assert f"Invalid value for '{option}'" in text
    assert "greater than or equal to" in text or "less than or equal to" in text
