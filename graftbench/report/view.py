"""``graftbench view``: one self-contained HTML page of runs' samples, side by side (no server, no network: every
string the page shows is embedded as JSON and rendered as text by the page's own script, under a
Content-Security-Policy that allows that script alone). Imports no torch and needs no model.

The page (``view_page/view.js``, ``view_page/view.css``, shipped with the package) shows a header per run (model,
engine, device, pin, accuracy with its interval, pass@k and avg@N where sampled, tokens, energy, time, and what
``verify-manifest`` found), a sortable, filterable, paged table of problems exportable as CSV, and one problem opened:
its text, key, each run's output with the extracted answer marked, a diff of two runs' outputs, the grafted
example, the program and its stdout in program mode.

What this module guarantees about the embedding (:func:`embed_json`): the JSON block cannot end its ``<script>``
element or open a comment, whatever the data holds (``<``, ``>``, ``&``, U+2028 and U+2029 are written as ``\\uXXXX``
escapes), and the page's script reads it with ``JSON.parse``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..problems.types import Problem, family, problem_text_sha256
from ..programs.mode import PROGRAM_FIELDS
from ..programs.sandbox import answer_line_parts
from ..results.manifest import RUN_MANIFEST_NAME, ManifestError, recorded_verifier_version, run_folder_manifest
from ..results.metrics import family_of, summarize
from ..results.pin_engine import engine_of
from ..util.safe_files import MAX_JSON_BYTES, read_regular
from ..util.strict_json import StrictJSONError, loads_strict
from ..verify.answers import REASONING_VERSION, answer_span
from ..verify.reasoning import split_reasoning
from .compare import ReportError, load_run_manifest

SAMPLES_NAME = "samples.jsonl"
RUN_SETTINGS_NAME = "run.json"
_PAGE_PACKAGE = "graftbench.report"
_PAGE_FOLDER = "view_page"
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
MAX_SAMPLES_FILE_BYTES = 512 * 1024 * 1024  # an unsealed run's samples.jsonl larger than this is refused


class ViewError(ValueError):
    """An input the viewer cannot use (not a run folder or run manifest, unreadable samples, an output path that
    is a folder); the message names it."""


@dataclass
class ViewRun:
    """One run as the page shows it: its label, where it was read from, its manifest (``None`` for a run folder
    that has only ``samples.jsonl``), its samples and problems, and what ``verify-manifest`` found: ``status``
    ``verified`` (everything checked), ``partial`` (no mismatch, but something not checked: a problem set not
    anchored, artifact payloads not read; ``notes`` begins with those lines), ``failed`` (``mismatches`` says what)
    or ``unsealed``; ``notes`` are its notes."""

    label: str
    source: Path
    manifest: dict | None
    samples: list[dict]
    problems: list[dict]
    status: str
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def embed_json(data: object) -> str:
    """``data`` as JSON text safe inside an HTML ``<script type="application/json">`` element: ASCII only, and
    ``<``, ``>``, ``&``, U+2028, U+2029 as ``\\uXXXX`` escapes, so that no value can write ``</script>`` or
    ``<!--`` into the page. ``JSON.parse`` of the element's text gives ``data`` back. Raises ``TypeError`` for a
    value JSON cannot hold, ``ValueError`` for NaN or infinity."""
    text = json.dumps(data, ensure_ascii=True, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "".join(_ESCAPES.get(char, char) for char in text)


def csp_hash(source: str) -> str:
    """The Content-Security-Policy source that allows exactly one inline element whose text is ``source``:
    ``'sha256-<base64 of SHA-256 of its UTF-8 bytes>'`` (CSP Level 2, "hash-source")."""
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def _asset(name: str) -> str:
    return resources.files(_PAGE_PACKAGE).joinpath(_PAGE_FOLDER, name).read_text(encoding="utf-8")


def render_page(data: dict) -> str:
    """The page's HTML for ``data`` (:func:`view_data`'s dict): the embedded JSON (:func:`embed_json`), the page's
    stylesheet and script inline, and a Content-Security-Policy allowing only them (``default-src 'none'``,
    ``script-src`` and ``style-src`` by hash, no ``'unsafe-inline'``, no base URI, no forms)."""
    script, style = _asset("view.js"), _asset("view.css")
    policy = (f"default-src 'none'; script-src {csp_hash(script)}; style-src {csp_hash(style)}; img-src 'none'; "
              "base-uri 'none'; form-action 'none'")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n"
            "<meta name=\"referrer\" content=\"no-referrer\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<title>graftbench view</title>\n"
            f"<style>{style}</style>\n</head>\n<body>\n<noscript>This page renders its runs with its own script; "
            "allow JavaScript for this file.</noscript>\n<div id=\"app\"></div>\n"
            f"<script type=\"application/json\" id=\"graftbench-data\">{embed_json(data)}</script>\n"
            f"<script>{script}</script>\n</body>\n</html>\n")


def _run_source(path: Path) -> tuple[Path, Path | None]:
    """``(manifest path or None, run folder or None)`` for an argument: a manifest file, or a run folder with
    ``manifest.json`` or only ``samples.jsonl``. Raises :class:`ViewError` naming ``path`` otherwise, and when the
    folder's ``manifest.json`` is a symlink out of it."""
    if path.is_dir():
        try:
            held = run_folder_manifest(path)
        except ManifestError as exc:
            raise ViewError(str(exc)) from None
        if held.is_file():
            return held, None
        if (path / SAMPLES_NAME).is_file():
            return path / SAMPLES_NAME, path
        raise ViewError(f"'{path}' is neither a run folder nor a run manifest: the folder holds no "
                        f"{RUN_MANIFEST_NAME} and no {SAMPLES_NAME}")
    if path.is_file():
        return path, None
    raise ViewError(f"'{path}' is neither a run folder nor a run manifest: "
                    + ("it is not a regular file" if path.exists() else "it does not exist"))


def _unsealed(path: Path, folder: Path) -> ViewRun:
    """A run folder without a manifest: its ``samples.jsonl`` (a torn last line skipped), problems taken from the
    samples. Nothing in it is verified."""
    try:  # bounded, and never through a symlink out of the run's folder
        raw = read_regular(path, max_bytes=MAX_SAMPLES_FILE_BYTES, within=folder, what=SAMPLES_NAME)
    except OSError as exc:
        raise ViewError(f"'{folder}': cannot read {SAMPLES_NAME}: {exc}") from exc
    lines = raw.decode("utf-8", errors="replace").split("\n")
    samples = []
    for number, line in enumerate(lines[:-1] if not raw.endswith(b"\n") else lines, start=1):
        if line.strip():
            try:
                sample = loads_strict(line)
            except StrictJSONError as exc:
                raise ViewError(f"'{folder}': {SAMPLES_NAME} line {number} is not a sample: {exc}") from exc
            if not isinstance(sample, dict) or not isinstance(sample.get("problem_id"), str):
                raise ViewError(f"'{folder}': {SAMPLES_NAME} line {number} is not a sample (no problem_id)")
            samples.append(sample)
    problems: dict[str, dict] = {}
    for sample in samples:
        problems.setdefault(sample["problem_id"], {"id": sample["problem_id"], "key": sample.get("key"),
                                                   "problem_sha256": sample.get("problem_sha256")})
    return ViewRun(folder.name, folder, None, samples, list(problems.values()), "unsealed",
                   notes=[f"no {RUN_MANIFEST_NAME}: the run is not sealed, so nothing in it was verified"])


def read_run(path: str | Path) -> ViewRun:
    """One run to show: a run manifest, or a run folder (its ``manifest.json``, else its ``samples.jsonl``).

    A manifest is re-checked as ``verify-manifest`` checks it without a store (:func:`graftbench.results.check.verify_run`:
    hashes, verdicts under the recorded verifier version, totals, the problem set it records when graftbench can
    rebuild it, the results index); a manifest that fails is kept with ``status`` ``failed`` and its mismatches,
    so the page shows it as failed, never as a result; one with something not checked (a graft run's artifact
    payloads, which the page never reads; a problem set not anchored) is ``partial``, and says what. Raises :class:`ViewError` naming ``path`` when it is not a
    run folder or run manifest at all."""
    from ..results.check import verify_run

    path = Path(path)
    source, folder = _run_source(path)
    if folder is not None:
        return _unsealed(source, folder)
    try:
        manifest = load_run_manifest(path, source)
    except ReportError as exc:  # the viewer's own error, the same words
        raise ViewError(str(exc)) from exc
    samples = [s for s in manifest["samples"] if isinstance(s, dict) and isinstance(s.get("problem_id"), str)]
    problems = [p for p in manifest["problems"] if isinstance(p, dict) and isinstance(p.get("id"), str)]
    label = str(manifest.get("run") or source.parent.name)
    try:
        checked = verify_run(manifest, source)
    except ManifestError as exc:
        return ViewRun(label, source, manifest, samples, problems, "failed", [str(exc)], [])
    gaps = checked.unverified()
    status = "failed" if checked.mismatches else "partial" if gaps else "verified"
    return ViewRun(label, source, manifest, samples, problems, status, list(checked.mismatches),
                   gaps + [note for note in checked.notes if note not in gaps])


def _config(run: ViewRun) -> dict:
    config = run.manifest.get("config") if run.manifest else None
    return config if isinstance(config, dict) else {}


def _settings(run: ViewRun) -> dict:
    settings = run.manifest.get("settings") if run.manifest else None
    return settings if isinstance(settings, dict) else {}


def _reasoning(run: ViewRun) -> tuple[str, str] | None:
    layout = _config(run).get("layout")
    pair = layout.get("reasoning") if isinstance(layout, dict) else None
    ok = isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)
    return (pair[0], pair[1]) if ok else None


def _header(run: ViewRun) -> dict:
    """The run's header fields; metrics only for a verified run (a failed or unsealed run is not a result)."""
    config, settings = _config(run), _settings(run)
    header = {
        "label": run.label, "source": _shown_path(run.source), "status": run.status, "mismatches": run.mismatches[:50],
        "mismatch_count": len(run.mismatches), "notes": run.notes,
        "model": config.get("model"), "engine": engine_of(config), "device": config.get("device"),
        "dtype": config.get("dtype"), "isa": config.get("isa"), "cpu_capability": config.get("cpu_capability"),
        "pin": (run.manifest or {}).get("config_fingerprint"), "command": (run.manifest or {}).get("command"),
        "mode": settings.get("mode") or "text", "graft": settings.get("graft"), "samples": settings.get("samples"),
        "temperature": settings.get("temperature"), "verifier_version": settings.get("verifier_version"),
        "energy_method": ((run.manifest or {}).get("energy") or {}).get("method"),
        "reasoning": list(_reasoning(run) or []), "metrics": None,
    }
    if run.status in ("verified", "partial"):
        try:
            summary = summarize(run.samples, run.problems, verifier_version=recorded_verifier_version(run.manifest))
        except (ValueError, KeyError, TypeError) as exc:
            header["notes"] = header["notes"] + [f"its samples cannot be summarized ({exc})"]
            return header
        totals = run.manifest.get("totals") if isinstance(run.manifest.get("totals"), dict) else {}
        header["metrics"] = {
            "accuracy": summary.get("avg_at_n"), "interval": summary.get("accuracy_ci95"),
            "avg_interval": summary.get("avg_at_n_ci95"),
            "interval_method": summary.get("accuracy_ci95_method"), "correct": summary.get("correct"),
            "samples": summary.get("samples"), "problems": summary.get("problems"),
            "pass_at_k": summary.get("pass_at_k"), "maj_at_n": summary.get("maj_at_n"),
            "decode_tokens": summary.get("decode_tokens"), "thinking_tokens": totals.get("thinking_tokens"),
            "prefill_tokens": totals.get("prefill_tokens"), "prefill_tokens_saved": totals.get("prefill_tokens_saved"),
            "energy_j": summary.get("energy_j"), "wall_s": summary.get("wall_s"),
        }
    return header


def _shown_path(path: Path) -> str:
    """``path`` relative to the working folder, or else to graftbench's checkout, when it lies under one (a page shows
    no more of the disk than that); as given otherwise."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        try:
            return str(path.resolve().relative_to(root.resolve()))
        except (ValueError, OSError):
            continue
    return str(path)


def _verdict(sample: dict) -> str:
    if sample.get("correct") is True:
        return "correct"
    return "wrong" if sample.get("extracted") is not None else "no answer"


def _view_sample(sample: dict, version: int, reasoning: tuple[str, str] | None) -> dict:
    """The fields of one sample the page shows, with where its extracted answer stands in ``output`` (or, in
    program mode, ``stdout_parts``: its stdout cut around the line the verifier judged,
    :func:`graftbench.programs.sandbox.answer_line_parts`, so the page marks that line and no other)."""
    output = sample.get("output") if isinstance(sample.get("output"), str) else ""
    program = any(name in sample for name in PROGRAM_FIELDS)
    span = None if program else answer_span(output, sample.get("cue") or "", version, reasoning)
    shown = {name: sample.get(name) for name in (
        "sample_index", "extracted", "key", "correct", "finish_reason", "decode_tokens", "thinking_tokens",
        "prefill_tokens", "prefill_tokens_saved", "mode", "route", "similarity", "artifact_id", "artifact_tokens",
        "example_id", "example_answer", "copied", "fallback", "certified", "certificate_sha256", "layout", "cue",
        "wall_s", "ttft_s", "energy_j", "seed")}
    cue = sample.get("cue") if isinstance(sample.get("cue"), str) else ""
    split = split_reasoning(cue + output, reasoning if version >= REASONING_VERSION else None)
    shown.update(output=output, verdict=_verdict(sample), answer_span=list(span) if span else None,
                 program_mode=program, reasoning_cut=split.cut,
                 reasoning_end=len(output) if split.cut else max(split.answer_start - len(cue), 0))
    if program:
        shown.update({name: sample.get(name) for name in PROGRAM_FIELDS})
        stdout = sample.get("stdout")
        parts = answer_line_parts(stdout) if isinstance(stdout, str) and shown["extracted"] is not None else None
        shown["stdout_parts"] = list(parts) if parts else None  # the judged line, cut as the verifier cuts it
    return shown


def _problem_texts(problems: list[Problem] | None) -> dict[str, Problem]:
    return {p.id: p for p in problems or []}


def _example_texts(runs: list[ViewRun], store: str | Path | None, texts: dict[str, Problem]) -> dict[str, dict]:
    """The grafted examples the runs name, by artifact id: what the store's artifact header says (problem id,
    text, key, the solution's source) and, when the problem file holds that problem's reference solution, the
    deposit text rebuilt from the run's layout with whether its SHA-256 equals the header's ``text_sha256``."""
    wanted: dict[str, tuple[dict, ViewRun]] = {}
    for run in runs:
        for sample in run.samples:
            if isinstance(sample.get("artifact_id"), str):
                wanted.setdefault(sample["artifact_id"], (sample, run))
    if not wanted:
        return {}
    examples: dict[str, dict] = {}
    opened = None
    if store is not None:
        from ..store.open import open_store

        try:
            opened = open_store(str(store), readonly=True)
        except (OSError, ValueError) as exc:
            raise ViewError(f"--store {store}: {exc}") from exc
    from ..util.hashing import sha256_text

    for artifact_id, (sample, run) in sorted(wanted.items()):
        entry = {"artifact_id": artifact_id, "problem_id": sample.get("example_id"), "answer":
                 sample.get("example_answer"), "problem_text": None, "source": None, "text": None, "note": None}
        header = {}
        if opened is not None:
            try:
                header = opened.header(artifact_id)
            except Exception as exc:  # any store error is shown as the reason the example is not shown
                entry["note"] = f"not read from the store: {exc}"
        entry.update({k: header.get(k) for k in ("problem_id", "problem_text", "answer", "source") if header.get(k)})
        example = texts.get(entry["problem_id"]) if isinstance(entry["problem_id"], str) else None
        layout = _config(run).get("layout")
        template = layout.get("deposit") if isinstance(layout, dict) else None
        if example is not None and example.solution and isinstance(template, str) and entry["source"] != "sample":
            try:
                text = template.format(problem=example.problem, answer=example.answer, solution=example.solution)
            except (KeyError, IndexError, ValueError):
                text = None
            if text is not None:
                entry["text"] = text
                if header.get("text_sha256"):
                    same = sha256_text(text) == header["text_sha256"]
                    entry["note"] = ("the deposit text rebuilt from the problem file and the run's layout; its SHA-256 "
                                     + ("equals" if same else "differs from") + " the artifact's text_sha256")
                else:
                    entry["note"] = ("the deposit text rebuilt from the problem file and the run's layout (not "
                                     "checked against the artifact: no --store, or no text_sha256 in it)")
        examples[artifact_id] = entry
    return examples


def view_data(runs: list[ViewRun], problems: list[Problem] | None = None,
              store: str | Path | None = None) -> dict:
    """What the page embeds: ``runs`` (one header each, :func:`_header`), ``problems`` (the union of the runs'
    problems in first-seen order: id, family, key, text from ``problems`` when given and whether its SHA-256 is
    the one the runs record, and per run the list of its samples of that problem in sample order), and
    ``examples`` (the grafted examples by artifact id, read from ``store`` when given). Raises :class:`ViewError`
    for a store that cannot be opened."""
    texts = _problem_texts(problems)
    rows: dict[str, dict] = {}
    for index, run in enumerate(runs):
        version = recorded_verifier_version(run.manifest) if run.manifest else _safe_version(run)
        reasoning = _reasoning(run)
        for problem in run.problems:
            row = rows.setdefault(problem["id"], {"id": problem["id"], "family": family_of(problem),
                                                  "key": problem.get("key"), "sha256": {},
                                                  "runs": [[] for _ in runs]})
            row["sha256"][index] = problem.get("problem_sha256")
        for sample in sorted(run.samples, key=lambda s: s.get("sample_index") or 0):
            row = rows.get(sample["problem_id"])
            if row is not None:
                row["runs"][index].append(_view_sample(sample, version, reasoning))
    for row in rows.values():
        text = texts.get(row["id"])
        recorded = {h for h in row.pop("sha256").values() if h}
        row["text"] = text.problem if text else None
        row["text_matches"] = (problem_text_sha256(text.problem) in recorded) if text and recorded else None
        if text is not None and not row["family"]:
            row["family"] = family(text)
    return {"runs": [_header(run) for run in runs], "problems": list(rows.values()),
            "examples": _example_texts(runs, store, texts), "problem_file": bool(problems)}


def _safe_version(run: ViewRun) -> int:
    from ..verify.answers import VERIFIER_VERSION, VERIFIER_VERSIONS

    run_json = run.source / RUN_SETTINGS_NAME
    try:  # bounded, and never through a symlink out of the run's folder
        settings = loads_strict(read_regular(run_json, max_bytes=MAX_JSON_BYTES, within=run.source,
                                             what=RUN_SETTINGS_NAME).decode("utf-8")) if run_json.is_file() else {}
    except (OSError, StrictJSONError, UnicodeDecodeError):
        settings = {}
    version = settings.get("verifier_version") if isinstance(settings, dict) else None
    return version if version in VERIFIER_VERSIONS else VERIFIER_VERSION


def default_out_path(runs: list[ViewRun]) -> Path:
    """``views/<first run's label>.html`` (``views/view.html`` when the label is not a plain file name)."""
    from .compare import _PLAIN_NAME

    name = runs[0].label if runs and _PLAIN_NAME.match(runs[0].label) else "view"
    return Path("views") / f"{name}.html"


def write_view(paths: list[str | Path], out: str | Path | None = None, problems: list[Problem] | None = None,
               store: str | Path | None = None) -> tuple[Path, list[ViewRun]]:
    """Read each run (:func:`read_run`), build the page (:func:`view_data`, :func:`render_page`) and write it
    atomically to ``out`` (default :func:`default_out_path`); returns the path written and the runs. Raises
    :class:`ViewError` for an input it cannot use or an ``out`` that is a folder, ``OSError`` when the file cannot
    be written."""
    from ..util.durable import write_file_atomic

    if not paths:
        raise ViewError("no run to view: name at least one run folder or run manifest")
    runs = [read_run(path) for path in paths]
    target = Path(out) if out is not None else default_out_path(runs)
    if target.is_dir():
        raise ViewError(f"--out '{target}' is a folder; name the HTML file to write")
    page = render_page(view_data(runs, problems, store))
    target.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(target, page.encode("utf-8"))
    return target, runs
