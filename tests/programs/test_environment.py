"""The program environment (graftbench/programs/environment.py): what a build holds, that a stale or missing one is
refused, and, in a regular (non-editable) install of a wheel of graftbench, that a program in the sandbox can neither
import graftbench nor read the installation's other packages or a problem file, while sympy and numpy work.

The build and staleness tests use a small fake installation (no root, no sandbox). The regular-install test needs
the sandbox (root, bubblewrap, cgroup v1) and builds a wheel offline from a copy of the checkout's package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from graftbench.programs import environment
from tests.programs import sandbox_here

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake base installation of three files, and builds going into ``tmp_path/builds``."""
    base = tmp_path / "base"
    files = {"bin/python3.11": "interpreter", "lib/python3.11/os.py": "# os\n",
             "lib/python3.11/site-packages/sympy/__init__.py": "# sympy\n"}
    for name, text in files.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(text)
    monkeypatch.setattr(environment, "sources", lambda: (base, {name: base / name for name in files}))
    monkeypatch.setattr(environment, "_interpreter", lambda b: b / "bin" / "python3.11")
    monkeypatch.setattr(environment, "root", lambda: tmp_path / "builds")
    return base


def test_a_build_holds_its_sources_and_a_reduced_etc_read_only(fake):
    built = environment.build()
    assert sorted(p.name for p in built.path.iterdir()) == ["environment.json", "etc", "prefix"]
    assert (built.path / "prefix" / "lib/python3.11/site-packages/sympy/__init__.py").read_text() == "# sympy\n"
    assert sorted(os.listdir(built.path / "etc")) == ["group", "nsswitch.conf", "passwd"]
    assert "nobody:x:" in (built.path / "etc" / "passwd").read_text()
    for dirpath, dirnames, filenames in os.walk(built.path):
        for name in [*dirnames, *filenames]:
            assert not os.lstat(os.path.join(dirpath, name)).st_mode & 0o222, name  # nothing writable
    assert built.record["sha256"] == environment.content_sha256(built.path)[0] and built.record["files"] == 6
    assert built.prefix == str(fake) and built.python == str(fake / "bin" / "python3.11")
    assert built.binds()[:2] == [(str(built.path / "prefix"), str(fake)), (str(built.path / "etc"), "/etc")]
    assert environment.load() == built and environment.build() == built  # built once


def test_a_missing_or_stale_environment_is_refused_with_how_to_build_it(fake):
    with pytest.raises(environment.ProgramEnvironmentError, match=r"is not built: run `make program-env`"):
        environment.load()
    environment.build()
    os.utime(fake / "lib/python3.11/os.py", ns=(1, 1))  # a source changed (an upgraded package)
    with pytest.raises(environment.ProgramEnvironmentError, match=r"is stale .*: run `make program-env`") as stale:
        environment.load()
    assert "\n" not in str(stale.value)
    assert environment.build().record["key"] == environment.key(environment.sources()[1])  # rebuilt under a new key


def test_a_build_whose_content_changed_is_refused(fake):
    built = environment.build()
    changed = built.path / "prefix" / "lib/python3.11/os.py"
    os.chmod(changed, 0o644)
    changed.write_text("# os, changed after the build\n")
    with pytest.raises(environment.ProgramEnvironmentError, match="does not hold what its record states"):
        environment.load()


def _torch_library() -> Path:
    """torch's ``libtorch.so``, found without importing torch: it loads ``libtorch_cpu.so`` from torch's own ``lib``
    folder, which is no system library folder wherever the virtual environment lies outside them."""
    return Path(importlib.util.find_spec("torch").origin).parent / "lib" / "libtorch.so"


@pytest.mark.parametrize("subject", ["interpreter", "torch"])
def test_a_library_outside_the_system_folders_refuses_the_build(tmp_path, subject):
    """A binary that loads a library from a folder of the host that is no system library folder, the library not
    part of the build (another base): the build refuses rather than binding that folder into the sandbox. Shown on
    the interpreter's libpython, and on torch's ``libtorch.so`` (its ``libtorch_cpu.so``), which holds on every
    machine: an interpreter linked statically with libpython has nothing outside the system folders to load."""
    if shutil.which("ldd", path="/usr/bin:/bin") is None:
        pytest.fail("ldd is not installed (libc-bin): the program environment cannot be built here either")
    binary = Path(sys.executable).resolve() if subject == "interpreter" else _torch_library()
    linked = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
    if subject == "interpreter" and "libpython" not in linked:
        pytest.skip(f"{binary} is linked statically with libpython: nothing outside the system folders to load "
                    "(the torch case shows the refusal)")
    assert subject == "interpreter" or "libtorch_cpu.so" in linked, linked
    with pytest.raises(environment.ProgramEnvironmentError, match="not a system library folder"):
        environment._libraries([binary], tmp_path / "prefix", tmp_path / "another-base")


def test_the_real_sources_hold_the_standard_library_and_the_offered_packages_only():
    base, found = environment.sources()
    stdlib = "lib/python{}.{}/".format(*sys.version_info[:2])
    site_tops = {name.split("/")[3] for name in found if name.startswith(stdlib + "site-packages/")}
    distributions = {name.split("-")[0] for name in site_tops if name.endswith(".dist-info")}
    assert distributions == set(environment.PACKAGES)
    assert site_tops - {n for n in site_tops if n.endswith(".dist-info")} == {
        "sympy", "mpmath", "numpy", "numpy.libs", "isympy.py", "__pycache__"}  # isympy: part of sympy's own record
    assert not any(name.startswith((stdlib + "test/", stdlib + "ensurepip/", stdlib + "idlelib/")) for name in found)
    assert stdlib + "json/__init__.py" in found and "bin/python{}.{}".format(*sys.version_info[:2]) in found


# ---------------------------------------------------------------------------------------------------------------
# A regular install: a wheel of graftbench, installed --no-deps beside its dependencies.

PROGRAMS = {
    "import": "import graftbench\n",
    "generator": "print(open({generator!r}).read()[:80])\n",
    "record": "print(open({record!r}).read()[:80])\n",
    "dependency": "print(open({dependency!r}).read()[:80])\n",
    "problem": "print(open({problem!r}).read())\n",
    "sympy-numpy": "import numpy, sympy\nprint(int(numpy.arange(1, 4).sum()) + int(sympy.binomial(10, 3)))\n",
}
HOST = """\
import json, sys
import graftbench
from graftbench.programs import sandbox
programs = json.loads(sys.argv[1])
box = sandbox.open_sandbox()
results = {name: box.run(source) for name, source in programs.items()}
print(json.dumps({"graftbench": graftbench.__file__, "isolation": box.isolation.description,
                  **{name: [r.stopped, r.answer, r.stderr_tail[-300:]] for name, r in results.items()}}))
"""


def _run(command: list[str], cwd: Path, timeout: int = 600) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]})
    assert done.returncode == 0, f"{command[:4]}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.slow
def test_in_a_regular_install_a_program_reaches_neither_graftbench_nor_the_installation(tmp_path):
    sandbox_here()
    source = tmp_path / "source"
    shutil.copytree(ROOT / "graftbench", source / "graftbench", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(tmp_path / "wheels"), str(source)], tmp_path)
    wheel, = (tmp_path / "wheels").glob("graftbench-*.whl")
    scratch = tmp_path / "scratch"
    _run([sys.executable, "-m", "venv", "--without-pip", str(scratch)], tmp_path)
    python = scratch / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        tmp_path).strip())
    dependencies = Path(site.getsitepackages()[0])  # the checkout's venv: the wheel's dependencies, beside it
    (purelib / "dependencies.pth").write_text(f"{dependencies}\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
          str(wheel)], tmp_path)
    installed = purelib / "graftbench"
    assert (installed / "problems" / "builtin.py").is_file()
    assert not list(purelib.glob("__editable__*"))  # a regular install, not an editable one
    # control: outside the sandbox, this installation's interpreter imports graftbench, from the wheel
    assert _run([str(python), "-I", "-c", "import graftbench; print(graftbench.__file__)"], tmp_path).strip() == \
        str(installed / "__init__.py")
    _run([str(python), "-m", "graftbench.programs.environment"], tmp_path)
    assert (scratch / environment.FOLDER).is_dir()
    problem = tmp_path / "problems.jsonl"
    problem.write_text('{"id": "p1", "problem": "What is 6*7?", "answer": "42"}\n')
    paths = {"generator": str(installed / "problems" / "builtin.py"),
             "record": str(next(purelib.glob("graftbench-*.dist-info")) / "RECORD"),
             "dependency": str(dependencies / "typer" / "__init__.py"), "problem": str(problem)}
    for path in paths.values():
        assert Path(path).is_file()
    programs = {name: text.format(**paths) for name, text in PROGRAMS.items()}
    (tmp_path / "host.py").write_text(HOST)
    found = json.loads(_run([str(python), str(tmp_path / "host.py"), json.dumps(programs)], tmp_path))
    assert found["graftbench"] == str(installed / "__init__.py")  # the regular install, not the checkout
    assert found["import"][:2] == ["crashed", None] and "No module named 'graftbench'" in found["import"][2]
    for name in ("generator", "record", "dependency", "problem"):
        assert found[name][:2] == ["crashed", None] and "FileNotFoundError" in found[name][2], (name, found[name])
    assert found["sympy-numpy"][:2] == [None, "126"]
    assert "read-only root holding only the program environment" in found["isolation"]
    assert "numpy" in found["isolation"] and "sympy" in found["isolation"]
