"""The PNG plots of ``graftbench report``, drawn with matplotlib's Agg canvas (no display, no pyplot state).

- ``accuracy_vs_tokens.png``: each run's accuracy (with its 95% interval) against its mean decode tokens per
  sample, baseline and graft runs marked apart (a log axis when the token counts span more than 20×);
- ``families.png``: accuracy per family, one bar per run, with the 95% intervals as error bars;
- ``rounds.png``: accuracy over flywheel rounds, one line per series: held-out baseline and graft, recurring
  (only when runs carry a round).

Every label from a manifest (run names, families) goes through :func:`graftbench.util.display_text.plot_text`: drawn as
written, never parsed as mathtext.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..util.display_text import plot_text

if TYPE_CHECKING:
    from .compare import Report, RunEntry

MODE_STYLE = {"baseline": ("tab:gray", "o"), "graft": ("tab:blue", "s")}
SERIES_STYLE = {**MODE_STYLE, "recurring": ("tab:green", "^")}
ROUND_DODGE = {"baseline": -0.06, "graft": 0.06, "recurring": 0.12}  # apart, so equal accuracies hide no line


def _figure(width: float = 7.0, height: float = 4.5) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _error(value: float, interval) -> list[float]:
    """Distances below and above ``value`` to its interval's ends (0 without an interval)."""
    if interval is None:
        return [0.0, 0.0]
    return [max(0.0, value - interval[0]), max(0.0, interval[1] - value)]


def accuracy_vs_tokens(runs: list[RunEntry], path: Path) -> Path:
    """Accuracy (fraction, with its 95% interval) against mean decode tokens per sample, one point per run."""
    figure = _figure()
    axes = figure.add_subplot()
    tokens = [r.summary["mean_decode_tokens"] for r in runs if r.summary["mean_decode_tokens"]]
    for mode, (color, marker) in MODE_STYLE.items():
        chosen = [r for r in runs if r.mode == mode and r.summary["avg_at_n"] is not None]
        if not chosen:
            continue
        xs = [r.summary["mean_decode_tokens"] for r in chosen]
        ys = [r.summary["avg_at_n"] for r in chosen]
        errors = list(zip(*[_error(r.summary["avg_at_n"], r.summary["accuracy_ci95"]) for r in chosen]))
        axes.errorbar(xs, ys, yerr=errors, fmt=marker, color=color, capsize=4, label=mode)
        for r, x, y in zip(chosen, xs, ys):
            axes.annotate(plot_text(r.label, 60), (x, y), textcoords="offset points", xytext=(6, 6), fontsize=7)
    if tokens and min(tokens) > 0 and max(tokens) / min(tokens) > 20:
        axes.set_xscale("log")
    axes.margins(x=0.25)  # room for the labels beside the points
    axes.set_xlabel("mean decode tokens per sample (tokens)")
    axes.set_ylabel("accuracy (avg@N, 95% interval)")
    return _finish(figure, axes, "accuracy against decode tokens", path)


def _finish(figure, axes, title: str, path: Path) -> Path:
    """An accuracy plot's common end: y from 0 to 1, title, grid, legend when there are labels; saved to ``path``."""
    axes.set_ylim(-0.05, 1.05)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    return path


def family_bars(runs: list[RunEntry], path: Path) -> Path:
    """Accuracy per family as grouped bars (one per run) with 95% intervals as error bars."""
    families = sorted({name for r in runs for name in r.summary["families"]})
    figure = _figure(max(7.0, 1.2 * len(families) * max(1, len(runs)) / 2 + 3), 4.5)
    axes = figure.add_subplot()
    width = 0.8 / max(1, len(runs))
    for i, run in enumerate(runs):
        stats = [run.summary["families"].get(name) for name in families]
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(families))]
        ys = [s["avg_at_n"] if s else 0.0 for s in stats]
        errors = list(zip(*[_error(s["avg_at_n"], s["accuracy_ci95"]) if s else [0.0, 0.0] for s in stats])) \
            if families else None
        axes.bar(xs, ys, width=width, yerr=errors, capsize=3, label=plot_text(run.label, 60))
    axes.set_xticks(range(len(families)), [plot_text(name, 40) for name in families],
                    rotation=30 if len(families) > 6 else 0)
    axes.set_ylabel("accuracy (avg@N, 95% interval)")
    axes.set_ylim(0, 1.05)
    axes.set_title("accuracy per family")
    axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(3, max(1, len(runs))))
    figure.tight_layout()
    figure.savefig(path)
    return path


def rounds_curve(rounds: list[RunEntry], path: Path) -> Path:
    """Accuracy (with 95% intervals) over flywheel rounds, one line per series (:attr:`RunEntry.series`: held-out
    ``baseline`` and ``graft``, and ``recurring`` for the library asked again), each shifted a little along the
    round axis (``ROUND_DODGE``) so that a line equal to another stays visible beside it."""
    figure = _figure()
    axes = figure.add_subplot()
    for series, (color, marker) in SERIES_STYLE.items():
        chosen = [r for r in rounds if r.series == series and r.summary["avg_at_n"] is not None]
        if not chosen:
            continue
        xs = [r.round + ROUND_DODGE[series] for r in chosen]
        ys = [r.summary["avg_at_n"] for r in chosen]
        errors = list(zip(*[_error(r.summary["avg_at_n"], r.summary["accuracy_ci95"]) for r in chosen]))
        axes.errorbar(xs, ys, yerr=errors, fmt=marker + "-", color=color, capsize=4, label=series)
    axes.set_xlabel("round")
    axes.set_ylabel("accuracy (avg@N, 95% interval)")
    axes.set_xticks(sorted({r.round for r in rounds}))
    return _finish(figure, axes, "accuracy over rounds", path)


def write_plots(report: Report, out_dir: Path) -> list[Path]:
    """Draw every plot that applies into ``out_dir``; returns the PNG paths (``rounds.png`` only when runs carry a
    round). Raises ``OSError`` when a file cannot be written."""
    paths = [accuracy_vs_tokens(report.runs, out_dir / "accuracy_vs_tokens.png"),
             family_bars(report.runs, out_dir / "families.png")]
    if report.rounds:
        paths.append(rounds_curve(report.rounds, out_dir / "rounds.png"))
    return paths
