"""The engine boundary (ARCHITECTURE.md, the engine seam): outside ``graftbench/engine/``, no module imports an
engine's folder (``graftbench.engine.torch``, ``graftbench.engine.llama_cpp``) or compares against an engine's name
(``"torch"``, ``"llama.cpp"``, or a dict keyed by them); stages reach an engine through
:mod:`graftbench.engine.registry` and :mod:`graftbench.engine.base`. Read from each module's syntax tree (function-
local imports counted), so that a new engine needs no edit outside its own folder and the registry.

The check is also run on deliberately bad snippets, so that it is seen to fail."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "graftbench"
ENGINE_FOLDERS = ("graftbench.engine.torch", "graftbench.engine.llama_cpp")
ENGINE_NAMES = frozenset({"torch", "llama.cpp"})
# The modules outside engine/ allowed to name an engine, each with why. A benchmark or a fault harness reaches an
# engine's own operations through the registry (registry.benchmark_ops, registry.fault_ops); a stage a run goes
# through (cli, eval, scale, results, store, report) has no exception.
ALLOWED = {
    "graftbench/bench/llama_raw.py": "the benchmark's raw-llama.cpp reference: it drives llama.cpp's bindings itself",
}
STAGES_WITHOUT_EXCEPTION = ("cli", "eval", "scale", "results", "store", "report", "verify", "problems", "programs",
                            "util")


def module_name(path: Path) -> str:
    """The dotted module name of the file ``path`` under the repository root."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The absolute module names an import node brings in (``from X import y`` counts ``X`` and ``X.y``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return [target] + [f"{target}.{alias.name}" for alias in node.names]


def _names_engine(node: ast.AST) -> bool:
    """Whether ``node`` is an engine's name as a string, or a tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in ENGINE_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_engine(item) for item in node.elts)
    return False


def _is_sys_modules(node: ast.AST) -> bool:
    """``sys.modules``: ``"torch" in sys.modules`` asks about the library's import, not the engine."""
    return isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name) \
        and node.value.id == "sys"


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """What in ``source`` (the text of module ``module``) crosses the engine boundary, one line each
    (``LINE: what``): an import of an engine's folder, a comparison with an engine's name, a dict keyed by one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for name in _imported(node, module, is_package):
            if any(name == folder or name.startswith(folder + ".") for folder in ENGINE_FOLDERS):
                found.append(f"{node.lineno}: imports {name}")
                break
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_names_engine(o) for o in operands) and not any(_is_sys_modules(o) for o in operands):
                found.append(f"{node.lineno}: compares against an engine's name")
        if isinstance(node, ast.Dict) and any(key is not None and _names_engine(key) for key in node.keys):
            found.append(f"{node.lineno}: a dict keyed by an engine's name")
    return found


def _outside_engine() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "engine" != p.relative_to(PACKAGE).parts[0])


def test_no_module_outside_engine_names_an_engine():
    crossing, outside = {}, _outside_engine()
    assert {PACKAGE / "cli" / "app.py", PACKAGE / "eval" / "exactness.py"} <= set(outside)  # not an empty glob
    for path in outside:
        relative = path.relative_to(ROOT).as_posix()
        if relative in ALLOWED:
            continue
        found = violations(path.read_text(), module_name(path), path.name == "__init__.py")
        if found:
            crossing[relative] = found
    assert crossing == {}, "\n".join(f"{path}: {'; '.join(lines)}" for path, lines in crossing.items())


def test_no_stage_a_run_goes_through_is_excepted():
    assert [path for path in ALLOWED if path.split("/")[1] in STAGES_WITHOUT_EXCEPTION] == []


def test_every_allowed_module_exists_and_still_needs_its_exception():
    for relative in ALLOWED:
        path = ROOT / relative
        assert path.is_file(), relative
        assert violations(path.read_text(), module_name(path)), f"{relative} no longer names an engine: drop it"


BAD = '''
from ..engine.torch import forward
import graftbench.engine.llama_cpp.session as llama


def open_it(name):
    from ..engine import llama_cpp
    if name == "llama.cpp":
        return llama
    if name in ("torch", "other"):
        return forward
    return {"torch": 1, "llama.cpp": 2}[name]
'''


def test_the_check_sees_each_kind_of_crossing_in_a_bad_snippet():
    found = sorted(violations(BAD, "graftbench.cli.bad"), key=lambda line: int(line.split(":")[0]))
    assert found == [
        "2: imports graftbench.engine.torch",
        "3: imports graftbench.engine.llama_cpp.session",
        "7: imports graftbench.engine.llama_cpp",  # ``from ..engine import llama_cpp``: the folder by name
        "8: compares against an engine's name",
        "10: compares against an engine's name",
        "12: a dict keyed by an engine's name",
    ]


@pytest.mark.parametrize("clean", [
    "from ..engine import registry\nfactory = registry.get(name)\n",
    "import sys\nloaded = 'torch' in sys.modules\n",
    "from ..engine.base import RAY, require\nrequire(factory, RAY)\n",
    "name = config.get('engine')\n",
])
def test_the_check_passes_code_that_goes_through_the_registry(clean):
    assert violations(clean, "graftbench.cli.clean") == []
