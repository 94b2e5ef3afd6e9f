"""Rich tables for run summaries (printing only; the figures come from :func:`graftbench.manifest.compute_totals`)."""

from __future__ import annotations

from rich.table import Table


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
    table = Table(title=title)
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
        table.add_row(label, *cells)
    return table


def samples_table(samples: list[dict], limit: int = 40) -> Table:
    """Per-sample view: id, mode/route, verdict, extracted answer against key, tokens and finish reason."""
    table = Table(title="samples")
    for name in ("problem", "mode", "route", "ok", "extracted", "key", "decode tok", "finish", "fallback"):
        table.add_column(name)
    for s in samples[:limit]:
        table.add_row(
            s["problem_id"], s["mode"], s.get("route") or "—", "✓" if s["correct"] else "✗",
            str(s["extracted"])[:20], s["key"], str(s["decode_tokens"]), s["finish_reason"],
            (s.get("fallback") or "")[:40],
        )
    return table
