"""Help a person can read: every option of every command sits in a panel named for what it is for
(:mod:`graftbench.cli.panels`), and at 80 columns no help text is cut short with ``…``."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from graftbench.cli import panels
from graftbench.cli.app import app

runner = CliRunner()
COMMANDS = sorted(panels.commands(app), key=lambda item: item[0])
# A word cut short by the help's layout ends in "…" with no space before it ("--batch-artifact…"); an ellipsis
# written in a help text stands apart ("0/N … N-1/N").
CUT = re.compile(r"\S…")


@pytest.mark.parametrize("command, callback", COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_option_is_in_a_named_panel(command, callback):
    unplaced = [option for option, _ in panels.options(callback) if panels.panel_of(command, option) is None]
    assert not unplaced, f"{command}: {unplaced} are in no help panel: add them to graftbench/cli/panels.py"


def test_an_option_shared_by_several_commands_has_one_panel():
    placed: dict[int, set[str]] = {}
    names = {}
    for command, callback in COMMANDS:
        for option, info in panels.options(callback):
            placed.setdefault(id(info), set()).add(panels.panel_of(command, option))
            names[id(info)] = option
    assert {names[key]: found for key, found in placed.items() if len(found) > 1} == {}


@pytest.mark.parametrize("command", [name for name, _ in COMMANDS])
def test_no_help_is_cut_at_80_columns(command):
    result = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80  # the width asked for ...
    assert not CUT.findall(result.output), result.output  # ... and nothing cut to fit it


def test_eval_help_at_80_columns_shows_the_panels_and_every_option_whole():
    """As a person would run it: the installed command line in a fresh process, COLUMNS=80."""
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("TERMINAL_WIDTH", None)
    done = subprocess.run([sys.executable, "-m", "graftbench.cli.app", "eval", "--help"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    titles = re.findall(r"╭─ (.+?) ─", done.stdout)
    assert {panels.MODEL, panels.PROBLEMS, panels.DECODING, panels.GRAFT, panels.OUTPUT} <= set(titles)
    assert not CUT.findall(done.stdout)
    callback = dict(COMMANDS)["eval"]
    for option, _ in panels.options(callback):
        assert re.search(rf"{re.escape(option)}(?![\w-])", done.stdout), f"{option} is not shown whole"
