"""Meta-tests in the habit of sqlite-utils and llm: every command, option and argument has help text, the CLI
reference page (docs/cli.md) is what typer generates from the app, and the README and docs/ link only to files that
exist, so none of them can drift from the code."""

from __future__ import annotations

import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import typer.core
import typer.main

from graftbench.cli.app import app

from tests import module_table

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
# The typer command that writes docs/cli.md (the Makefile's `make docs` runs the same).
CLI_DOCS_COMMAND = ["-m", "typer", "graftbench.cli.app", "utils", "docs", "--name", "graftbench", "--output"]


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
def test_every_command_has_help(path, command):
    assert (command.help or "").strip(), f"{path} has no help text"


@pytest.mark.parametrize("path, option", OPTIONS, ids=[f"{p} {o.opts[0]}" for p, o in OPTIONS])
def test_every_option_has_help(path, option):
    flag = max(option.opts, key=len)
    assert (option.help or "").strip(), f"{path} {flag} has no help text"


def test_the_cli_reference_page_equals_a_fresh_generation(tmp_path):
    fresh = tmp_path / "cli.md"
    subprocess.run([sys.executable, *CLI_DOCS_COMMAND, str(fresh)], cwd=ROOT, check=True, capture_output=True)
    assert fresh.read_text() == (ROOT / "docs" / "cli.md").read_text(), \
        "docs/cli.md is out of date with the CLI: run `make docs` and commit docs/cli.md"


def test_the_architecture_module_table_equals_a_fresh_generation():
    table = module_table.render()
    assert "| settings | `graftbench/settings.py` |" in table and "`graftbench/engine/torch/forward.py`" in table
    assert module_table.committed() == table, \
        "ARCHITECTURE.md's module table is out of date: run `make architecture` and commit ARCHITECTURE.md"


@pytest.mark.parametrize("path, command", COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_command_has_a_heading_in_the_cli_reference_page(path, command):
    assert re.search(rf"^#+ `{re.escape(path)}`$", (ROOT / "docs" / "cli.md").read_text(), re.M), \
        f"{path} has no heading in docs/cli.md"


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


# A link's target in markdown: [text](target) or ![alt](target), an optional "title" after it.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# What the README and the docs' prose must not carry: a result's date, code version and tracker number live in the
# file it comes from and in its table's caption, and "here" names no machine a reader can find.
DATE = re.compile(r"\b(?:19|20)\d{2}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2} UTC\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
ISSUE = re.compile(r"(?<![\w&/#])#\d+\b")
HERE = re.compile(r"\bhere\b", re.I)


def _broken_links(text: str, folder: Path) -> list[str]:
    """The relative link targets in a markdown text, read from `folder`, that name no file inside the repository."""
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        resolved = (folder / target.split("#", 1)[0]).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(target)
    return broken


def _front_door_faults(text: str) -> list[str]:
    faults = [f"{name}: {match.group(0)!r}" for name, pattern in
              (("date", DATE), ("commit hash", COMMIT), ("issue number", ISSUE), ("'here'", HERE))
              for match in pattern.finditer(text)]
    lines = text.count("\n")
    return faults + ([f"{lines} lines (at most 250)"] if lines > 250 else [])


def test_the_docs_pages_are_found():
    assert {"README.md", "cli.md", "exactness.md", "performance.md"} <= {page.name for page in DOCS}


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_in_the_repository(page):
    assert _broken_links(page.read_text(), page.parent) == []


def test_a_link_to_a_missing_file_or_out_of_the_repository_is_reported():
    text = ("[page](exactness.md#replay) ![plot](../results/amd-epyc-avx512/bench/bench-smollm2-135m-ttft.png) "
            "[gone](no-such-page.md#part) [out](../../outside.md) [web](https://example.org/x.md) [anchor](#top)")
    assert _broken_links(text, ROOT / "docs") == ["no-such-page.md#part", "../../outside.md"]


def test_the_readme_is_a_front_door():
    assert _front_door_faults(README) == []
    assert "`make run`" in README and "`make test`" in README
    assert README.index("make run") < README.index("make test")


@pytest.mark.parametrize("text, fault", [
    ("re-run 2026-12-02 on two cores", "date"),
    ("float32 at 11:09 UTC", "date"),
    ("code of commit 23c39ac", "commit hash"),
    ("as issue #14 asks", "issue number"),
    ("measured here on 2 cores", "'here'"),
    ("line\n" * 251, "lines (at most 250)"),
])
def test_a_front_door_fault_is_named(text, fault):
    assert any(fault in found for found in _front_door_faults(text))


GENERATED = {"cli.md", "results.md"}  # generated from the app and from the result files: tables, not prose


@pytest.mark.parametrize("page", [page for page in DOCS if page.name not in GENERATED], ids=lambda page: page.name)
def test_the_docs_prose_has_no_date_or_issue_number(page):
    text = page.read_text()
    assert DATE.findall(text) == [] and ISSUE.findall(text) == []


def test_the_docs_index_lists_every_page_of_docs():
    """docs/README.md links every page in docs/ (and nothing that is not there)."""
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert linked == pages
