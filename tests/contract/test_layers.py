"""The layer contract (pyproject.toml's ``[tool.importlinter]``, described in ARCHITECTURE.md): each stage imports
only the stages below it, no two modules of a stage import each other in a cycle, and the torch-free modules import
neither torch nor transformers. import-linter reads every import (function-local and ``TYPE_CHECKING`` ones too);
the tests of the test break the contract on purpose in a copy of the package."""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import graftbench

ROOT = Path(__file__).resolve().parents[2]
LINT = "import sys\nfrom importlinter.cli import lint_imports\nsys.exit(lint_imports(no_cache=True))\n"
TORCH_FREE = ("api", "util", "problems", "verify", "results", "report", "scale.merge", "cli.report", "cli.merge")


def lint(root: Path) -> subprocess.CompletedProcess:
    """Run import-linter on the package under ``root`` with the contract in ``root``'s pyproject.toml."""
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env={"PYTHONPATH": str(root), "PATH": ""},
                          capture_output=True, text=True, timeout=300)


def test_the_package_keeps_the_layer_contract():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 3 kept, 0 broken." in done.stdout


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory):
    """A pristine copy of the package and the contract, broken by each test in its own copy of this copy."""
    root = tmp_path_factory.mktemp("pristine")
    shutil.copytree(ROOT / "graftbench", root / "graftbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


LAYERS = "each stage imports only the stages below it"
BREAKS = {  # file, the lines appended to it, the contract they break
    "an upward import": ("util/seeds.py", "from ..engine.torch import forward\n", LAYERS),
    "a function-local upward import": ("results/metrics.py", "def _up():\n    from ..eval import evaluate\n", LAYERS),
    "a TYPE_CHECKING upward import": (
        "store/ids.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..engine.torch.session import TorchSession\n", LAYERS),
    "a cycle inside a stage": ("store/ids.py", "def _cycle():\n    from . import folder\n",
                               "no import cycle between the modules of a stage"),
    "torch in a torch-free module": ("results/metrics.py", "def _tensor():\n    import torch\n",
                                     "the torch-free modules never import torch or transformers themselves"),
}


@pytest.mark.parametrize("name", BREAKS)
def test_the_contract_fails_on_a_deliberate_break(name, package_copy, tmp_path):
    path, line, contract = BREAKS[name]
    shutil.copytree(package_copy, tmp_path, dirs_exist_ok=True)
    with open(tmp_path / "graftbench" / path, "a", encoding="utf-8") as file:
        file.write("\n\n" + line)
    done = lint(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{contract} BROKEN" in done.stdout


def test_the_contract_names_every_stage_of_the_package(package_copy, tmp_path):
    shutil.copytree(package_copy, tmp_path, dirs_exist_ok=True)
    (tmp_path / "graftbench" / "unplaced").mkdir()
    (tmp_path / "graftbench" / "unplaced" / "__init__.py").write_text('"""A stage in no layer."""\n')
    done = lint(tmp_path)
    assert done.returncode == 1 and "graftbench.unplaced" in done.stdout, done.stdout + done.stderr


def _torch_free_modules() -> list[str]:
    names = []
    for part in TORCH_FREE:
        module = importlib.import_module(f"graftbench.{part}")
        names.append(module.__name__)
        if hasattr(module, "__path__"):
            names += [m.name for m in pkgutil.walk_packages(module.__path__, f"{module.__name__}.")]
    return names


def test_importing_the_torch_free_modules_loads_neither_torch_nor_transformers():
    names = _torch_free_modules()
    assert {"graftbench.results.manifest", "graftbench.report.compare", "graftbench.cli.report"} <= set(names)
    code = f"import importlib, sys\nfor name in {names!r}:\n    importlib.import_module(name)\n" \
           "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(Path(graftbench.__file__).parents[1])})
    assert done.stdout.strip() == "[]"
