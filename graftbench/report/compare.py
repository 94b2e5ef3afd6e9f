"""``graftbench report``'s logic: read run manifests, compute their statistics (:mod:`graftbench.results.metrics`),
compare them, and render the markdown report (:mod:`graftbench.report.write` writes it with its plots and, on
request, lm-evaluation-harness files). Imports no torch and needs no model.

The tables here are lists of strings, shared by the markdown file and the rich tables the command prints
(:func:`graftbench.cli.tables.report_tables`), so both always show the same figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..util.display_text import markdown_text
from ..util.durable import blocking_file
from ..results.manifest import (NO_STORE, RUN_MANIFEST_NAME, ManifestError, load_manifest, recorded_verifier_version,
                                run_folder_manifest)
from ..results.metrics import RESAMPLES, family_costs, family_of, paired_difference, run_checks, summarize
from .prompt_arm import prompt_arm_rows

DEFAULT_REPORTS_DIR = "reports"
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ReportError(ValueError):
    """An input the report cannot use (not a run folder or run manifest, a damaged manifest, a bad ``--name``);
    the message names it."""


class UnanchoredRun(ReportError):
    """A run manifest that verifies but whose problem set could not be anchored
    (:class:`graftbench.results.check.Verification`), given without ``allow_unanchored``; the message names it and
    why."""


@dataclass
class RunEntry:
    """One run in a report: its label, where it was read from, its manifest, its
    :func:`~graftbench.results.metrics.summarize` dict and its flywheel round (``None`` when it is not part of a
    sequence of rounds)."""

    label: str
    path: Path
    manifest: dict
    summary: dict
    round: int | None = None
    unverified: tuple[str, ...] = ()  # what verify-manifest could not check in this run (its notes saying so)

    @property
    def model(self) -> str:
        config = self.manifest.get("config")
        return str(config.get("model", "?")) if isinstance(config, dict) else "?"

    @property
    def mode(self) -> str:
        """``graft`` when the run was asked to graft (``settings.graft``), else ``baseline``."""
        settings = self.manifest.get("settings")
        if isinstance(settings, dict) and "graft" in settings:
            return "graft" if settings["graft"] else "baseline"
        modes = {s.get("mode") for s in self.manifest["samples"]}
        return "graft" if "graft" in modes else "baseline"

    @property
    def series(self) -> str:
        """The line a run belongs to on the rounds curve: ``recurring`` for a graft run whose every sample was
        routed ``exact`` (a flywheel round asking its library's problems again), else :attr:`mode`."""
        samples = self.manifest["samples"]
        if self.mode == "graft" and samples and all(s.get("route") == "exact" for s in samples):
            return "recurring"
        return self.mode

    @property
    def arm(self) -> tuple:
        """What a graft run and a baseline run must share to be compared pair by pair: model, dtype, solve mode
        (``text`` when not recorded), decode budget (``max_new_tokens``, ``token_budget``), samples per problem,
        sampling (``greedy``, or temperature and top-p) and round. Settings an older manifest does not record take
        their defaults (text, one greedy sample)."""
        settings = self.manifest.get("settings")
        settings = settings if isinstance(settings, dict) else {}
        config = self.manifest.get("config")
        dtype = config.get("dtype") if isinstance(config, dict) else None
        temperature = settings.get("temperature") or 0
        sampling = ("greedy",) if temperature == 0 else (temperature, settings.get("top_p", 1))
        return (self.model, dtype, settings.get("mode") or "text", settings.get("max_new_tokens"),
                settings.get("token_budget"), settings.get("samples") or 1, sampling, self.round)

    @property
    def layout(self) -> str:
        """The samples' ``layout`` names, or ``—`` when the manifest records none."""
        names = sorted({s["layout"] for s in self.manifest["samples"] if isinstance(s.get("layout"), str)})
        return ", ".join(names) or "—"

    @property
    def energy_method(self) -> str:
        energy = self.manifest.get("energy")
        return str(energy.get("method", "?")) if isinstance(energy, dict) else "?"

    @property
    def thinking_tokens(self) -> int | None:
        """Of the run's decode tokens, those of a thinking model's reasoning (``totals.thinking_tokens``); ``None``
        when the run records none (a model that does not think)."""
        totals = self.manifest.get("totals")
        value = totals.get("thinking_tokens") if isinstance(totals, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def problem_hashes(self) -> dict[str, str]:
        return {p["id"]: p.get("problem_sha256") for p in self.manifest["problems"]}


@dataclass
class Report:
    """What ``graftbench report`` shows: the runs, the paired comparisons (graft − baseline on the same problems,
    same model and round) and the bootstrap settings."""

    runs: list[RunEntry]
    comparisons: list[dict] = field(default_factory=list)
    seed: int = 0
    resamples: int = RESAMPLES
    prompt_arms: list[dict] = field(default_factory=list)
    family_comparisons: list[dict] = field(default_factory=list)  # the same pairs on subsets of families

    @property
    def rounds(self) -> list[RunEntry]:
        """The runs that carry a round, by round then label."""
        return sorted((r for r in self.runs if r.round is not None), key=lambda r: (r.round, r.label))


def manifest_path(path: str | Path) -> Path:
    """The run manifest a report argument names: ``PATH/manifest.json`` for a run folder, else ``PATH`` itself.
    Raises :class:`ReportError` naming ``path`` when it is neither a run folder holding a manifest nor a file (a
    FIFO or a device is named as not a regular file; it is never opened), or when the folder's manifest is a
    symlink out of it (:func:`graftbench.results.manifest.run_folder_manifest`)."""
    path = Path(path)
    if path.is_dir():
        try:
            held = run_folder_manifest(path)
        except ManifestError as exc:
            raise ReportError(str(exc)) from None
        if held.is_file():
            return held
        raise ReportError(f"'{path}' is neither a run folder nor a run manifest: the folder holds no "
                          f"{RUN_MANIFEST_NAME}")
    if path.is_file():
        return path
    if path.exists():
        raise ReportError(f"'{path}' is neither a run folder nor a run manifest: it is not a regular file")
    raise ReportError(f"'{path}' is neither a run folder nor a run manifest: it does not exist")


def _read(path: str | Path) -> tuple[Path, dict]:
    source = manifest_path(path)
    return source, load_run_manifest(path, source)


def load_run_manifest(path: str | Path, source: Path) -> dict:
    """The run manifest at ``source`` (the file the caller's ``path``, a run folder or manifest, names), read
    unverified (:func:`graftbench.results.manifest.load_manifest`) and holding ``samples`` and ``problems`` lists.
    Raises :class:`ReportError` naming ``path`` when it is not a manifest or lacks either list."""
    try:
        manifest = load_manifest(source)
    except ManifestError as exc:
        raise ReportError(f"'{path}' is neither a run folder nor a run manifest: {exc}") from exc
    if not isinstance(manifest.get("samples"), list) or not isinstance(manifest.get("problems"), list):
        raise ReportError(f"'{path}' is a manifest without samples and problems lists")
    return manifest


def _verified(path: str | Path, source: Path, manifest: dict, allow_unanchored: bool = False) -> tuple[str, ...]:
    """Check the manifest as ``verify-manifest`` does (:func:`graftbench.results.check.verify_run`, no store) and
    return what could not be checked (artifact payloads always; an unanchored problem set when
    ``allow_unanchored``). Raises :class:`ReportError` naming it when it does not verify, and
    :class:`UnanchoredRun` when its problem set could not be anchored and ``allow_unanchored`` is not set."""
    from ..results.check import verify_run

    try:
        checked = verify_run(manifest, source)
        mismatches = checked.mismatches
    except ManifestError as exc:
        raise ReportError(f"'{path}' does not verify: {exc}") from exc
    if mismatches:
        shown = "; ".join(mismatches[:3]) + (f"; and {len(mismatches) - 3} more" if len(mismatches) > 3 else "")
        raise ReportError(f"'{path}' does not verify ({len(mismatches)} mismatches; `graftbench verify-manifest "
                          f"{source}` lists them): {shown}")
    if checked.unanchored is not None and not allow_unanchored:
        raise UnanchoredRun(f"'{path}' is not anchored: {checked.unanchored}; name a run whose problem set "
                            "graftbench can rebuild, or pass --allow-unanchored to report it anyway")
    # A report reads no store: it names the command that checks the payloads, not an option it does not have.
    no_store = (f"report reads no store; `graftbench verify-manifest {source} --store STORE` checks them against "
                "the store they were grafted from")
    return tuple(line.replace(NO_STORE, no_store) for line in checked.unverified())


def _round_of(manifest: dict) -> int | None:
    settings = manifest.get("settings")
    value = settings.get("round") if isinstance(settings, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def load_runs(paths: list[str | Path], seed: int = 0, resamples: int = RESAMPLES,
              rounds: bool = False, allow_unanchored: bool = False) -> list[RunEntry]:
    """Read and summarize each run (a run folder or a manifest path). With ``rounds`` the runs, in the order given,
    are rounds 1, 2, …; otherwise a run's round is its manifest's ``settings.round`` when recorded. Labels are the
    manifests' run names (a repeated name gets ``#2``, ``#3``, …).

    Each manifest is verified first (as ``verify-manifest`` does, against the problem set it records when
    graftbench can rebuild it); what could not be checked is kept in :attr:`RunEntry.unverified`.

    Raises :class:`ReportError` naming a path that is not a run folder or run manifest, a manifest that does not
    verify, or a manifest whose samples cannot be summarized (a missing field, a sample of an unlisted problem, an unknown verifier version);
    its subclass :class:`UnanchoredRun` for a run whose problem set could not be anchored, unless
    ``allow_unanchored``."""
    entries, seen = [], {}
    for position, path in enumerate(paths, start=1):
        source, manifest = _read(path)
        unverified = _verified(path, source, manifest, allow_unanchored)
        try:
            summary = summarize(manifest["samples"], manifest["problems"], seed, resamples=resamples,
                                verifier_version=recorded_verifier_version(manifest))
        except (ValueError, KeyError, TypeError) as exc:
            raise ReportError(f"'{path}': its samples cannot be summarized ({exc!r})") from exc
        name = str(manifest.get("run") or source.parent.name)
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name}#{seen[name]}"
        entries.append(RunEntry(label, source, manifest, summary, position if rounds else _round_of(manifest),
                                unverified))
    return entries


def _common_problems(a: RunEntry, b: RunEntry) -> list[dict]:
    hashes = b.problem_hashes
    return [p for p in a.manifest["problems"] if p["id"] in hashes and hashes[p["id"]] == p.get("problem_sha256")]


def compare_runs(runs: list[RunEntry], seed: int = 0, resamples: int = RESAMPLES,
                 families: frozenset[str] | None = None) -> list[dict]:
    """Paired differences (graft − baseline accuracy per problem, with the interval of
    :func:`graftbench.results.metrics.paired_difference`: Newcombe's for 0/1 problems, else a bootstrap over
    problems) for every graft run and
    baseline run of the same arm (:attr:`RunEntry.arm`: model, dtype, solve mode, budget, sampling, round) that
    share problems (same id and text hash), on those problems, or only on those of ``families`` when given. A
    program-mode graft is never paired with a text baseline, nor an avg@4 run with a greedy one: the difference
    would mix the graft with another change."""
    rows = []
    for graft in (r for r in runs if r.mode == "graft"):
        for baseline in (r for r in runs if r.mode == "baseline"):
            if graft.arm != baseline.arm:
                continue
            common = [p for p in _common_problems(graft, baseline) if families is None or p.get("family") in families]
            ids = {p["id"] for p in common}
            try:
                diff = paired_difference(_samples_of(graft, ids), _samples_of(baseline, ids), common, seed, resamples)
            except ValueError:
                continue  # no problem scored by both
            rows.append({"graft": graft.label, "baseline": baseline.label, **diff,
                         "graft_routes": graft_routes(graft.manifest["samples"], {p["id"] for p in common})})
    return rows


def _samples_of(run: RunEntry, ids: set[str]) -> list:
    """The run's samples of the problems ``ids``."""
    return [s for s in run.manifest["samples"] if isinstance(s, dict) and s.get("problem_id") in ids]


def run_families(runs: list[RunEntry]) -> list[str]:
    """The families the runs' problems name, sorted (problems without one are in none)."""
    return sorted({p["family"] for r in runs for p in r.manifest["problems"] if isinstance(p.get("family"), str)})


def compare_by_family(runs: list[RunEntry], seed: int = 0, resamples: int = RESAMPLES,
                      pooled: tuple[str, ...] = ()) -> list[dict]:
    """:func:`compare_runs` on the problems of each family the runs name (when they name more than one), and on
    the ``pooled`` families together first (a pre-registered subset); each row's ``families`` names its subset.
    Raises :class:`ReportError` when ``pooled`` names a family none of the runs' problems has."""
    named = run_families(runs)
    unknown = [f for f in pooled if f not in named]
    if unknown:
        raise ReportError(f"--families: {', '.join(map(repr, unknown))} not among the runs' families "
                          f"({', '.join(named) or 'none'})")
    subsets = ([tuple(pooled)] if pooled else []) + ([(f,) for f in named] if len(named) > 1 else [])
    return [{"families": list(subset), **row} for subset in subsets
            for row in compare_runs(runs, seed, resamples, frozenset(subset))]


def graft_routes(samples: list, problem_ids: set[str]) -> dict[str, int]:
    """How the samples of ``problem_ids`` were routed, ``{route: samples}`` by route (``exact``: the problem's
    own verified solution was grafted; ``similar``, ``family``, ``top-ranked``: another problem's; ``none`` or
    a fallback: no graft)."""
    counts: dict[str, int] = {}
    for s in samples:
        if isinstance(s, dict) and s.get("problem_id") in problem_ids:
            route = str(s.get("route") or "none") if s.get("mode") == "graft" else "none"
            counts[route] = counts.get(route, 0) + 1
    return dict(sorted(counts.items()))


def build_report(paths: list[str | Path], seed: int = 0, resamples: int = RESAMPLES, rounds: bool = False,
                 families: tuple[str, ...] = (), allow_unanchored: bool = False) -> Report:
    """Load, summarize and compare the runs at ``paths`` (see :func:`load_runs`, :func:`compare_runs`), also per
    family and on the ``families`` pooled (:func:`compare_by_family`). Raises :class:`ReportError` as
    :func:`load_runs` and :func:`compare_by_family` do (:class:`UnanchoredRun` for an unanchored run unless
    ``allow_unanchored``)."""
    runs = load_runs(paths, seed, resamples, rounds, allow_unanchored)
    return Report(runs, compare_runs(runs, seed, resamples), seed, resamples, prompt_arm_rows(runs),
                  compare_by_family(runs, seed, resamples, families))


# ---- cells ----


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _ci(interval) -> str:
    return "" if interval is None else f" [{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]"


def accuracy_cell(value, interval) -> str:
    """A proportion as a percentage with its 95% interval: ``1.7% [0.3, 8.9]``; ``—`` when there is none."""
    return "—" if value is None else _pct(value) + _ci(interval)


def _num(value, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _problems_cell(s: dict) -> str:
    missing = s["problems_without_samples"]
    return str(s["problems"]) + (f" of {s['problems_listed']}" if missing else "")


def _per_problem_cell(s: dict) -> str:
    spread = s["samples_per_problem"]
    if spread is None:
        return "0"
    return str(spread["min"]) if spread["min"] == spread["max"] else f"{spread['min']}–{spread['max']}"


def _pass_cell(s: dict, which: str) -> str:
    if not s["pass_at_k"]:
        return "—"
    k = "1" if which == "1" else str(max(map(int, s["pass_at_k"])))
    return f"{_pct(s['pass_at_k'][k])} (k={k})"


def _copy_cells(copy: dict, samples) -> list[str]:
    """The copy rate (``40.0% of 5``) and copy baseline cells; where one is ``—``, why when it is known: no graft,
    or only exact routes (a problem's own solution: nothing to copy from another problem)."""
    routes = graft_routes(samples if isinstance(samples, list) else [],
                          {s.get("problem_id") for s in samples or [] if isinstance(s, dict)})
    why = "" if set(routes) - {"none"} - {"exact"} else " (no grafts)" if "exact" not in routes else \
        " (exact routes only)"
    rate = f"{_pct(copy['copy_rate'])} of {copy['copied_recorded']}" if copy["copy_rate"] is not None else "—" + why
    baseline = (_pct(copy["copy_baseline"]) + f" (graft {_pct(copy['grafted_accuracy'])})"
                if copy["copy_baseline"] is not None else "—" + why)
    return [rate, baseline]


RUN_COLUMNS = ("run", "model", "mode · layout", "problems", "samples / problem", "accuracy [95% CI]", "pass@1",
               "pass@N", "maj@N [95% CI]", "decode tok / sample", "decode tok / correct", "mean TTFT s", "energy J",
               "copy rate", "copy baseline", "certificates", "fallbacks")


def _checks_cells(run: RunEntry) -> list[str]:
    """The certificates cell (``30 of 30 equal``; ``none (no --certify)`` for a run that grafted and asked for none;
    ``—`` for a run that grafted nothing) and the fallbacks cell (``0``, or the count with the checks that refused, ``2 (hash 2)``;
    :func:`_notes` gives each reason)."""
    checks = run_checks(run.manifest["samples"])
    if checks.certified:
        differ = checks.certified - checks.equal
        certificates = f"{checks.equal} of {checks.certified} equal" + (f", {differ} differ" if differ else "")
    else:
        certificates = "none (no --certify)" if checks.grafted else "—"
    by_check: dict[str, int] = {}
    for _, reason in checks.fallbacks:
        check = reason.split(":", 1)[0]
        by_check[check] = by_check.get(check, 0) + 1
    fallbacks = str(len(checks.fallbacks)) + (
        " (" + ", ".join(f"{check} {n}" for check, n in sorted(by_check.items())) + ")" if by_check else "")
    return [certificates, fallbacks]


def run_row(run: RunEntry) -> list[str]:
    """One run's cells, in :data:`RUN_COLUMNS` order: accuracy is avg@N with ``accuracy_ci95`` (Wilson with one
    sample per problem, else the bootstrap); tokens per sample and per correct sample; seconds; joules with the
    energy method; copy rate and copy baseline (``—`` when the manifest does not record them); the ``--certify``
    certificates and the fallbacks (:func:`_checks_cells`)."""
    s = run.summary
    copy = s["copy"]
    return [
        run.label, run.model, f"{run.mode} · {run.layout}", _problems_cell(s), _per_problem_cell(s),
        _pct(s["avg_at_n"]) + _ci(s["accuracy_ci95"]), _pass_cell(s, "1"), _pass_cell(s, "N"),
        _pct(s["maj_at_n"]) + _ci(s["maj_at_n_ci95"]), _num(s["mean_decode_tokens"]),
        _num(s["decode_tokens_per_correct"]), _num(s["mean_ttft_s"], 3),
        f"{_num(s['energy_j'], 0)} ({run.energy_method})",
        *_copy_cells(copy, run.manifest.get("samples")),
        *_checks_cells(run),
    ]


FAMILY_COLUMNS = ("run", "family", "problems", "samples", "accuracy [95% CI]", "pass@N", "maj@N [95% CI]",
                  "decode tok / sample", "decode tok / correct", "copy rate", "copy baseline")


def family_rows(report: Report) -> list[list[str]]:
    """One row per run and family, in :data:`FAMILY_COLUMNS` order (pass@N with N the run's smallest samples per
    problem; decode tokens per correct sample and the copy controls from
    :func:`graftbench.results.metrics.family_costs`; why a copy cell is empty read from that family's samples)."""
    rows = []
    for run in report.runs:
        costs = family_costs(run.manifest["samples"], run.manifest["problems"],
                             recorded_verifier_version(run.manifest))
        for name, f in run.summary["families"].items():
            ids = {p["id"] for p in run.manifest["problems"] if family_of(p) == name}
            rows.append([run.label, name, str(f["problems"]), str(f["samples"]),
                         _pct(f["avg_at_n"]) + _ci(f["accuracy_ci95"]), _pct(f["pass_at_n"]),
                         _pct(f["maj_at_n"]) + _ci(f["maj_at_n_ci95"]), _num(f["mean_decode_tokens"]),
                         _num(costs[name]["decode_tokens_per_correct"]),
                         *_copy_cells(costs[name]["copy"], _samples_of(run, ids))])
    return rows


COMPARISON_COLUMNS = ("graft run", "baseline run", "problems", "graft − baseline [95% CI]", "graft better",
                      "baseline better", "graft routes")


def comparison_rows(report: Report) -> list[list[str]]:
    """One row per paired comparison, in :data:`COMPARISON_COLUMNS` order (differences in percentage points)."""
    return [_comparison_cells(c) for c in report.comparisons]


def _comparison_cells(c: dict) -> list[str]:
    return [c["graft"], c["baseline"], str(c["problems"]),
            f"{100 * c['mean_difference']:+.1f} pp [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]",
            str(c["graft_better"]), str(c["baseline_better"]), routes_cell(c["graft_routes"])]


FAMILY_COMPARISON_COLUMNS = ("families", *COMPARISON_COLUMNS)


def family_comparison_rows(report: Report) -> list[list[str]]:
    """One row per paired comparison on a subset of families, in :data:`FAMILY_COMPARISON_COLUMNS` order."""
    return [[" + ".join(c["families"]), *_comparison_cells(c)] for c in report.family_comparisons]


def routes_cell(routes: dict[str, int]) -> str:
    """``exact 3 (own answer in context), similar 1``: the graft run's routes on the paired problems."""
    return ", ".join(f"{route} {n}" + (" (own answer in context)" if route == "exact" else "")
                     for route, n in routes.items()) or "—"


ROUND_COLUMNS = ("round", "run", "series", "accuracy [95% CI]", "decode tok / sample")


PROMPT_ARM_COLUMNS = ("prompt-text run", "graft run", "samples", "first-step logits equal", "mean TTFT s, prompt",
                      "mean TTFT s, graft", "energy J, prompt", "energy J, graft")


def prompt_arm_table(report: Report) -> list[list[str]]:
    """Rows of :data:`PROMPT_ARM_COLUMNS`, one per pair of :func:`graftbench.report.prompt_arm.prompt_arm_rows`."""
    rows = []
    for r in report.prompt_arms:
        equal = f"{r['logits_equal']} of {r['samples']}"
        if r["first_differences"]:
            equal += " (first: " + ", ".join(r["first_differences"]) + ")"
        rows.append([markdown_text(r["prompt"]), markdown_text(r["graft"]), str(r["samples"]), markdown_text(equal),
                     _num(r["prompt_ttft_s"], 3), _num(r["graft_ttft_s"], 3), _num(r["prompt_energy_j"]),
                     _num(r["graft_energy_j"])])
    return rows


def round_rows(report: Report) -> list[list[str]]:
    """One row per run that carries a round, by round, in :data:`ROUND_COLUMNS` order; the series is
    :attr:`RunEntry.series` (``baseline``, ``graft`` or ``recurring``)."""
    return [[str(r.round), r.label, r.series, _pct(r.summary["avg_at_n"]) + _ci(r.summary["accuracy_ci95"]),
             _num(r.summary["mean_decode_tokens"])] for r in report.rounds]


# ---- markdown and files ----


def _md_table(columns, rows) -> str:
    """A markdown table; every cell through :func:`graftbench.util.display_text.markdown_text`, so no value (a run
    name, a model, a family) can add a row or a column, or hold a link or HTML."""
    lines = ["| " + " | ".join(map(markdown_text, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(map(markdown_text, row)) + " |" for row in rows]
    return "\n".join(lines)


MAX_FALLBACK_LINES = 20  # fallbacks listed with their reasons per run; the manifest holds every one


def fallback_lines(run: RunEntry) -> list[str]:
    """Plain-text lines, one per problem of ``run`` that fell back to the baseline (its artifact refused), with the
    reason its samples record (``fallback``), at most :data:`MAX_FALLBACK_LINES`, then how many more there are.
    Untrusted text: escape it for where it is shown."""
    fallbacks = run_checks(run.manifest["samples"]).fallbacks
    lines = [f"{run.label}: {problem} fell back to the baseline: {reason}"
             for problem, reason in fallbacks[:MAX_FALLBACK_LINES]]
    if len(fallbacks) > MAX_FALLBACK_LINES:
        lines.append(f"{run.label}: {len(fallbacks) - MAX_FALLBACK_LINES} more fallbacks, each with its reason in "
                     "the manifest's samples (fallback)")
    return lines


def _notes(report: Report) -> list[str]:
    notes = [
        "Accuracy is avg@N: per-problem mean correctness, then the mean over problems. Its interval is the Wilson "
        "score interval over problems when every problem has one sample (or every problem's samples are all right "
        "or all wrong, where a bootstrap collapses to a point), else a percentile bootstrap over problems "
        f"({report.resamples} resamples, seed {report.seed}); maj@N and pass@N carry Wilson intervals. A paired "
        "comparison's interval is Newcombe's hybrid score interval for paired proportions (Newcombe 1998, method 10) "
        "when every problem scores 0 or 1 in both runs, where a bootstrap of the differences collapses to a point "
        "if every problem moves the same way; otherwise it bootstraps the per-problem difference with the same seed.",
        "Decode tokens are per sample; decode tok / correct divides all decode tokens by the correct samples (— when "
        "none is correct). Energy is in joules, labelled with its method (an estimate is a CPU-time formula, "
        "meaningful as a ratio between runs on one machine).",
        "Copy rate: grafted samples whose answer copied the grafted example's; copy baseline: the accuracy of "
        "answering every grafted problem with its example's key, from keys only, beside the run's own accuracy on "
        "the same samples. — means the manifest does not record them (`copied`, `example_answer`); they are "
        "recorded on similar routes only, so a run whose grafts all took exact routes has none.",
        "Graft routes: how the graft run's samples were routed on the paired problems. An exact route grafts the "
        "problem's own verified solution (a recurring problem: the model has its own verified answer in context), "
        "so its gain measures recall of a known answer, not transfer to a new problem.",
    ]
    for run in report.runs:
        s = run.summary
        notes += [markdown_text(f"{run.label}: verified, except: {what}.") for what in run.unverified]
        notes += [markdown_text(line) for line in fallback_lines(run)]
        if run.thinking_tokens is not None:
            notes.append(f"{markdown_text(run.label)}: {run.thinking_tokens:,} of its {s['decode_tokens']:,} decode "
                         "tokens were reasoning (thinking tokens, counted apart; the verifier reads only the text "
                         "after the reasoning).")
        if s["problems_without_samples"]:
            notes.append(f"{markdown_text(run.label)}: {s['problems_without_samples']} of {s['problems_listed']} listed problems have "
                         "no sample (not reached); they are left out of every figure.")
    return notes


def markdown(report: Report, plots: list[str] = ()) -> str:
    """The report as markdown: the runs table, the per-family table, the paired comparisons, the rounds (when any),
    links to the ``plots`` (file names beside the markdown file) and notes on every figure. Text from a manifest
    (run names, paths, models, layouts, families, energy methods) is escaped
    (:func:`graftbench.util.display_text.markdown_text`): it cannot start a heading, break a table, embed HTML or
    link."""
    parts = ["# graftbench report", "",
             "Runs: " + ", ".join(f"{markdown_text(r.label)} ({markdown_text(r.path)})" for r in report.runs), "",
             "## Runs", "", _md_table(RUN_COLUMNS, [run_row(r) for r in report.runs]), "",
             "## Per family", "", _md_table(FAMILY_COLUMNS, family_rows(report)), ""]
    if report.comparisons:
        parts += ["## Paired comparisons (same problems, model, mode, budget and sampling)", "",
                  _md_table(COMPARISON_COLUMNS, comparison_rows(report)), ""]
    if report.family_comparisons:
        parts += ["## Paired comparisons by family (the pooled subset first, when one was named)", "",
                  _md_table(FAMILY_COMPARISON_COLUMNS, family_comparison_rows(report)), ""]
    if report.prompt_arms:
        parts += ["## The example as prompt text against the graft (same examples, same samples)", "",
                  _md_table(PROMPT_ARM_COLUMNS, prompt_arm_table(report)), ""]
    if report.rounds:
        parts += ["## Rounds", "", _md_table(ROUND_COLUMNS, round_rows(report)), ""]
    if plots:
        parts += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    parts += ["## Notes", ""] + [f"- {n}" for n in _notes(report)] + [""]
    return "\n".join(parts)


def default_out_dir(name: str | None = None, root: str | Path = DEFAULT_REPORTS_DIR) -> Path:
    """``reports/<name>``, or ``reports/<UTC timestamp>`` without a name. Raises :class:`ReportError` for a name that
    is not a plain folder name (letters, digits, ``._-``)."""
    if name is None:
        return Path(root) / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    if not _PLAIN_NAME.fullmatch(name) or ".." in name:
        raise ReportError(f"report name {name!r} is not a plain folder name (letters, digits, '.', '_', '-')")
    return Path(root) / name


def summaries_json(report: Report) -> dict:
    """The report's figures as JSON: each run's summary (keyed by label, with its path, model, mode and round) and
    the paired comparisons."""
    return {"seed": report.seed, "bootstrap_resamples": report.resamples,
            "runs": {r.label: {"path": str(r.path), "model": r.model, "mode": r.mode, "round": r.round,
                               "summary": r.summary, "thinking_tokens": r.thinking_tokens} for r in report.runs},
            "comparisons": report.comparisons, "family_comparisons": report.family_comparisons,
            "prompt_arms": report.prompt_arms}


def check_out_dir(out_dir: str | Path) -> None:
    """Raise :class:`ReportError` when ``out_dir``, or the nearest of its parents that exists, is not a folder,
    so a report that cannot be written is refused before anything is printed."""
    blocking = blocking_file(out_dir)
    if blocking is not None:
        raise ReportError(f"cannot write the report into '{out_dir}': '{blocking}' is a file, not a folder")
