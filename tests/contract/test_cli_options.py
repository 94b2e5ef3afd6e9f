"""Each CLI option is defined once: an option two commands of one CLI module take is a typed alias in
``graftbench/cli/options.py`` (``Annotated[type, typer.Option(...)]``) that both name, never a ``typer.Option(...)``
written into each command's signature, where the copies drift apart in help text, default or bounds. The rule is
read from the source (every function in ``graftbench/cli/*.py`` whose parameter defaults are ``typer.Option``
calls), so it holds for a command before it is registered in the app."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "graftbench" / "cli"
MODULES = sorted(p for p in CLI.glob("*.py") if p.name != "options.py")
# Two options of one name in one module, which mean different things: not one option written twice.
HOMONYMS = {
    ("bench.py", "--only"): "bench's --only is one of its sections (an enum); bench-llama's takes only 'samples'",
}


def inline_flags(source: str) -> dict[str, list[str]]:
    """Each flag (``--name``, ``--no-name``, ``-n``) given by a ``typer.Option(...)`` call as a parameter default
    in ``source``, mapped to the functions that give it, in source order. ``source`` is one module's Python text;
    raises :class:`SyntaxError` when it does not parse."""
    found: dict[str, list[str]] = defaultdict(list)
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if not (isinstance(default, ast.Call) and ast.unparse(default.func) == "typer.Option"):
                continue
            for arg in default.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                    for flag in arg.value.split("/"):
                        found[flag].append(node.name)
    return found


def written_twice(source: str) -> dict[str, list[str]]:
    """The flags of :func:`inline_flags` that two or more functions of ``source`` give inline."""
    return {flag: functions for flag, functions in inline_flags(source).items() if len(set(functions)) > 1}


def test_the_cli_modules_are_found():
    names = {p.name for p in MODULES}
    assert {"app.py", "bench.py", "exact.py", "flywheel.py"} <= names
    assert inline_flags((CLI / "bench.py").read_text())["--dtypes"] == ["bench_isa"]


@pytest.mark.parametrize("module", MODULES, ids=[p.name for p in MODULES])
def test_no_option_is_written_into_two_commands_of_one_module(module):
    twice = {flag: functions for flag, functions in written_twice(module.read_text()).items()
             if (module.name, flag) not in HOMONYMS}
    assert not twice, (f"graftbench/cli/{module.name} writes an option into two commands' signatures: "
                       + "; ".join(f"{flag} in {', '.join(sorted(set(f)))}" for flag, f in sorted(twice.items()))
                       + ". Define it once as an alias in graftbench/cli/options.py (each command keeps its "
                         "default as the parameter's default)")


@pytest.mark.parametrize("module, flag", sorted(HOMONYMS), ids=[f"{m} {f}" for m, f in sorted(HOMONYMS)])
def test_each_declared_homonym_is_still_two_options(module, flag):
    assert flag in written_twice((CLI / module).read_text()), \
        f"{flag} is no longer written into two commands of graftbench/cli/{module}: drop it from HOMONYMS"


def test_an_option_written_into_two_commands_is_caught():
    source = (
        "import typer\n"
        "def one(threads: int = typer.Option(1, '--threads', '-t', min=1, help='a')) -> None: ...\n"
        "def two(threads: int = typer.Option(2, '--threads', min=1, help='b'),\n"
        "        *, cold: bool = typer.Option(True, '--cold/--no-cold', help='c')) -> None: ...\n"
        "def three(cold: bool = typer.Option(False, '--cold/--no-cold', help='d')) -> None: ...\n"
    )
    assert written_twice(source) == {"--threads": ["one", "two"], "--cold": ["two", "three"],
                                     "--no-cold": ["two", "three"]}


def test_an_alias_shared_by_two_commands_is_not_caught():
    source = (
        "import typer\n"
        "from graftbench.cli.options import RepeatsArg\n"
        "def one(repeats: RepeatsArg = 3) -> None: ...\n"
        "def two(repeats: RepeatsArg = 5, widths: str = typer.Option('1', '--widths', help='w')) -> None: ...\n"
    )
    assert written_twice(source) == {}
    assert inline_flags(source) == {"--widths": ["two"]}
