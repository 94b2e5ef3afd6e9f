"""The install recipe: compatible ranges in pyproject.toml, the exact versions in constraints.txt (make install)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
# The GPU host the prepared script targets (docs/gpu.md): what it already holds must satisfy the ranges.
GPU_HOST = {"python": "3.12.3", "torch": "2.11.0", "transformers": "5.17.0"}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements() -> list[Requirement]:
    project = _project()
    lines = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        lines.extend(extra)
    return [Requirement(line) for line in lines]


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([0-9][A-Za-z0-9.+!\-]*)", line)
            assert match, f"constraints.txt line {line!r} is not an exact name==version pin"
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def test_no_package_requirement_is_an_exact_pin():
    exact = [str(r) for r in _requirements() if any(s.operator in ("==", "===") for s in r.specifier)]
    assert exact == []
    assert all(str(r.specifier) for r in _requirements()), "every requirement states a lower bound"


def test_every_requirement_has_one_exact_constraint_inside_its_range():
    pins = _constraints()
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} has no exact version in constraints.txt"
        assert Version(pins[name]) in requirement.specifier, f"{name}=={pins[name]} is outside {requirement}"


def test_constraints_pin_what_this_venv_runs_for_the_model_libraries():
    from importlib import metadata

    pins = _constraints()
    for name in ("transformers", "tokenizers", "safetensors", "numpy"):
        assert pins[name] == metadata.version(name)
    assert Version(metadata.version("torch")).base_version == pins["torch"]


def test_the_gpu_hosts_python_torch_and_transformers_satisfy_the_ranges():
    project = _project()
    assert Version(GPU_HOST["python"]) in SpecifierSet(project["requires-python"])
    by_name = {canonicalize_name(r.name): r for r in _requirements()}
    assert Version(GPU_HOST["torch"]) in by_name["torch"].specifier
    assert Version(GPU_HOST["transformers"]) in by_name["transformers"].specifier
    assert Version("3.10.14") not in SpecifierSet(project["requires-python"])


def test_make_install_passes_the_constraints_to_every_pip_install_of_the_package():
    text = (ROOT / "Makefile").read_text()
    assert "CONSTRAINTS := -c constraints.txt" in text
    assert "pip install -q $(CONSTRAINTS) torch\n" in text
    assert "pip install -q $(CONSTRAINTS) -e '.[test]'" in text
    assert "$(STAMP): pyproject.toml constraints.txt Makefile" in text


# What the GPU host lacks of graftbench's requirements (docs/gpu.md): xxhash and rfc8785 travel as wheels, the
# others must not be imported on the path make gpu-certify runs.
GPU_HOST_LACKS = ("gguf", "accelerate", "bm25s", "cydifflib", "pyseccomp", "matplotlib", "latex2sympy2_extended",
                  "datasets", "ray", "hypothesis", "s3fs", "boto3", "PIL", "psutil")
GPU_PATH_MODULES = ("graftbench.cli.app", "graftbench.cli.exact", "graftbench.cli.bench", "graftbench.eval.exactness",
                    "graftbench.engine.torch.session", "graftbench.engine.torch.graft", "graftbench.engine.torch.random_weights",
                    "graftbench.bench.run", "graftbench.bench.report", "graftbench.bench.gpu_name")


def test_the_gpu_scripts_modules_import_without_the_packages_the_gpu_host_lacks():
    import subprocess
    import sys

    code = f"""
import importlib, importlib.machinery, sys
lacks = set({GPU_HOST_LACKS!r})
class Lacking(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in lacks:
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)
sys.meta_path = [Lacking if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
for module in {GPU_PATH_MODULES!r}:
    importlib.import_module(module)
print(sorted(lacks & {{name.split(".")[0] for name in sys.modules}}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _makefile_python_snippets() -> list[str]:
    """The code of every ``python -c '...'`` in the Makefile, make's ``$$`` read as ``$``."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    return [code.replace("$$", "$") for code in re.findall(r"python -c '([^']*)'", text)]


def test_every_python_snippet_in_the_makefile_imports_what_exists():
    """A module moved by the layout leaves no Makefile target importing it from its old place."""
    import ast
    import importlib
    import importlib.util

    snippets = _makefile_python_snippets()
    assert len(snippets) >= 5
    imported = []
    for code in snippets:
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("graftbench"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), \
                        f"Makefile: {node.module} has no {alias.name}"
                    imported.append(f"{node.module}.{alias.name}")
    assert "graftbench.util.isa" in imported
    assert "graftbench.results.anchor.write_index" in imported
