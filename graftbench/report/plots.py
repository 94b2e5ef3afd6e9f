"""The PNG plots of ``graftbench report``, drawn with matplotlib's Agg canvas (no display, no pyplot state).

- ``accuracy_vs_tokens.png``: each run's accuracy (with its 95% interval) against its mean decode tokens per
  sample, baseline and graft runs marked apart (a log axis when the token counts span more than 20×); each point
  carries its run's number, fanned out where points fall together, and the legend names the runs by number, so no
  two labels print over each other however many runs there are;
- ``families.png``: accuracy per family, one bar per run, with the 95% intervals as error bars; a bar at zero is
  drawn as a line on the axis in its run's colour with ``0`` above it, so a zero reads as a measured zero, not as a
  missing bar;
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


LABEL_STEP_PX = 11  # points: how far a run's number moves on from a number it would overlap


def accuracy_vs_tokens(runs: list[RunEntry], path: Path) -> Path:
    """:func:`accuracy_figure` written to ``path``; returns ``path``. Raises ``OSError`` when it cannot be
    written."""
    accuracy_figure(runs).savefig(path)
    return path


def accuracy_figure(runs: list[RunEntry]) -> Figure:
    """Accuracy (fraction, with its 95% interval) against mean decode tokens per sample, one point per run, each
    numbered (1, 2, … in the order given) with a key under the axes naming every number's run
    (:func:`_number_points`)."""
    figure = _figure(7.0, 4.5 + 0.18 * max(0, len(runs) - 2))
    axes = figure.add_subplot()
    tokens = [r.summary["mean_decode_tokens"] for r in runs if r.summary["mean_decode_tokens"]]
    placed = []
    for mode, (color, marker) in MODE_STYLE.items():
        chosen = [(n, r) for n, r in enumerate(runs, start=1) if r.mode == mode and r.summary["avg_at_n"] is not None]
        if not chosen:
            continue
        xs = [r.summary["mean_decode_tokens"] for _, r in chosen]
        ys = [r.summary["avg_at_n"] for _, r in chosen]
        errors = list(zip(*[_error(r.summary["avg_at_n"], r.summary["accuracy_ci95"]) for _, r in chosen]))
        axes.errorbar(xs, ys, yerr=errors, fmt=marker, color=color, capsize=4, label=mode)
        placed += [(n, r, x, y) for (n, r), x, y in zip(chosen, xs, ys)]
    if tokens and min(tokens) > 0 and max(tokens) / min(tokens) > 20:
        axes.set_xscale("log")
    axes.margins(x=0.25)  # room for the numbers beside the points
    axes.set_xlabel("mean decode tokens per sample (tokens)")
    axes.set_ylabel("accuracy (avg@N, 95% interval)")
    axes.set_ylim(-0.05, 1.05)
    _number_points(figure, axes, placed)
    _finish(figure, axes, "accuracy against decode tokens")
    return figure


def _number_points(figure, axes, placed: list) -> None:
    """Write each run's number beside its point, away from the nearer edge of the axes (upward in the lower half,
    downward in the upper half), moved on by :data:`LABEL_STEP_PX` until it overlaps no number already written
    (equal accuracies at similar token counts are common); and list ``number: run name`` under the axes, one run a
    line."""
    figure.canvas.draw()  # fixes the axes' scales, so data map to the pixels the file will have
    renderer = figure.canvas.get_renderer()
    written: list = []
    for number, _, x, y in placed:
        direction, base = (1, 4) if y <= 0.5 else (-1, -12)
        for step in range(4 * len(placed) + 1):
            label = axes.annotate(str(number), (x, y), textcoords="offset points", fontsize=8,
                                  xytext=(6, base + direction * LABEL_STEP_PX * step), gid=f"run-number-{number}")
            box = label.get_window_extent(renderer).padded(4)  # a gap, so "1" beside "3" never reads "13"
            if not any(box.overlaps(other) for other in written):
                written.append(box)
                break
            label.remove()
    if placed:
        named = sorted(placed, key=lambda p: p[0])
        key = "\n".join(f"{number}: {plot_text(run.label, 70)}" for number, run, _, _ in named)
        figure.text(0.01, 0.01, key, fontsize=7, va="bottom", ha="left", gid="run-key")
        height_px = figure.get_figheight() * figure.dpi
        figure.subplots_adjust(bottom=(60 + 11 * len(placed)) / height_px)  # the x label, then one line per run


def _finish(figure, axes, title: str, path: Path | None = None) -> Path | None:
    """An accuracy plot's common end: y from 0 to 1, title, grid, legend when there are labels, laid out tight
    unless a run key under the axes fixed the layout; saved to ``path`` when given (and ``path`` returned)."""
    axes.set_ylim(-0.05, 1.05)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend()
    if not any(t.get_gid() == "run-key" for t in figure.texts):
        figure.tight_layout()
    if path is not None:
        figure.savefig(path)
    return path


def family_bars(runs: list[RunEntry], path: Path) -> Path:
    """:func:`family_figure` written to ``path``; returns ``path``. Raises ``OSError`` when it cannot be written."""
    family_figure(runs).savefig(path)
    return path


def family_figure(runs: list[RunEntry]) -> Figure:
    """Accuracy per family as grouped bars (one per run) with 95% intervals as error bars; a zero bar is a line on
    the axis with ``0`` above it."""
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
        bars = axes.bar(xs, ys, width=width, yerr=errors, capsize=3, label=plot_text(run.label, 60))
        color = bars.patches[0].get_facecolor() if bars.patches else None
        for x, y, s in zip(xs, ys, stats):
            if s is not None and y == 0:  # a measured zero: a line on the axis and its value, not an empty slot
                axes.hlines(0, x - width / 2, x + width / 2, colors=[color], linewidth=3, gid="zero-bar")
                axes.annotate("0", (x, 0), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7,
                              bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none"}, zorder=5,
                              gid="zero-label")
    axes.set_xticks(range(len(families)), [plot_text(name, 40) for name in families],
                    rotation=30 if len(families) > 6 else 0)
    axes.set_ylabel("accuracy (avg@N, 95% interval)")
    axes.set_ylim(-0.02, 1.05)
    axes.set_title("accuracy per family")
    axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(3, max(1, len(runs))))
    figure.tight_layout()
    return figure


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
