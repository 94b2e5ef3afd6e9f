"""Each CLI option is defined once: an option two commands take, in one CLI module or in two, is a typed alias in
``graftbench/cli/options.py`` (``Annotated[type, typer.Option(...)]``) that both name, never a ``typer.Option(...)``
written into each command's signature, where the copies drift apart in help text, default or bounds; nor is a
flag an alias gives also written inline into another command. A flag that two commands (or a command and an alias)
spell alike but that means something else, or takes other bounds, in each is declared, with how they differ. The rule
is read from the source (every function in ``graftbench/cli/*.py`` whose parameter defaults are ``typer.Option``
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

# Flags written inline into commands of two or more modules, or into one beside an alias of the same flag in
# options.py, which mean different things: each with how they differ (naming the alias where one gives the flag).
HOMONYMS_ACROSS_MODULES = {
    "--out": "merge: the merged run's name (a folder under --runs-dir); report: the folder its files go into "
             "(default: from --name); trace-pair: the trace's JSON file; view: the HTML file; BenchOutArg: the "
             "folder a benchmark's result files go into",
    "--problems": "verify-manifest: the set a run is anchored to (default: the recorded one); bench-long-context: "
                  "files, repeatable, the artifacts' text is cut from; trace-pair: the file its pairs are built from; "
                  "view: the set whose texts the page shows (default: none); ProblemsArg: the one set a command "
                  "solves, deposits or measures",
    "-p": "the short flag of --problems in the same commands and in ProblemsArg, so as different as --problems",
    "--store": "verify-manifest: a store payloads are checked against (default: none); bench-long-context: the "
               "benchmark's own folder, filled to --tokens; flywheel: the store its rounds deposit into, created "
               "($GRAFTBENCH_ROUNDS_STORE); view: a store only read, for grafted examples' headers; StoreArg: the "
               "store runs graft from and deposit into ($GRAFTBENCH_STORE)",
    "--log": "check-exact: the replay log (manifests/replays.jsonl) a --expect replay's outcome and both CPUs go to; "
             "replay-programs: one line per re-run manifest (manifests/program-replays.jsonl)",
    "--rounds": "flywheel: how many rounds after round 0 (1-50); report: a switch, the runs given are successive "
                "rounds",
    "--samples": "check-exact: the (artifact, query) pairs measured (no upper bound); flywheel: samples decoded per "
                 "problem, at most 64, where SamplesArg (solve, eval) allows 1024",
    "--temperature": "flywheel: at least 0.01, its samples are always drawn; TemperatureArg (solve, eval): from 0, "
                     "which decodes greedily",
    "--limit": "check-exact: with --expect, replay only the first N pairs; LimitArg: use only the first N problems",
    "--seed": "report: the bootstrap intervals' seed (no upper bound); route-quality: the seed the built-in problem "
              "set is drawn with; SeedArg: the run seed each sample's seed derives from",
    "--per-family": "run: built-in problems of each family in its one round (at most 117, checked by the command); "
                    "flywheel: new built-in problems of each family in each round (1-20)",
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
            for flag in _option_flags(default):
                found[flag].append(node.name)
    return found


def _option_flags(node: ast.AST | None) -> list[str]:
    """The flags a ``typer.Option(...)`` call ``node`` gives (``'--a/--no-a'`` is two), in order; none when ``node``
    is anything else."""
    if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "typer.Option"):
        return []
    return [flag for arg in node.args
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-")
            for flag in arg.value.split("/")]


def alias_flags(source: str) -> dict[str, str]:
    """Each flag given by a ``typer.Option(...)`` call inside a module-level assignment of ``source`` (an alias
    such as ``SeedArg = Annotated[int, typer.Option("--seed", ...)]`` in ``options.py``), mapped to the name
    assigned. Raises :class:`SyntaxError` when ``source`` does not parse."""
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        else:
            continue
        for call in ast.walk(value):
            for flag in _option_flags(call):
                found[flag] = name
    return found


def written_twice(source: str) -> dict[str, list[str]]:
    """The flags of :func:`inline_flags` that two or more functions of ``source`` give inline."""
    return {flag: functions for flag, functions in inline_flags(source).items() if len(set(functions)) > 1}


def written_in_two_modules(sources: dict[str, str]) -> dict[str, list[str]]:
    """The flags of :func:`inline_flags` that functions of two or more of ``sources`` (module name to Python text)
    give inline, mapped to those module names, sorted. Raises :class:`SyntaxError` for a source that does not
    parse."""
    found: dict[str, set[str]] = defaultdict(set)
    for name, source in sources.items():
        for flag in inline_flags(source):
            found[flag].add(name)
    return {flag: sorted(names) for flag, names in found.items() if len(names) > 1}


def written_beside_an_alias(sources: dict[str, str], aliases: dict[str, str]) -> dict[str, list[str]]:
    """The flags of :func:`inline_flags` that functions of ``sources`` (module name to Python text) give inline
    while an alias gives the same flag (``aliases``: flag to alias name, as :func:`alias_flags` reads them), mapped
    to the modules that write them inline, sorted. Raises :class:`SyntaxError` for a source that does not parse."""
    found: dict[str, set[str]] = defaultdict(set)
    for name, source in sources.items():
        for flag in inline_flags(source):
            if flag in aliases:
                found[flag].add(name)
    return {flag: sorted(names) for flag, names in found.items()}


def options_aliases() -> dict[str, str]:
    """Each flag of an alias in ``graftbench/cli/options.py`` mapped to the alias's name."""
    return alias_flags((CLI / "options.py").read_text())


def cli_sources() -> dict[str, str]:
    """Each CLI module's name (``app.py``) mapped to its Python text, ``options.py`` left out."""
    return {path.name: path.read_text() for path in MODULES}


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


def test_no_option_is_written_into_commands_of_two_modules():
    twice = {flag: names for flag, names in written_in_two_modules(cli_sources()).items()
             if flag not in HOMONYMS_ACROSS_MODULES}
    assert not twice, ("an option is written into the signatures of commands in two graftbench/cli modules: "
                       + "; ".join(f"{flag} in {', '.join(names)}" for flag, names in sorted(twice.items()))
                       + ". Define it once as an alias in graftbench/cli/options.py (each command keeps its "
                         "default as the parameter's default), or, where the two mean different things, declare it "
                         "in HOMONYMS_ACROSS_MODULES with how they differ")


def test_no_option_is_written_inline_beside_its_alias():
    aliases = options_aliases()
    beside = {flag: names for flag, names in written_beside_an_alias(cli_sources(), aliases).items()
              if flag not in HOMONYMS_ACROSS_MODULES}
    assert not beside, ("an option that an alias in graftbench/cli/options.py defines is also written inline into a "
                        "command's signature: "
                        + "; ".join(f"{flag} ({aliases[flag]}) in {', '.join(names)}"
                                    for flag, names in sorted(beside.items()))
                        + ". Name the alias (the command keeps its default as the parameter's default), or, where "
                          "the inline option means something else or has other bounds, declare it in "
                          "HOMONYMS_ACROSS_MODULES with how it differs from the alias")


@pytest.mark.parametrize("flag", sorted(HOMONYMS_ACROSS_MODULES))
def test_each_declared_homonym_across_modules_is_still_written_in_two(flag):
    difference = HOMONYMS_ACROSS_MODULES[flag]
    assert difference.strip() and "\n" not in difference, f"{flag}: say in one line how the meanings differ"
    sources, aliases = cli_sources(), options_aliases()
    beside = flag in written_beside_an_alias(sources, aliases)
    assert flag in written_in_two_modules(sources) or beside, \
        (f"{flag} is no longer written inline in two graftbench/cli modules, nor inline beside an alias in "
         "options.py: drop it from HOMONYMS_ACROSS_MODULES")
    if beside:
        assert aliases[flag] in difference, \
            f"{flag}: say how it differs from {aliases[flag]} in options.py, naming {aliases[flag]}"


def test_an_option_written_into_two_modules_is_caught():
    sources = {
        "one.py": "import typer\ndef a(t: int = typer.Option(1, '--threads', '-t', min=1, help='a')) -> None: ...\n",
        "two.py": "import typer\ndef b(t: int = typer.Option(2, '--threads', min=1, help='b')) -> None: ...\n",
        "three.py": ("import typer\nfrom graftbench.cli.options import ThreadsArg\n"
                     "def c(t: ThreadsArg = None, u: int = typer.Option(0, '-t', help='c')) -> None: ...\n"),
    }
    assert written_in_two_modules(sources) == {"--threads": ["one.py", "two.py"], "-t": ["one.py", "three.py"]}
    assert written_in_two_modules({"one.py": sources["one.py"]}) == {}


def test_the_aliases_are_found():
    aliases = options_aliases()
    assert aliases["--samples"] == "SamplesArg"
    assert aliases["--problems"] == aliases["-p"] == "ProblemsArg"
    assert aliases["--flash-attn"] == aliases["--no-flash-attn"] == "FlashAttnArg"


def test_an_option_written_beside_its_alias_is_caught():
    aliases = alias_flags(
        "import typer\nfrom typing import Annotated\n"
        "SeedArg = Annotated[int, typer.Option('--seed', min=0, help='run seed')]\n"
        "ColdArg: object = Annotated[bool, typer.Option('--cold/--no-cold', help='cold')]\n"
        "def helper(x: int = typer.Option(1, '--inner')) -> None: ...\n"
    )
    assert aliases == {"--seed": "SeedArg", "--cold": "ColdArg", "--no-cold": "ColdArg"}
    sources = {
        "one.py": "import typer\ndef a(s: int = typer.Option(0, '--seed', max=9, help='a')) -> None: ...\n",
        "two.py": ("import typer\nfrom graftbench.cli.options import SeedArg\n"
                   "def b(s: SeedArg = 0, w: bool = typer.Option(False, '--no-cold', help='w'),\n"
                   "      n: int = typer.Option(1, '--widths', help='n')) -> None: ...\n"),
    }
    assert written_beside_an_alias(sources, aliases) == {"--seed": ["one.py"], "--no-cold": ["two.py"]}
    assert written_beside_an_alias({"two.py": sources["two.py"].replace("'--no-cold'", "'--warm'")}, aliases) == {}
