"""The results index (``docs/results.md``): one table row per committed result file, generated from the files.

Three tables, each grouped by the kind of CPU the file records (:func:`graftbench.util.isa.describe_cpu`):

- run manifests under ``manifests/<kind>/`` (command, model, dtype, problem set, samples, correct, decode
  tokens, grafts);
- exactness expectations under ``manifests/<kind>/`` (model, dtype, pin, byte-exact pairs);
- benchmark results under ``results/<kind>/bench/`` and ``reports/`` (the JSON files a bench command wrote, grouped
  by the CPU model name they record, with the date and code version each records; earlier runs moved to a
  ``runs/`` folder are listed too).

Every figure is read from its file, never typed; ``make results-index`` regenerates the page and
``tests/results/test_results_index.py`` checks that the committed page equals a fresh generation, so the index cannot drift
from the files. The manifests' own SHA-256s are in ``manifests/SHA256SUMS``; the layout is
:mod:`graftbench.results.layout`. Imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ..util.display_text import markdown_text
from ..util.isa import describe_cpu
from ..util.safe_files import MAX_JSON_BYTES, read_regular
from ..util.strict_json import loads_strict
from ..results.layout import manifest_folders, result_folders
from ..results.model_names import model_name

_PLAIN_PATH = re.compile(r"[A-Za-z0-9._/-]+")  # a path a code span shows as it is

PAGE = Path("docs") / "results.md"
RUN_SCHEMAS = ("graftbench.manifest/1", "graftbench.manifest/2")
EXACTNESS_SCHEMA = "graftbench.exactness/1"
HEADER = """# Results index

Every committed result file, one row each, generated from the files by `make results-index` (a test checks that
this page equals a fresh generation). Each file records its own machine, date and code version; `graftbench
verify-manifest FILE` re-checks a manifest, and `manifests/SHA256SUMS` holds each manifest's SHA-256. Manifests
lie under `manifests/<kind of machine>/`, benchmark results and reports under `results/<kind of machine>/` ([the
layout](manifests.md#where-manifests-and-results-live)); rows are grouped by the kind of CPU the file records (model
name, torch's native capability and, where recorded, kernel flags such as AMX).
"""


def _cell(value: object) -> str:
    """A table cell: ``—`` for a missing value, numbers with thousands separators, text escaped as markdown."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return markdown_text(value)


def _table(header: list[str], rows: Iterable[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) if i else v for i, v in enumerate(row)) + " |" for row in rows]
    return lines


def _link(root: Path, path: Path) -> str:
    """A markdown link from ``docs/`` to ``path`` (relative to the repository ``root``), its text the path as code;
    a code span shows backslashes as written, so a path that a code span cannot hold as it is (a backtick, a
    ``|``, a control or markdown-special character outside ``[A-Za-z0-9._/-]``) is shown as escaped text instead."""
    relative = path.relative_to(root).as_posix()
    text = f"`{relative}`" if _PLAIN_PATH.fullmatch(relative) else markdown_text(relative)
    return f"[{text}](../{relative})"


def _cpu(document: dict) -> str:
    """The kind of CPU a manifest records (:func:`graftbench.util.isa.describe_cpu`); the oldest manifests record
    none."""
    env = document.get("environment") or {}
    return describe_cpu(env) if env.get("cpu_model") else "CPU not recorded"


def _provenance(document: dict) -> dict:
    """A benchmark file's ``provenance`` block (:func:`graftbench.util.provenance.provenance`); ``{}`` in files
    written before it was recorded."""
    block = document.get("provenance")
    return block if isinstance(block, dict) else {}


def _processor(document: dict) -> str:
    """The CPU model name a benchmark file records (``environment.processor``, or ``cpu_model`` in the oldest
    files, or its provenance's ``machine.cpu_model``)."""
    env = document.get("environment") or {}
    machine = _provenance(document).get("machine") or {}
    return env.get("processor") or env.get("cpu_model") or machine.get("cpu_model") or "CPU not recorded"


def _json_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.json") if p.is_file())


def run_row(root: Path, path: Path, manifest: dict) -> list[object]:
    """One run manifest's row: file, command, model, dtype, mode, problem set (source, n), samples per problem,
    correct / samples, decode tokens, grafts, created (UTC)."""
    config, totals = manifest.get("config") or {}, manifest.get("totals") or {}
    settings, problems = manifest.get("settings") or {}, manifest.get("problem_set") or {}
    samples = totals.get("samples")
    correct = None if samples is None else f"{totals.get('correct', 0):,} / {samples:,}"
    if config.get("random_weights"):
        correct = "not reported (random weights)"
    return [_link(root, path), manifest.get("command"), model_name(config), config.get("dtype"),
            settings.get("mode") or "text", f"{problems.get('source')} ({problems.get('n')})",
            settings.get("samples", 1), correct, totals.get("decode_tokens"), totals.get("grafts"),
            manifest.get("created_utc")]


def exactness_row(root: Path, path: Path, manifest: dict) -> list[object]:
    """One exactness expectation's row: file, model, dtype, instruction-set pin, threads, byte-exact pairs, the
    longest artifact (tokens), created (UTC)."""
    config, totals = manifest.get("config") or {}, manifest.get("totals") or {}
    return [_link(root, path), model_name(config), config.get("dtype"), config.get("isa", "native"),
            config.get("threads"), f"{totals.get('exact_pairs', 0):,} / {totals.get('pairs', 0):,}",
            totals.get("max_artifact_tokens"), manifest.get("created_utc")]


def bench_row(root: Path, path: Path, result: dict) -> list[object]:
    """One benchmark file's row: file, model, dtype, date and code version (the commit's first 12 hex digits, with
    ``+ uncommitted changes`` when the file's provenance says so) as the file records them: the run's start
    (``environment.date``), else its ``provenance.created_utc``; the provenance's commit, else (files written before
    it) ``environment.graftbench_commit``."""
    env, block = result.get("environment") or {}, _provenance(result)
    code = block.get("code") if isinstance(block.get("code"), dict) else {}
    if code.get("commit"):
        commit = str(code["commit"])[:12] + (" + uncommitted changes" if code.get("dirty") else "")
    else:
        commit = str(env.get("graftbench_commit") or "")[:12] or None
    return [_link(root, path), env.get("model") or result.get("model"), env.get("dtype") or result.get("dtype"),
            env.get("date") or block.get("created_utc"), commit]


def _grouped(title: str, header: list[str], rows: list[tuple[str, list[object]]]) -> list[str]:
    lines = [f"## {title}", ""]
    for cpu in sorted({cpu for cpu, _ in rows}):
        lines += [f"### {markdown_text(cpu)}", ""]
        lines += _table(header, [row for kind, row in rows if kind == cpu]) + [""]
    return lines


def render(root: Path) -> str:
    """The index page for the repository at ``root``, as markdown. Raises ``ValueError`` naming a committed file
    that is not a JSON object (a result file must be one)."""
    runs, exact, bench = [], [], []
    for path in (p for folder in manifest_folders(root) for p in _json_files(folder)):
        document = _load(path)
        if document.get("schema") == EXACTNESS_SCHEMA:
            exact.append((_cpu(document), exactness_row(root, path, document)))
        elif document.get("schema") in RUN_SCHEMAS:
            runs.append((_cpu(document), run_row(root, path, document)))
    for path in (p for folder in result_folders(root) for p in _json_files(folder)):
        document = _load(path)
        if isinstance(document.get("environment"), dict) or _provenance(document):
            bench.append((_processor(document), bench_row(root, path, document)))
    lines = [HEADER]
    lines += _grouped("Run manifests", ["file", "command", "model", "dtype", "mode", "problem set (n)",
                                        "samples / problem", "correct", "decode tokens", "grafts", "created (UTC)"],
                      runs)
    lines += _grouped("Exactness expectations", ["file", "model", "dtype", "isa", "threads", "byte-exact pairs",
                                                 "longest artifact (tokens)", "created (UTC)"], exact)
    lines += _grouped("Benchmark results", ["file", "model", "dtype", "date", "code"], bench)
    return "\n".join(lines).rstrip("\n") + "\n"


def _load(path: Path) -> dict:
    """A committed result file, read as every manifest is: a regular file under the JSON size cap, strict JSON."""
    document = loads_strict(read_regular(path, max_bytes=MAX_JSON_BYTES, what="result file"), source=str(path))
    if not isinstance(document, dict):
        raise ValueError(f"{path}: a result file must hold a JSON object")
    return document


def write(root: Path) -> Path:
    """Write :func:`render` to ``docs/results.md`` under ``root``; returns the path."""
    page = root / PAGE
    page.write_text(render(root), encoding="utf-8")
    return page
