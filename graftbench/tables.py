"""The rich tables the CLI prints: run summaries and samples, check-exact's pairs and controls, deposits, a
store's index rows.

Printing only: the figures come from :func:`graftbench.manifest.compute_totals` and the exactness manifest. Every
cell and title that can hold untrusted text (a manifest, an index row, model output) goes through
:func:`graftbench.display_text.console_text`: shown as written, never parsed as markup, controls made visible."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from .display_text import console_text, visible
from .sample import Sample

if TYPE_CHECKING:
    from .deposit import DepositReport
    from .rescore import Rescore


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


def summary_table(rows: list[tuple[str, dict]], energy_method: str, title: str = "summary") -> Table:
    """One row per ``(label, totals)``; the energy column is labelled with its method (``rapl``/``estimate``)."""
    table = Table(title=console_text(title))
    table.add_column("run")
    for header, _, _ in SUMMARY_COLUMNS:
        label = f"{header} ({energy_method})" if header == "energy J" else header
        table.add_column(label, justify="right")
    for label, totals in rows:
        cells = []
        for _, key, digits in SUMMARY_COLUMNS:
            if key == "correct / n":
                cells.append(f"{totals['correct']}/{totals['samples']} ({totals['accuracy']:.0%})")
            else:
                cells.append(_fmt(totals.get(key), digits or 2))
        _add_row(table, label, *cells)
    return table


def samples_table(samples: list[Sample], limit: int = 40) -> Table:
    """Per-sample view: id, mode/route, verdict, extracted answer against key, tokens and finish reason (and, for
    a program, why it stopped, ``program ok`` when it ended normally)."""
    table = Table(title="samples")
    for name in ("problem", "mode", "route", "ok", "extracted", "key", "decode tok", "finish", "fallback"):
        table.add_column(name)
    for s in samples[:limit]:
        finish = s.finish_reason if s.program is None else f"{s.finish_reason} · program {s.stopped or 'ok'}"
        _add_row(table, s.problem_id, s.mode, s.route or "—", "✓" if s.correct else "✗", str(s.extracted)[:20], s.key,
                      str(s.decode_tokens), finish, (s.fallback or "")[:40])
    return table


def exactness_tables(manifest: dict) -> list[Table]:
    """check-exact's tables: graft vs fresh recompute per pair kind, and the negative controls (if run)."""
    totals = manifest["totals"]
    pairs = Table(title=console_text(f"graft vs fresh chunked recompute ({manifest['config']['model']}, "
                                     f"{manifest['config']['dtype']})"))
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
        ctl = Table(title="negative controls (must differ)")
        for name in ("control", "pairs", "byte-exact", "max |Δlogit|", "mean KL", "p99 KL", "argmax agree"):
            ctl.add_column(name, justify="right")
        for name, row in totals["controls"].items():
            _add_row(ctl, name, str(row["pairs"]), str(row["exact_pairs"]), f"{row['max_abs_delta']:.3g}",
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


_TEXT_COLUMNS = {"run", "model", "mode · layout", "family", "graft run", "baseline run", "mode"}


def report_tables(report) -> list[Table]:
    """``graftbench report``'s tables: one row per run, one per run and family, the paired comparisons and the
    rounds (when any). The cells come from :mod:`graftbench.report`, shared with the markdown file."""
    from .report import (COMPARISON_COLUMNS, FAMILY_COLUMNS, ROUND_COLUMNS, RUN_COLUMNS, comparison_rows,
                         family_rows, round_rows, run_row)

    def table(title: str, columns, rows) -> Table:
        built = Table(title=console_text(title))
        for name in columns:
            built.add_column(name, justify="left" if name in _TEXT_COLUMNS else "right",
                             no_wrap=name in ("run", "graft run", "baseline run"))
        for row in rows:
            _add_row(built, *row)
        return built

    rows = [dict(zip(RUN_COLUMNS, run_row(r))) for r in report.runs]
    split = RUN_COLUMNS.index("decode tok / sample")  # two tables, so that a 160-column terminal holds them
    first = [c for c in RUN_COLUMNS[:split] if c != "model"]
    second = ["run", "model", *RUN_COLUMNS[split:]]
    tables = [table("runs: accuracy", first, [[row[c] for c in first] for row in rows]),
              table("runs: cost and copy controls", second, [[row[c] for c in second] for row in rows]),
              table("per family", FAMILY_COLUMNS, family_rows(report))]
    if report.comparisons:
        tables.append(table("paired comparisons (graft − baseline, same problems)", COMPARISON_COLUMNS,
                            comparison_rows(report)))
    if report.rounds:
        tables.append(table("rounds", ROUND_COLUMNS, round_rows(report)))
    return tables


def _pct_ci(block: dict | None) -> str:
    from .report import accuracy_cell

    return accuracy_cell(block["avg_at_n"], block["ci95"]) if block else "—"


def rounds_table(summary: dict, title: str) -> Table:
    """``graftbench flywheel``: per round the library size, held-out avg@N of baseline and graft with 95% intervals,
    the paired graft − baseline difference with its interval, recurring avg@N, decode tokens per correct sample."""
    table = Table(title=console_text(title))
    for column in ("round", "library", "held-out baseline", "held-out graft", "graft − baseline [95%]",
                   "recurring", "tok / correct (graft)", "deposited"):
        table.add_column(column)
    for row in summary["rounds"]:
        diff = row["difference"]
        diff_text = "—" if not diff else (f"{100 * diff['mean_difference']:+.1f} pts "
                                          f"[{100 * diff['ci95'][0]:+.1f}, {100 * diff['ci95'][1]:+.1f}]")
        graft = row["held_out_graft"]
        _add_row(table, str(row["round"]), str(row["library_size"]), _pct_ci(row["held_out_baseline"]),
                      _pct_ci(graft), diff_text, _pct_ci(row["recurring"]),
                      _fmt(graft["decode_tokens_per_correct"], 1) if graft else "—", str(row["deposited"]))
    return table


STORE_COLUMNS = ("id", "problem key", "answer", "tokens", "MB", "parent", "source")


def _cell(value, cut: int) -> str:
    """An index cell as text, cut to ``cut`` characters: empty for NULL, else whatever it holds (any SQLite type),
    controls made visible."""
    return "" if value is None else visible(value)[:cut]


def _megabytes(value) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value / 1e6:.1f}"
    return _cell(value, 20)  # a cell of another type than the schema's is shown, not computed with


def store_table(rows: list[dict], store) -> Table:
    """``store ls``: one row per index row (id, problem key, answer, tokens, MB, parent, source), each cell shown
    whatever its type (an index written by another tool may hold text where a number belongs, or ``NULL``)."""
    table = Table(title=console_text(f"artifacts in {store}"))
    for name in STORE_COLUMNS:
        table.add_column(name)
    for row in rows:
        _add_row(table, _cell(row.get("id"), 16), _cell(row.get("problem_key"), 12), _cell(row.get("answer"), 80),
                 _cell(row.get("n_tokens"), 20), _megabytes(row.get("bytes")), _cell(row.get("parent"), 12),
                 _cell(row.get("source"), 80))
    return table
