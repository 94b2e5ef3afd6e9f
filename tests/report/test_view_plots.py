"""The report's plots read with more than two runs: every run's number beside its point with none printed over
another (the names in a key under the axes), and a family at zero accuracy drawn as a visible zero. Also the sample
index in the samples table of a sampled run. No model: the runs are the committed manifests."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from graftbench.report.compare import RunEntry
from graftbench.report.plots import accuracy_figure, family_figure, write_plots
from graftbench.results.metrics import summarize

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests" / "amd-epyc-avx512"
NAMES = ("aime2024-smollm2-135m-baseline", "aime2024-smollm2-135m-recurring", "aime2024-qwen2.5-coder-0.5b-baseline",
         "aime2024-qwen2.5-coder-0.5b-recurring", "aime2024-qwen2.5-coder-1.5b-llama-f16-baseline",
         "aime2024-qwen2.5-coder-1.5b-llama-f16-recurring")


def _runs() -> list[RunEntry]:
    runs = []
    for name in NAMES:
        manifest = json.loads((MANIFESTS / f"{name}.json").read_text())
        version = manifest["settings"].get("verifier_version", 1)
        runs.append(RunEntry(name, MANIFESTS / f"{name}.json", manifest,
                             summarize(manifest["samples"], manifest["problems"], verifier_version=version)))
    return runs


def _boxes(figure, gid_prefix: str) -> list:
    renderer = figure.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in figure.findobj(lambda a: str(a.get_gid()).startswith(gid_prefix))]


def test_run_numbers_never_print_over_each_other():
    runs = _runs()
    figure = accuracy_figure(runs)
    figure.canvas.draw()
    boxes = _boxes(figure, "run-number-")
    assert len(boxes) == len(runs) == 6
    # The three baselines sit at 0% between about 680 and 760 tokens: without the fan their numbers overlap.
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    key = [t for t in figure.texts if t.get_gid() == "run-key"]
    assert len(key) == 1 and all(f"{n}: {name}" in key[0].get_text() for n, name in enumerate(NAMES, start=1))
    axes_box = figure.axes[0].get_window_extent(figure.canvas.get_renderer())
    assert not _boxes(figure, "run-key")[0].overlaps(axes_box)  # the key lies under the axes, not over them


def test_a_family_at_zero_is_drawn_and_labelled():
    runs = _runs()[:4]
    figure = family_figure(runs)
    figure.canvas.draw()
    zeros = sum(1 for r in runs for f in r.summary["families"].values() if f["avg_at_n"] == 0)
    assert zeros == 4  # two baselines, AIME I and II each
    assert len(figure.findobj(lambda a: a.get_gid() == "zero-bar")) == zeros
    labels = figure.findobj(lambda a: a.get_gid() == "zero-label")
    assert len(labels) == zeros and all(t.get_text() == "0" for t in labels)
    assert figure.axes[0].get_ylim()[0] < 0  # the zero line is inside the axes, not on their edge


def test_the_plots_are_written(tmp_path):
    from graftbench.report.compare import Report

    paths = write_plots(Report(_runs()), tmp_path)
    assert [p.name for p in paths] == ["accuracy_vs_tokens.png", "families.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_a_sampled_runs_samples_table_names_each_sample():
    from rich.console import Console

    from graftbench.cli.tables import samples_table
    from graftbench.results.samples import Sample

    manifest = json.loads((MANIFESTS / "flywheel-qwen2.5-coder-0.5b-program-r1-graft.json").read_text())
    assert manifest["settings"]["samples"] == 4
    samples = [Sample.from_json(s) for s in manifest["samples"][:8]]
    console = Console(width=120, record=True)
    console.print(samples_table(samples))
    rows = [line for line in console.export_text().splitlines() if "#" in line]
    names = [line.split("│")[1].strip() for line in rows]
    assert names == [f"{s.problem_id}#{s.sample_index}" for s in samples] and len(set(names)) == 8
    greedy = json.loads((MANIFESTS / f"{NAMES[1]}.json").read_text())["samples"][:2]
    console = Console(width=120, record=True)
    console.print(samples_table([Sample.from_json(s) for s in greedy]))
    assert "#" not in console.export_text()  # one greedy sample per problem: the id alone
