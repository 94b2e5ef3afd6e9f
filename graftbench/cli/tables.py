"""The rich tables the CLI prints: run summaries and samples, check-exact's pairs and controls, deposits, a
store's index rows, each sized to fit an 80-column terminal.

Printing only: the figures come from :func:`graftbench.results.manifest.compute_totals` and the exactness manifest.
Every cell and title that can hold untrusted text (a manifest, an index row, model output) goes through
:func:`graftbench.util.display_text.console_text`: shown as written, never parsed as markup, controls made visible."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.box import SIMPLE_HEAD
from rich.table import Table

from ..util.display_text import console_text, visible
from ..results.samples import Sample

if TYPE_CHECKING:
    from ..eval.deposit import DepositReport
    from ..results.metrics import RunChecks
    from ..results.rescore import Rescore


def _add_row(table: Table, *cells) -> None:
    table.add_row(*(console_text("" if cell is None else cell) for cell in cells))


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


SUMMARY_COLUMNS = (
    ("accuracy", "correct / n", None),
    ("decode tokens", "decode_tokens", None),
    ("decode tok / correct", "decode_tokens_per_correct", 1),
    ("prefill tok", "prefill_tokens", None),
    ("grafted tok", "prefill_tokens_saved", None),
    ("grafts", "grafts", None),
    ("fallbacks", "fallbacks", None),
    ("TTFT s", "mean_ttft_s", 3),
    ("wall s", "wall_s", 1),
    ("energy J", "energy_j", 1),
)
# What a terminal shows by default, so that the table fits 80 columns; every figure stays in the manifest's totals.
NARROW_SUMMARY = ("accuracy", "decode tokens", "grafted tok", "grafts", "fallbacks", "wall s")
FULL_FIGURES_NOTE = ("every figure (prefill and grafted tokens, TTFT, energy, per-sample fields) is in the run's "
                     "manifest.json; `graftbench report` compares runs")


def summary_table(rows: list[tuple[str, dict]], energy_method: str, title: str = "summary",
                  wide: bool = False, checks: dict[str, "RunChecks"] | None = None) -> Table:
    """One row per ``(label, totals)``: the columns of ``NARROW_SUMMARY`` (fitting 80 columns), or with ``wide``
    all of ``SUMMARY_COLUMNS``; the energy column is labelled with its method (``rapl``/``estimate``). Where
    ``checks`` holds a label's :class:`~graftbench.results.metrics.RunChecks`, its wall seconds include the
    ``--certify`` recompute (:func:`checks_lines` says how they split)."""
    table = Table(title=console_text(title), box=SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("run", overflow="fold")
    columns = [c for c in SUMMARY_COLUMNS if wide or c[0] in NARROW_SUMMARY]
    for header, _, _ in columns:
        label = f"{header} ({energy_method})" if header == "energy J" else header
        table.add_column(label, justify="right")
    for label, totals in rows:
        cells = []
        for _, key, digits in columns:
            if key == "correct / n":
                cells.append(f"{totals['correct']}/{totals['samples']} ({totals['accuracy']:.0%})")
            elif key == "wall_s" and checks and label in checks:
                cells.append(_fmt(float(checks[label].wall_s), digits))
            else:
                cells.append(_fmt(totals.get(key), digits or 2))
        _add_row(table, label, *cells)
    return table


def checks_lines(checks: "RunChecks") -> list[str]:
    """What a run checked, as lines printed under its summary (plain text: print through
    :func:`graftbench.util.display_text.console_markup`): the certificates (``30 of 30 equal``, or that none was
    asked for when the run grafted without ``--certify``), each fallback with the reason its samples record, and
    the wall time with the solving and certifying seconds apart."""
    lines = []
    if checks.certified:
        differ = checks.certified - checks.equal
        lines.append(f"certificates: {checks.equal} of {checks.certified} equal (each certified problem's "
                     "first-step logits after the graft against a fresh chunked recompute, SHA-256)"
                     + (f"; {differ} differ" if differ else ""))
    elif checks.grafted:
        lines.append("certificates: none (--certify recomputes each graft and compares its logits)")
    if checks.fallbacks:
        lines.append(f"fallbacks: {len(checks.fallbacks)} problem(s) ran as the baseline, their artifact refused:")
        lines += [f"  {problem}: {reason}" for problem, reason in checks.fallbacks]
    if checks.certified:
        certifying = ("certification time not recorded" if checks.certify_s is None
                      else f"{checks.certify_s:.1f} s certifying")
        lines.append(f"wall time: {checks.wall_s:.1f} s ({checks.solve_s:.1f} s solving, {certifying})")
    return lines


def samples_table(samples: list[Sample], limit: int = 40) -> Table:
    """Per-sample view fitting 80 columns: id (``id#i`` with the sample index when the run is sampled, so the
    samples of one problem are told apart), route (``—`` for a baseline sample; ``(fallback)`` after the route
    whose artifact was refused: :func:`checks_lines` prints each reason in full under the summary), verdict,
    extracted answer against key, decode tokens and finish reason (and, for a program, why it stopped,
    ``program ok`` when it ended normally)."""
    table = Table(title=console_text("samples"))
    for name in ("problem", "route", "ok", "extracted", "key", "tokens", "finish"):
        table.add_column(name, justify="right" if name == "tokens" else "left", overflow="fold")
    for s in samples[:limit]:
        finish = s.finish_reason if s.program is None else f"{s.finish_reason} · program {s.stopped or 'ok'}"
        route = s.route or "—"
        name = s.problem_id if s.seed is None and s.sample_index == 0 else s.sample_id
        _add_row(table, name, f"{route} (fallback)" if s.fallback else route, "✓" if s.correct else "✗",
                      str(s.extracted)[:12], s.key, str(s.decode_tokens), finish)
    return table


def exactness_tables(manifest: dict) -> list[Table]:
    """check-exact's tables: graft vs fresh recompute per pair kind, and the negative controls (if run)."""
    totals = manifest["totals"]
    config = manifest["config"]
    from ..results.model_names import model_name

    pairs = Table(title=console_text(f"graft vs fresh chunked recompute ({model_name(config)}, {config['dtype']})"))
    for name in ("kind", "pairs", "byte-exact", "max |Δlogit|", "KL max", "argmax agree", "artifact tokens"):
        pairs.add_column(name, justify="right")
    for kind in totals["kinds"]:
        rows = [r for r in manifest["pairs"] if r["kind"] == kind]
        _add_row(pairs, kind, str(len(rows)), str(sum(r["equal"] for r in rows)),
                      f"{max(r['max_abs_delta'] for r in rows):.3g}", f"{max(r['kl_max'] for r in rows):.3g}",
                      f"{min(r['argmax_agreement'] for r in rows):.1%}",
                      f"{min(r['artifact_tokens'] for r in rows)}–{max(r['artifact_tokens'] for r in rows)}")
    tables = [pairs]
    if totals["controls"]:
        # must_differ: the controls claimed to differ (manifests recorded before it was written have none: "—")
        claimed = manifest.get("settings", {}).get("must_differ")
        ctl = Table(title=console_text("negative controls"))
        for name in ("control", "claim", "pairs", "byte-exact", "max |Δlogit|", "mean KL", "p99 KL", "argmax agree"):
            ctl.add_column(name, justify="right")
        for name, row in totals["controls"].items():
            claim = "—" if claimed is None else "must differ" if name in claimed else "measured"
            _add_row(ctl, name, claim, str(row["pairs"]), str(row["exact_pairs"]), f"{row['max_abs_delta']:.3g}",
                        f"{row['kl_mean']:.3g}", f"{row['kl_p99']:.3g}", f"{row['argmax_agreement']:.2%}")
        tables.append(ctl)
    return tables


def deposit_table(report: DepositReport, store) -> Table:
    """One row per deposited solution: problem, artifact id (first 16 hex digits), tokens, and whether it was
    newly written, prefilled again to the bytes already stored, or reused without a prefill."""
    table = Table(title=console_text(f"deposited into {store}"))
    for name in ("problem", "artifact id", "tokens", "new"):
        table.add_column(name)
    for pid, aid, tokens, new in report.deposited:
        stored = "already stored, reused" if aid in report.reused else "already stored, same bytes"
        _add_row(table, pid, aid[:16], str(tokens), "yes" if new else stored)
    return table


def rescore_table(report: "Rescore") -> Table:
    """``verify-manifest --rescore``: each sample whose extracted answer or verdict changes under the re-scoring
    verifier, titled with both versions and both correct counts (a re-score, not part of the check)."""
    title = (f"Re-score under verifier {report.version} (recorded under verifier {report.recorded_version}); "
             f"not part of the check: correct {report.recorded_correct} -> {report.correct} of {report.samples}, "
             f"{len(report.changes)} extracted answer(s) changed, {report.verdicts_changed} verdict(s)")
    table = Table(title=console_text(title))
    for column in ("sample", "recorded extracted", "recorded", "re-scored extracted", "re-scored"):
        table.add_column(column)
    for c in report.changes:
        _add_row(table, c.problem_id, _fmt(c.recorded_extracted), "correct" if c.recorded_correct else "incorrect",
                      _fmt(c.extracted), "correct" if c.correct else "incorrect")
    return table


RUNS_PER_TABLE = 2  # runs side by side in a terminal report table: with the figure names, 80 columns hold two


def _figures(title: str, columns, rows: list[list[str]], key: str) -> list[Table]:
    """Tables of one column of figures per row (the figure names down the left, the ``key`` column's cells as
    headers), ``RUNS_PER_TABLE`` rows to a table, so that each fits 80 columns whatever the run names."""
    columns = list(columns)
    at = columns.index(key)
    tables = []
    for start in range(0, len(rows), RUNS_PER_TABLE):
        chunk = rows[start:start + RUNS_PER_TABLE]
        span = f"{start + 1}" + (f"–{start + len(chunk)}" if len(chunk) > 1 else "")
        suffix = f" ({span} of {len(rows)})" if len(rows) > RUNS_PER_TABLE else ""
        built = Table(title=console_text(title + suffix), box=SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        built.add_column("", style="bold", overflow="fold")
        for row in chunk:
            built.add_column(console_text(row[at]), overflow="fold")
        for i, name in enumerate(columns):
            if i != at:
                _add_row(built, name, *[row[i] for row in chunk])
        tables.append(built)
    return tables


def report_tables(report) -> list[Table]:
    """``graftbench report``'s terminal tables, each fitting 80 columns: per run its figures (a column per run, two
    runs to a table), per run its families, each paired comparison (overall and by family) and the rounds (when any). The cells come from
    :mod:`graftbench.report.compare`, shared with the markdown file, which holds every figure in wide tables."""
    from ..report.compare import (COMPARISON_COLUMNS, FAMILY_COLUMNS, FAMILY_COMPARISON_COLUMNS, ROUND_COLUMNS,
                                  RUN_COLUMNS, comparison_rows, family_comparison_rows, family_rows, round_rows,
                                  run_row)

    tables = _figures("runs", RUN_COLUMNS, [run_row(r) for r in report.runs], "run")
    in_file_only = ("run", "samples", "pass@N", "decode tok / correct", "copy rate", "copy baseline")  # report.md
    shown = [i for i, name in enumerate(FAMILY_COLUMNS) if name not in in_file_only]
    families = family_rows(report)
    for run in report.runs:
        rows = [[row[i] for i in shown] for row in families if row[0] == run.label]
        if rows:
            table = Table(title=console_text(f"per family: {run.label}"), box=SIMPLE_HEAD, pad_edge=False,
                          collapse_padding=True)
            for i in shown:
                table.add_column(FAMILY_COLUMNS[i], justify="left" if i == 1 else "right", overflow="fold",
                                 no_wrap="CI" in FAMILY_COLUMNS[i])
            for row in rows:
                _add_row(table, *row)
            tables.append(table)
    if report.comparisons:
        tables += _figures("paired comparisons (graft − baseline, same problems)", COMPARISON_COLUMNS,
                           comparison_rows(report), "graft run")
    if report.family_comparisons:
        tables += _figures("paired comparisons by family", FAMILY_COMPARISON_COLUMNS, family_comparison_rows(report),
                           "families")
    if report.rounds:
        tables += _figures("rounds", ROUND_COLUMNS, round_rows(report), "run")
    return tables


def _pct_ci(block: dict | None) -> str:
    from ..report.compare import accuracy_cell

    return accuracy_cell(block["avg_at_n"], block["ci95"]) if block else "—"


ROUNDS_COLUMNS = ("round", "library", "held-out baseline", "held-out graft", "graft − baseline [95%]", "recurring",
                  "tok / correct (graft)", "deposited")


def rounds_tables(summary: dict, title: str) -> list[Table]:
    """``graftbench flywheel``: per round (a column each, two to a table, so that 80 columns hold them) the library
    size, held-out avg@N of baseline and graft with 95% intervals, the paired graft − baseline difference with its
    interval, recurring avg@N, decode tokens per correct sample and how many were deposited."""
    rows = []
    for row in summary["rounds"]:
        diff = row["difference"]
        diff_text = "—" if not diff else (f"{100 * diff['mean_difference']:+.1f} pts "
                                          f"[{100 * diff['ci95'][0]:+.1f}, {100 * diff['ci95'][1]:+.1f}]")
        graft = row["held_out_graft"]
        rows.append([f"round {row['round']}", str(row["library_size"]), _pct_ci(row["held_out_baseline"]),
                     _pct_ci(graft), diff_text, _pct_ci(row["recurring"]),
                     _fmt(graft["decode_tokens_per_correct"], 1) if graft else "—", str(row["deposited"])])
    return _figures(title, ROUNDS_COLUMNS, rows, "round")


STORE_COLUMNS = ("id", "problem", "model", "pin", "key", "tokens", "source")


def _cell(value, cut: int) -> str:
    """An index cell as text, cut to ``cut`` characters: empty for NULL, else whatever it holds (any SQLite type),
    controls made visible."""
    return "" if value is None else visible(value)[:cut]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def store_table(rows: list[dict], store, pins: dict) -> Table:
    """``store ls`` fitting 80 columns: one row per index row (id, problem id, model, dtype and pin fingerprint,
    answer key, tokens, source and the parent a chained artifact continues), titled with the count and the total
    size in MB. ``pins`` maps a pin fingerprint to its :class:`graftbench.store.coverage.PinHolding`. Each cell is shown
    whatever its type (an index written by another tool may hold text where a number belongs, or ``NULL``); a size
    that is not a number is left out of the total and counted."""
    sizes = [row.get("bytes") for row in rows]
    unsized = sum(not _is_number(size) for size in sizes)
    total = sum(size for size in sizes if _is_number(size)) / 1e6
    title = f"artifacts in {store}: {len(rows)}, {total:.1f} MB"
    title += f" ({unsized} of no recorded size)" if unsized else ""
    table = Table(title=console_text(title), box=SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name in STORE_COLUMNS:
        table.add_column(name, justify="right" if name == "tokens" else "left", no_wrap=name in ("id", "tokens"),
                         overflow="fold")
    for row in rows:
        fingerprint = row.get("config_fingerprint")
        pin = pins.get(fingerprint) if isinstance(fingerprint, str) else None
        parent = row.get("parent")
        source = _cell(row.get("source"), 80) + (f" ← {_cell(parent, 8)}" if parent else "")
        problem = row.get("problem_id") if row.get("problem_id") is not None else row.get("problem_key")
        _add_row(table, _cell(row.get("id"), 16), _cell(problem, 40), pin.model if pin else "?",
                 f"{pin.dtype if pin else '?'} {_cell(fingerprint, 8)}", _cell(row.get("answer"), 80),
                 _cell(row.get("n_tokens"), 20), source)
    return table
