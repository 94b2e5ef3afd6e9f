"""Where a result comes from: the code version that wrote it (graftbench's version and, in a git checkout, the
commit and whether the tracked files differ from it), the machine, and the date, as one ``provenance`` block.

Every benchmark file carries :func:`provenance` under ``provenance`` (:mod:`graftbench.bench.history`); every run
and exactness manifest records :func:`code_version` as ``environment.code``
(:func:`graftbench.results.manifest.environment`), inside what its SHA-256 seals. Nothing is cached: each call asks
git again. The code version is read once, when a command or library entry point starts its work (a run, a check,
a replay, a benchmark, a trace), and passed down as a value to what writes the file, so a file written hours later
names the code that produced it, not the commit the checkout has moved to since. Imports no torch.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import tomllib
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from . import isa
from .display_text import markdown_text

PACKAGE = "graftbench"
SOURCE = Path(__file__).resolve().parents[1]  # graftbench's own package folder (where its modules are read from)
GIT_TIMEOUT_S = 10  # each git call; a checkout on a hung network file system must not hang the writer
SHORT_COMMIT = 12  # hex digits of a commit shown in a line of text (the results index shows as many)
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256 object names


def package_version(source: Path = SOURCE) -> str | None:
    """graftbench's version: the installed distribution's (``importlib.metadata``), else the ``version`` of the
    ``pyproject.toml`` beside ``source`` (a source tree run without installing), else ``None``. Raises nothing."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        pass
    try:
        project = tomllib.loads((source.parent / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    version = project.get("version") if project.get("name") == PACKAGE else None
    return version if isinstance(version, str) else None


def _git(args: list[str], cwd: Path) -> tuple[str | None, str]:
    """``git args`` run in ``cwd``: ``(stdout, "")`` when it succeeds, ``(None, why)`` when it fails (``why``
    starts with the command in backticks, then git's first error line) or cannot run (``why`` starts with
    ``git``). Variables that point git elsewhere (``GIT_DIR``, ...) are dropped, and
    ``GIT_OPTIONAL_LOCKS=0`` keeps ``git status`` from taking the index lock a concurrent commit needs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | {"GIT_OPTIONAL_LOCKS": "0",
                                                                               "LC_ALL": "C"}
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        return None, "git is not installed (no `git` on PATH)"
    except subprocess.TimeoutExpired:
        return None, f"git took over {GIT_TIMEOUT_S} s to answer `git {' '.join(args)}`"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"git could not run `git {' '.join(args)}` ({exc})"
    if done.returncode != 0:
        first = next((line.strip() for line in done.stderr.splitlines() if line.strip()), "no message")
        return None, f"`git {' '.join(args)}` failed: {first[:200]}"
    return done.stdout, ""


def _checkout(source: Path) -> tuple[str | None, bool | None, str | None]:
    """``(commit, dirty, reason)`` of the git checkout holding ``source``; see :func:`code_version`."""
    if not source.is_dir():
        return None, None, f"{source} is not a folder"
    top, why = _git(["rev-parse", "--show-toplevel"], source)
    if top is None:  # git ran and said no, or could not run at all (then ``why`` says so alone)
        return None, None, f"{source} is not in a git checkout: {why}" if why.startswith("`") else why
    tracked, why = _git(["ls-files", "-z", "--", "."], source)
    if tracked is None or not tracked:
        return None, None, why or (f"{source} is inside the git checkout {top.strip()} but none of its files is "
                                   "tracked there (an installed copy, not that checkout's source)")
    head, why = _git(["rev-parse", "--verify", "HEAD"], source)
    commit = (head or "").strip()
    if not _COMMIT.fullmatch(commit):
        return None, None, why or f"git named HEAD {commit[:80]!r}, not a commit"
    status, why = _git(["status", "--porcelain", "--untracked-files=no"], Path(top.strip()))
    if status is None:
        return commit, None, why
    return commit, bool(status.strip()), None


def code_version(source: Path = SOURCE) -> dict:
    """The code version a result is written by. Raises nothing: what cannot be found is ``None`` with its reason.

    ``source`` is the folder whose checkout is asked (graftbench's own package folder by default; tests pass
    another). Returns a dict of four fields:

    - ``version``: graftbench's package version (:func:`package_version`), ``None`` when neither installed metadata
      nor a ``pyproject.toml`` names one;
    - ``commit``: the full object name (40 hex digits) of ``HEAD`` of the git checkout ``source`` is in, when
      ``source``'s files are tracked there; ``None`` when git is missing, ``source`` is in no checkout (an
      installed wheel), or is in one that does not track it (a virtual environment inside a checkout);
    - ``dirty``: whether any tracked file differs from that commit (``git status --porcelain
      --untracked-files=no`` prints a line: staged or unstaged edits, deletions); untracked files do not count;
      ``None`` when ``commit`` is ``None`` or git status failed;
    - ``reason``: why ``commit`` or ``dirty`` is ``None`` (one line), ``None`` when both are known.
    """
    commit, dirty, reason = _checkout(source)
    return {"version": package_version(source), "commit": commit, "dirty": dirty, "reason": reason}


def machine() -> dict:
    """The machine a result was measured on, as manifests record it: Python version, OS (``platform.platform()``),
    architecture, and the CPU (:func:`graftbench.util.isa.environment`: model name, native capability, kernel
    flags). No host or user names. Raises nothing."""
    return {"python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
            **isa.environment()}


def provenance(gpu: str | None = None, source: Path = SOURCE, code: dict | None = None) -> dict:
    """The provenance block of a result file: ``created_utc`` (now, ISO 8601 UTC to the second, ``Z``),
    ``code`` (the code version read when the measurement started, given by its caller; ``None`` reads
    :func:`code_version` of ``source`` now) and ``machine`` (:func:`machine`, with ``gpu``, the GPU's name, when the
    result was measured on one). Raises nothing."""
    where = machine() | ({"gpu": gpu} if gpu else {})
    return {"created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "code": code if code is not None else code_version(source), "machine": where}


def describe_code(code: dict) -> str:
    """``graftbench 0.1.0, commit 447c9798433e`` (the commit's first :data:`SHORT_COMMIT` hex digits), with
    `` + uncommitted changes`` when ``dirty``, or ``commit unknown (reason)``; from a :func:`code_version` dict
    (missing fields read as unknown)."""
    version = code.get("version") or "(version unknown)"
    commit = code.get("commit")
    if not isinstance(commit, str) or not commit:
        return f"{PACKAGE} {version}, commit unknown ({code.get('reason') or 'not recorded'})"
    dirty = {True: " + uncommitted changes", None: " (uncommitted changes not known)"}.get(code.get("dirty"), "")
    return f"{PACKAGE} {version}, commit {commit[:SHORT_COMMIT]}{dirty}"


def provenance_text(block: dict) -> str:
    """One plain-text line naming a :func:`provenance` block's machine (:func:`graftbench.util.isa.describe_cpu`),
    date and code version (:func:`describe_code`), for a text file or a terminal printing without markup."""
    where = isa.describe_cpu(block.get("machine") or {})
    date, code = block.get("created_utc") or "date unknown", describe_code(block.get("code") or {})
    return f"Measured on {where}, {date}, {code}."


def provenance_line(block: dict) -> str:
    """:func:`provenance_text` as one markdown line, every recorded value shown as text, never markup."""
    return markdown_text(provenance_text(block))
