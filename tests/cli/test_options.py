"""Options are values, not globals: each invocation builds its own :class:`graftbench.settings.ModelOptions` and
:class:`graftbench.settings.EvalSettings` and passes them down by name; no module of ``graftbench/cli`` keeps
state between invocations (an AST check, shown to fail on a module that does)."""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.engine import registry
from graftbench.engine.models import ModelError
from graftbench.settings import EvalSettings

from tests import stand_in_engine

CLI = Path(__file__).resolve().parents[2] / "graftbench" / "cli"
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "remove", "discard",
            "clear", "appendleft", "extendleft", "__setitem__", "__delitem__"}
MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque"}


def _mutable(value: ast.expr | None) -> bool:
    """Whether a module-level assignment's value is a dict, list or set (a display, a comprehension or a call)."""
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name | ast.Attribute)
            and (getattr(value.func, "id", None) or getattr(value.func, "attr", None)) in MUTABLE_CALLS)


def _root_name(node: ast.expr) -> str | None:
    """``NAME`` of ``NAME[...]``, ``NAME[...][...]`` or ``NAME.attr[...]``; else ``None``."""
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


CACHES = {"lru_cache", "cache", "cached_property"}


def _module_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names a module binds at its top level (tuple targets unpacked), and those of them bound to a dict, list
    or set (an element of an unpacked tuple display counted by its own value)."""
    bound, mutable = set(), set()
    for node in tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            pairs = (zip(target.elts, node.value.elts) if isinstance(target, ast.Tuple)
                     and isinstance(node.value, ast.Tuple) else [(target, node.value)])
            for name, value in pairs:
                if isinstance(name, ast.Name):
                    bound.add(name.id)
                    if _mutable(value):
                        mutable.add(name.id)
            if isinstance(target, ast.Tuple) and not isinstance(node.value, ast.Tuple):
                bound.update(e.id for e in target.elts if isinstance(e, ast.Name))
    return bound, mutable


def _decorator_name(decorator: ast.expr) -> str | None:
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    return getattr(node, "attr", None) or getattr(node, "id", None)


def module_state(source: str) -> list[str]:
    """Where the module ``source`` keeps state between calls: every ``global`` statement; every place a function
    changes a dict, list or set bound at module level (an item assigned or deleted, or a mutating method called);
    every attribute a function assigns on an object bound at module level; every function cached across calls
    (``functools.lru_cache``, ``cache``); every mutable default argument. Each as ``"line: what"``; empty when there
    is none."""
    tree = ast.parse(source)
    bound, names = _module_names(tree)
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if not isinstance(function, ast.Lambda):
            found += [f"{function.lineno}: {function.name} is cached across calls"
                      for decorator in function.decorator_list if _decorator_name(decorator) in CACHES]
        found += [f"{function.lineno}: a mutable default argument" for default in
                  function.args.defaults + [d for d in function.args.kw_defaults if d is not None] if _mutable(default)]
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                found.append(f"{node.lineno}: global {', '.join(node.names)}")
            targets = (node.targets if isinstance(node, ast.Assign | ast.Delete) else
                       [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
            for target in targets:
                if isinstance(target, ast.Subscript) and _root_name(target) in names:
                    found.append(f"{node.lineno}: an item of module-level {_root_name(target)} is set or deleted")
                if isinstance(target, ast.Attribute) and _root_name(target) in bound:
                    found.append(f"{node.lineno}: an attribute of module-level {_root_name(target)} is set")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
                    and _root_name(node.func.value) in names):
                found.append(f"{node.lineno}: module-level {_root_name(node.func.value)}.{node.func.attr}()")
    return sorted(set(found), key=lambda line: int(line.split(":")[0]))


BAD = textwrap.dedent('''
    _DEVICE = {"name": "auto"}
    _SEEN: set[str] = set()
    _LOG = []
    COUNT = 0
    FIXED = {"a": 1}  # read, never changed: allowed


    def remember(value):
        _DEVICE["name"] = value
        _SEEN.add(value)
        return FIXED["a"]


    def bump():
        global COUNT
        COUNT += 1
        _LOG.append(COUNT)
''')


def test_the_state_check_finds_each_kind_of_module_state():
    assert module_state(BAD) == ["10: an item of module-level _DEVICE is set or deleted", "11: module-level _SEEN.add()",
                                 "16: global COUNT", "18: module-level _LOG.append()"]
    more = textwrap.dedent('''
        import functools
        EVAL, SEEN = object(), []


        @functools.lru_cache(maxsize=None)
        def checked(hub_id):
            return hub_id


        def remember(value, seen={}):
            EVAL.device = value
            SEEN.append(value)
    ''')
    assert module_state(more) == ["7: checked is cached across calls", "11: a mutable default argument",
                                  "12: an attribute of module-level EVAL is set", "13: module-level SEEN.append()"]
    assert module_state("TABLE = {'a': 1}\n\ndef read(key):\n    local = {}\n    local[key] = TABLE[key]\n") == []


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_no_module_of_the_cli_keeps_state_between_invocations(path):
    assert module_state(path.read_text(encoding="utf-8")) == [], path


# ---- two invocations in one process, each with its own engine and device ----


class _Recording:
    """An engine factory that records what each open asked for, then refuses to load (no model needed)."""

    def __init__(self, factory, opened: list):
        self._factory, self._opened = factory, opened

    def __getattr__(self, name):
        return getattr(self._factory, name)

    def open(self, options):
        self._opened.append((self._factory.name, options.device, options.kernels, options.model))
        raise ModelError("stand-in: no model loaded")


def test_two_invocations_in_one_process_each_open_the_model_with_their_own_options(monkeypatch, tmp_path):
    """Each invocation's --engine, --device and --kernels reach the engine's open as its own values, whatever an
    earlier invocation in the process passed. Click runs an option's callback on every invocation, so a callback
    that stored its value in a module global would pass this too: what rules out state kept between invocations
    (a global, a cache, an attribute set on a module-level object) is the AST check above."""
    registry.register(stand_in_engine.NAME, f"{stand_in_engine.__name__}:ENGINE")
    try:
        opened: list = []
        real_get = registry.get
        monkeypatch.setattr(registry, "get", lambda name: _Recording(real_get(name), opened))
        runner = CliRunner()
        store, runs = str(tmp_path / "store"), str(tmp_path / "runs")
        invocations = [
            ["deposit", "--engine", "torch", "--device", "cpu", "--kernels", "fast", "--limit", "1", "--store", store],
            ["solve", "--engine", stand_in_engine.NAME, "--model", stand_in_engine.MODEL_PREFIX, "--limit", "1",
             "--runs-dir", runs],
            ["solve", "--engine", "torch", "--device", "cpu", "--limit", "1", "--runs-dir", runs],
            ["deposit", "--limit", "1", "--store", store],
        ]
        for arguments in invocations:
            result = runner.invoke(app, arguments)
            assert result.exit_code == 2 and "stand-in: no model loaded" in result.output, (arguments, result.output)
    finally:
        registry.unregister(stand_in_engine.NAME)
    assert opened == [("torch", "cpu", "fast", "smollm2-135m"),
                      (stand_in_engine.NAME, "auto", "certified", stand_in_engine.MODEL_PREFIX),
                      ("torch", "cpu", "certified", "smollm2-135m"),
                      ("torch", "auto", "certified", "smollm2-135m")]


# ---- --max-new-tokens followed from the command line to run_problem, by signature ----


def _eval_chain():
    """The functions ``eval --max-new-tokens N`` passes through to the decode budget of each problem, in order."""
    from graftbench.cli import app as cli_app
    from graftbench.eval import eval_run, evaluate
    from graftbench.scale import eval_job

    return [cli_app.eval_, cli_app._eval_command, eval_job.run_job, eval_job.execute, eval_run.run_eval,
            evaluate.evaluate, evaluate.run_problem]


def _takes_the_budget(function) -> str | None:
    """The parameter by which ``function`` takes the decode budget: ``max_new_tokens`` itself, or an
    :class:`EvalSettings`, or a request holding one (its ``settings`` field)."""
    hints = typing.get_type_hints(function, include_extras=True)
    for name in inspect.signature(function).parameters:
        hint = typing.get_args(hints.get(name))[0] if hasattr(hints.get(name), "__metadata__") else hints.get(name)
        if name == "max_new_tokens" or hint is EvalSettings or (
                isinstance(hint, type) and typing.get_type_hints(hint).get("settings") is EvalSettings):
            return name
    return None


def _calls(function) -> set[str]:
    """The names ``function``'s body calls (``f(...)`` and ``x.f(...)``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {getattr(node.func, "id", None) or getattr(node.func, "attr", None) for node in ast.walk(tree)
            if isinstance(node, ast.Call)}


def test_max_new_tokens_is_followed_from_eval_to_run_problem_by_name():
    chain = _eval_chain()
    assert [(f.__name__, _takes_the_budget(f)) for f in chain] == [
        ("eval_", "max_new_tokens"), ("_eval_command", "request"), ("run_job", "request"), ("execute", "request"), ("run_eval", "settings"),
        ("evaluate", "settings"), ("run_problem", "settings")]
    for caller, callee in zip(chain, chain[1:]):
        assert callee.__name__ in _calls(caller), f"{caller.__name__} does not call {callee.__name__}"


# ---- one mapping from the stage's typed errors to exit statuses ----


def test_every_kind_of_failure_has_its_exit_status_and_other_errors_pass():
    import typer

    from graftbench.cli.errors import EXIT_CODES, mapped_errors
    from graftbench.eval.errors import KINDS, Interrupted, NotVerified, Refused, WriteFailed

    assert {kind for kind, _ in EXIT_CODES} == set(KINDS)
    for error, code in ((Refused("r"), 2), (NotVerified("n"), 1), (WriteFailed("w"), 2), (Interrupted("i"), 130)):
        with pytest.raises(typer.Exit) as stopped, mapped_errors():
            raise error
        assert stopped.value.exit_code == code, error
    with pytest.raises(KeyError), mapped_errors():  # not a refusal: a bug, shown as such
        raise KeyError("x")


def test_mapping_an_error_imports_nothing():
    import subprocess
    import sys

    code = ("import sys\nfrom graftbench.cli.errors import mapped_errors\nfrom graftbench.eval.errors import Refused\n"
            "try:\n    with mapped_errors():\n        raise Refused('r')\nexcept SystemExit:\n    pass\n"
            "except BaseException as exc:\n    assert type(exc).__name__ == 'Exit', exc\n"
            "print(sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


def test_every_refusal_type_the_error_mapping_names_exists():
    """cli/errors.REFUSALS names its error types by module and name (looked up only once imported): each must
    still be an exception class there, or a rename would turn that refusal into a traceback."""
    import importlib

    from graftbench.cli.errors import REFUSALS

    for module, name in REFUSALS:
        error = getattr(importlib.import_module(module), name, None)
        assert isinstance(error, type) and issubclass(error, Exception), f"{module}.{name}"
