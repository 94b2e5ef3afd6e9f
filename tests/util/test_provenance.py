"""The code version and provenance block a result file records (graftbench/util/provenance.py), asked of real git
checkouts made in a temporary folder: clean, then dirty; outside any checkout; a folder a checkout does not track;
no git at all. git is needed to make the checkouts: without it these tests fail, never pass."""

from __future__ import annotations

import re
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path


from graftbench.results.manifest import environment
from graftbench.util import provenance
from graftbench.util.provenance import code_version, describe_code, package_version, provenance_line

ROOT = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=cwd,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _checkout(root: Path) -> Path:
    """A git checkout at ``root`` with one commit that tracks ``pkg/module.py``; returns ``pkg``."""
    package = root / "pkg"
    package.mkdir(parents=True)
    (package / "module.py").write_text("x = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", "pkg/module.py")
    _git(root, "commit", "-q", "-m", "first")
    return package


def _outside_any_checkout(folder: Path) -> Path:
    """``folder``, after checking that git finds no checkout above it (else this test would prove nothing)."""
    done = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True, text=True)
    assert done.returncode != 0, f"{folder} is inside the git checkout {done.stdout.strip()}: pick another folder"
    return folder


def test_a_clean_checkout_gives_its_commit_and_an_edit_to_a_tracked_file_makes_it_dirty(tmp_path):
    package = _checkout(_outside_any_checkout(tmp_path) / "repo")
    head = _git(package, "rev-parse", "HEAD")

    clean = code_version(package)
    assert re.fullmatch(r"[0-9a-f]{40}", clean["commit"]) and clean["commit"] == head
    assert clean["dirty"] is False and clean["reason"] is None
    assert clean["version"] == metadata.version("graftbench")

    (package / "untracked.py").write_text("y = 2\n")  # untracked files do not count
    assert code_version(package)["dirty"] is False
    (package / "module.py").write_text("x = 2\n")
    dirty = code_version(package)
    assert dirty["dirty"] is True and dirty["commit"] == head and dirty["reason"] is None
    _git(package, "add", "module.py")  # staged, not committed: still not the commit
    assert code_version(package)["dirty"] is True
    _git(package, "commit", "-q", "-m", "second")
    again = code_version(package)
    assert again["dirty"] is False and again["commit"] == _git(package, "rev-parse", "HEAD") != head


def test_outside_any_checkout_the_commit_is_null_with_its_reason(tmp_path):
    folder = _outside_any_checkout(tmp_path)

    code = code_version(folder)
    assert code["commit"] is None and code["dirty"] is None
    assert code["reason"].startswith(f"{folder} is not in a git checkout: `git rev-parse --show-toplevel` failed")
    assert code["version"] == metadata.version("graftbench")  # the version is known all the same


def test_a_folder_the_checkout_does_not_track_gives_no_commit(tmp_path):
    """An installed copy in a virtual environment inside a checkout: the checkout's commit is not its code."""
    root = _outside_any_checkout(tmp_path) / "repo"
    _checkout(root)
    installed = root / ".venv" / "site-packages" / "pkg"
    installed.mkdir(parents=True)
    (installed / "module.py").write_text("x = 1\n")

    code = code_version(installed)
    assert code["commit"] is None and code["dirty"] is None
    assert "none of its files is tracked there" in code["reason"] and str(root) in code["reason"]


def test_a_checkout_without_a_commit_and_a_missing_git_give_no_commit(tmp_path, monkeypatch):
    empty = _outside_any_checkout(tmp_path) / "empty"
    (empty / "pkg").mkdir(parents=True)
    (empty / "pkg" / "module.py").write_text("x = 1\n")
    _git(empty, "init", "-q")
    _git(empty, "add", "pkg/module.py")
    assert code_version(empty / "pkg")["reason"].startswith("`git rev-parse --verify HEAD` failed")

    package = _checkout(tmp_path / "repo")
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))
    code = code_version(package)
    assert code == {"version": metadata.version("graftbench"), "commit": None, "dirty": None,
                    "reason": "git is not installed (no `git` on PATH)"}


def test_the_version_falls_back_to_the_pyproject_beside_the_source(tmp_path, monkeypatch):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(provenance.metadata, "version", not_installed)
    (tmp_path / "pkg").mkdir()
    assert package_version(tmp_path / "pkg") is None  # no pyproject.toml either
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "1.0"\n')
    assert package_version(tmp_path / "pkg") is None  # another project's version is not graftbench's
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "graftbench"\nversion = "9.8.7"\n')
    assert package_version(tmp_path / "pkg") == "9.8.7"
    checkout = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert package_version() == checkout  # graftbench's own source folder: this checkout's pyproject


def test_the_provenance_block_holds_the_date_the_code_and_the_manifests_machine():
    block = provenance.provenance()
    assert set(block) == {"created_utc", "code", "machine"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", block["created_utc"])
    assert set(block["code"]) == {"version", "commit", "dirty", "reason"}
    here = environment()  # what a manifest records: the same machine fields, with the code beside them
    assert block["machine"] == {k: v for k, v in here.items() if k != "code"}
    assert set(here["code"]) == set(block["code"]) and here["code"]["version"] == block["code"]["version"]
    assert here["code"]["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", here["code"]["commit"])
    assert provenance.provenance(gpu="NVIDIA H200")["machine"]["gpu"] == "NVIDIA H200"


def test_the_line_names_the_machine_the_date_and_the_short_commit_as_text():
    code = {"version": "0.1.0", "commit": "ab" * 20, "dirty": True, "reason": None}
    block = {"created_utc": "2026-12-05T16:00:00Z", "code": code,
             "machine": {"cpu_model": "<b>CPU|*x*</b>", "cpu_capability_native": "AVX2", "cpu_kernel_flags": []}}
    assert describe_code(code) == "graftbench 0.1.0, commit abababababab + uncommitted changes"
    line = provenance_line(block)
    assert line == (r"Measured on &lt;b&gt;CPU\|\*x\*&lt;/b&gt; (AVX2; no kernel flags), 2026-12-05T16:00:00Z, "
                    "graftbench 0.1.0, commit abababababab + uncommitted changes.")
    assert describe_code({**code, "dirty": False}) == "graftbench 0.1.0, commit abababababab"
    assert describe_code({"version": None, "commit": None, "dirty": None, "reason": "no git"}) == \
        "graftbench (version unknown), commit unknown (no git)"
