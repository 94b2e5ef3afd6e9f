"""Where committed results live: one root, one folder per kind of machine, one naming scheme. Imports no torch.

``results/<kind>/manifests/`` holds the run manifests and exactness expectations recorded on that kind of machine,
``results/<kind>/bench/`` its benchmark results (earlier runs under ``bench/runs/``), ``results/<kind>/reports/``
its report folders; ``results/SHA256SUMS`` (every manifest's SHA-256) and ``results/replays.jsonl`` (the replay
log) sit at the root. ``<kind>`` names a kind of machine, e.g. ``amd-epyc-avx512`` or ``intel-xeon-amx``
(docs/manifests.md gives the naming scheme of the files).
"""

from __future__ import annotations

from pathlib import Path, PurePath

RESULTS = Path("results")
MANIFESTS = "manifests"
BENCH = "bench"
REPORTS = "reports"
# The kind of machine the portable-pin expectations were first recorded on: every bundled model and dtype has one
# there, while another kind's folder fills over sessions.
REFERENCE_KIND = "amd-epyc-avx512"
REPLAY_LOG = RESULTS / "replays.jsonl"


def kinds(root: Path) -> list[str]:
    """The kinds of machine with a folder under ``root/results``, sorted by name (empty when there is none)."""
    folder = Path(root) / RESULTS
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def manifest_folder(root: Path, kind: str) -> Path:
    """``root/results/<kind>/manifests``: where the manifests recorded on ``kind`` live."""
    return Path(root) / RESULTS / kind / MANIFESTS


def manifest_folders(root: Path) -> list[Path]:
    """Every kind's manifest folder that exists under ``root``, in :func:`kinds` order."""
    return [f for kind in kinds(root) if (f := manifest_folder(root, kind)).is_dir()]


def result_folders(root: Path) -> list[Path]:
    """Every kind's benchmark and report folders that exist under ``root``, in :func:`kinds` order."""
    return [f for kind in kinds(root) for name in (BENCH, REPORTS)
            if (f := Path(root) / RESULTS / kind / name).is_dir()]


def is_manifest(relative: PurePath) -> bool:
    """Whether ``relative`` (a path relative to the results root) lies in a kind's ``manifests`` folder."""
    return len(relative.parts) >= 3 and relative.parts[1] == MANIFESTS


def dtype_marker(dtype: str) -> str:
    """The naming scheme's dtype part of a file name: ``""`` for float32 (the unmarked default), ``"-bf16"`` for
    bfloat16, ``"-<dtype>"`` for any other."""
    return "" if dtype == "float32" else "-bf16" if dtype == "bfloat16" else f"-{dtype}"
