"""Where committed manifests and results live: two roots, one folder per kind of machine in each, one naming
scheme. Imports no torch.

``manifests/<kind>/`` holds the run manifests and exactness expectations recorded on that kind of machine;
``manifests/SHA256SUMS`` (every manifest's SHA-256, paths relative to ``manifests/``), ``manifests/replays.jsonl``
(the replay log of the expectations), ``manifests/emulated-replays.jsonl`` (replays on an emulated CPU) and
``manifests/program-replays.jsonl`` (the program replay log) sit at its root. ``results/<kind>/bench/`` holds the
benchmark results recorded on that kind (earlier runs under ``bench/runs/``), ``results/<kind>/reports/`` its report
folders, ``results/<kind>/traces/`` the trace comparisons and op probes made there (docs/portable-pin.md).
``<kind>`` names a kind of machine, e.g. ``amd-epyc-avx512`` or ``intel-xeon-amx`` (docs/manifests.md gives the
naming scheme of the files).

Manifests lay under ``results/<kind>/manifests/`` before: files written then (a report's ``summary.json``, the
program replay log's older lines) name that path, and are never rewritten; :func:`current_path` finds where such a
recorded path lies now.
"""

from __future__ import annotations

from pathlib import Path, PurePath, PurePosixPath

MANIFESTS = Path("manifests")
RESULTS = Path("results")
BENCH = "bench"
REPORTS = "reports"
# The kind of machine the portable-pin expectations were first recorded on: every bundled model and dtype has one
# there, while another kind's folder fills over sessions.
REFERENCE_KIND = "amd-epyc-avx512"
REPLAY_LOG = MANIFESTS / "replays.jsonl"
# Replays on an emulated CPU (graftbench.util.cpuid; `make replay-emulated`): evidence about dispatch, kept apart.
EMULATED_REPLAY_LOG = MANIFESTS / "emulated-replays.jsonl"
PROGRAM_REPLAY_LOG = MANIFESTS / "program-replays.jsonl"
PROGRAM_MANIFESTS = "manifests/*/*program*.json"  # every committed program-mode manifest (a glob below the checkout)
_EARLIER_MANIFESTS = "manifests"  # the folder name under results/<kind>/ that held a kind's manifests before


def kinds(root: Path) -> list[str]:
    """The kinds of machine with a folder under ``root/manifests`` or ``root/results``, sorted by name (empty when
    there is none)."""
    folders = (Path(root) / MANIFESTS, Path(root) / RESULTS)
    return sorted({p.name for folder in folders if folder.is_dir() for p in folder.iterdir() if p.is_dir()})


def manifest_folder(root: Path, kind: str) -> Path:
    """``root/manifests/<kind>``: where the manifests recorded on ``kind`` live."""
    return Path(root) / MANIFESTS / kind


def manifest_folders(root: Path) -> list[Path]:
    """Every kind's manifest folder that exists under ``root``, in :func:`kinds` order."""
    return [f for kind in kinds(root) if (f := manifest_folder(root, kind)).is_dir()]


def result_folders(root: Path) -> list[Path]:
    """Every kind's benchmark and report folders that exist under ``root``, in :func:`kinds` order."""
    return [f for kind in kinds(root) for name in (BENCH, REPORTS)
            if (f := Path(root) / RESULTS / kind / name).is_dir()]


def is_manifest(relative: PurePath) -> bool:
    """Whether ``relative`` (a path relative to the manifests root) lies in a kind's folder (``<kind>/<name>``), not
    at the root beside the index and the logs."""
    return len(relative.parts) >= 2


def current_path(recorded: str) -> str:
    """Where a committed manifest that a file names by the earlier layout's path lies now: ``results/<kind>/
    manifests/<name>`` (relative to the checkout, ``/`` separators, as written into reports and the program replay
    log) is ``manifests/<kind>/<name>``; any other path is returned as given. The recorded file is never rewritten
    (its bytes are its record), so code that follows a recorded path reads it through this function."""
    parts = PurePosixPath(recorded).parts
    if len(parts) >= 4 and parts[0] == RESULTS.name and parts[2] == _EARLIER_MANIFESTS:
        return PurePosixPath(MANIFESTS.name, parts[1], *parts[3:]).as_posix()
    return recorded


def moved_manifest(path: Path) -> Path | None:
    """Where the manifest file ``path`` (relative, or absolute, named by the earlier layout's
    ``…/results/<kind>/manifests/<name>``: :func:`current_path`) lies now, when nothing is at ``path`` and a file is
    at its new place ``…/manifests/<kind>/<name>``; else ``None``."""
    path = Path(path)
    if path.exists():
        return None
    parts = path.parts
    for start in (i for i, part in enumerate(parts) if part == RESULTS.name):
        tail = PurePosixPath(*parts[start:]).as_posix()
        now = Path(*parts[:start]) / current_path(tail)
        if current_path(tail) != tail and now.is_file():
            return now
    return None


def dtype_marker(dtype: str) -> str:
    """The naming scheme's dtype part of a file name: ``""`` for float32 (the unmarked default), ``"-bf16"`` for
    bfloat16, ``"-<dtype>"`` for any other."""
    return "" if dtype == "float32" else "-bf16" if dtype == "bfloat16" else f"-{dtype}"
