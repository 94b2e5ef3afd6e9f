"""Meta-tests in the habit of sqlite-utils and llm: every command and option is documented, in --help and in the
README, so neither can drift from the code."""

from __future__ import annotations

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
