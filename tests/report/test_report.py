"""``graftbench report`` on the committed AIME 2024 manifests and on hand-made N-sample manifests: the tables carry
what graftbench.results.metrics computes, the files are written, the PNGs decode, the lm-eval files parse. No model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.results.fingerprint import pin_fingerprint
from graftbench.util.hashing import sha256_text
from graftbench.results.manifest import build_manifest, load_manifest, recorded_verifier_version
from graftbench.results.metrics import newcombe_paired_interval, summarize
from graftbench.report.compare import RUN_COLUMNS, build_report, round_rows, run_row
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
BASELINE = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-baseline.json"
RECURRING = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-recurring.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def invoke(*args):
    result = CliRunner().invoke(app, ["report", *map(str, args)])
    text = " ".join("".join(" " if ch in "│╭╮╰╯─┃━┏┓┗┛┡┩└┘┌┐╇┳┻╋" else ch for ch in result.output).split())
    return result, text


def committed_summary(path: Path) -> dict:
    manifest = load_manifest(path)
    return summarize(manifest["samples"], manifest["problems"], verifier_version=recorded_verifier_version(manifest))


def assert_png(path: Path) -> None:
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_MAGIC, path
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100


def test_report_on_the_recurring_pair_prints_a_paired_interval_that_is_not_a_point(tmp_path):
    """0 of 30 → 30 of 30: a bootstrap of the paired differences printed [+100.0, +100.0]. The interval is now
    Newcombe's (1998, method 10), whose Table II example d is this very table (30 pairs, every one better in the
    first arm): [0.8395, 1.0000]."""
    base = REFERENCE_MANIFESTS / "aime2024-qwen2.5-coder-0.5b-baseline.json"
    graft = REFERENCE_MANIFESTS / "aime2024-qwen2.5-coder-0.5b-recurring.json"
    assert (committed_summary(base)["correct"], committed_summary(graft)["correct"]) == (0, 30)
    result, text = invoke(base, graft, "--out", tmp_path / "rep")
    assert result.exit_code == 0, result.output
    low, high = newcombe_paired_interval(0, 30, 0, 0)
    assert (round(low, 4), high) == (0.8395, 1.0)  # the published example
    cell = f"+100.0 pp [+{100 * low:.1f}, +100.0]"
    assert cell == "+100.0 pp [+83.9, +100.0]"
    assert cell in text and cell in (tmp_path / "rep" / "report.md").read_text()
    assert "[+100.0, +100.0]" not in text
    (comparison,) = json.loads((tmp_path / "rep" / "summary.json").read_text())["comparisons"]
    assert comparison["ci95_method"] == "newcombe" and comparison["ci95"] == [round(low, 6), 1.0]


def test_report_on_the_committed_manifests(tmp_path):
    out = tmp_path / "rep"
    result, text = invoke(BASELINE, RECURRING, "--out", out, "--format", "lm-eval")
    assert result.exit_code == 0, result.output
    summaries = {"aime2024-baseline-smollm2-135m": committed_summary(BASELINE),
                 "aime2024-recurring-smollm2-135m": committed_summary(RECURRING)}

    # the printed and the markdown tables hold metrics' figures
    recurring = summaries["aime2024-recurring-smollm2-135m"]
    low, high = recurring["accuracy_ci95"]
    accuracy_cell = f"{100 * recurring['avg_at_n']:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"
    assert accuracy_cell == "96.7% [83.3, 99.4]"
    markdown = (out / "report.md").read_text()
    assert accuracy_cell in text and accuracy_cell in markdown
    assert "0.0% [0.0, 11.4]" in markdown  # the baseline's 0 of 30, Wilson
    assert "| 678.8 | — |" in markdown and "| 4.7 | 4.9 |" in markdown  # decode tokens per sample, per correct
    recurring_joules = load_manifest(RECURRING)["totals"]["energy_j"]  # re-run under each new pin: not a constant
    assert "44,223 (estimate)" in markdown and f"{recurring_joules:,.0f} (estimate)" in markdown
    assert "+96.7 pp" in markdown and "+96.7 pp" in text  # the paired comparison
    for name in ("2024-I", "2024-II"):
        assert f"| {name} |" in markdown
    written = json.loads((out / "summary.json").read_text())
    for label, summary in summaries.items():
        assert written["runs"][label]["summary"] == summary

    # plots
    for name in ("accuracy_vs_tokens.png", "families.png"):
        assert_png(out / name)
        assert f"]({name})" in markdown
    assert not (out / "rounds.png").exists()

    # lm-eval files
    for label, summary in summaries.items():
        folder = out / "lm-eval" / label
        (results_path,) = folder.glob("results_*.json")
        (samples_path,) = folder.glob("samples_graftbench_aime2024_*.jsonl")
        assert results_path.name[len("results_"):-len(".json")] == samples_path.name.rsplit("_", 1)[1][:-len(".jsonl")]
        results = json.loads(results_path.read_text())
        task = results["results"]["graftbench_aime2024"]
        assert task["acc,none"] == summary["avg_at_n"]
        assert isinstance(task["acc_stderr,none"], float)
        assert results["n-samples"]["graftbench_aime2024"] == {"original": 30, "effective": 30}
        assert results["n-shot"] == {"graftbench_aime2024": 0} and results["versions"]
        assert results["configs"]["graftbench_aime2024"]["output_type"] == "generate_until"
        records = [json.loads(line) for line in samples_path.read_text().splitlines()]
        assert len(records) == 30 and [r["doc_id"] for r in records] == list(range(30))
        assert sum(r["acc"] for r in records) == summary["correct"]
        for r in records:
            assert set(r) >= {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
                              "doc_hash", "prompt_hash", "target_hash", "acc"}
            assert r["target"] == r["doc"]["answer"] and len(r["resps"][0]) == 1 and len(r["filtered_resps"]) == 1


def test_run_rows_equal_the_metrics():
    report = build_report([BASELINE, RECURRING])
    for run in report.runs:
        assert run.summary == committed_summary(run.path)
        row = dict(zip(RUN_COLUMNS, run_row(run)))
        s = run.summary
        assert row["problems"] == "30" and row["samples / problem"] == "1"
        assert row["pass@1"].startswith(f"{100 * s['pass_at_k']['1']:.1f}%")
        assert row["mean TTFT s"] == f"{s['mean_ttft_s']:,.3f}"
        why = " (exact routes only)" if run.mode == "graft" else " (no grafts)"  # the copy fields: similar routes
        assert row["copy rate"] == "—" + why and row["copy baseline"] == "—" + why
    assert [c["graft"] for c in report.comparisons] == ["aime2024-recurring-smollm2-135m"]
    assert report.comparisons[0]["graft_better"] == 29


def test_a_run_folder_and_the_default_out_folder(tmp_path):
    folder = tmp_path / "runs" / "base"
    folder.mkdir(parents=True)
    shutil.copy(BASELINE, folder / "manifest.json")
    result, _ = invoke(folder, "--name", "mine")
    assert result.exit_code == 0, result.output
    assert (Path("reports") / "mine" / "report.md").is_file()  # the test's own working folder
    result, text = invoke(folder, "--name", "../escape")
    assert result.exit_code == 2 and "not a plain folder name" in text


@pytest.mark.parametrize("out", ["taken", "taken/report"])
def test_an_out_path_that_is_or_runs_through_a_file_is_refused_before_the_tables(out, tmp_path):
    (tmp_path / "taken").write_text("a file")
    result, text = invoke(BASELINE, "--out", tmp_path / out)
    assert result.exit_code == 2
    assert f"'{tmp_path / 'taken'}' is a file, not a folder" in text and "runs: accuracy" not in result.output
    assert (tmp_path / "taken").read_text() == "a file"


SYNTHETIC = "synthetic-problems"  # a problem-set source that is neither generated nor a file under ../shared/data


def _manifest(run: str, mode: str, table: list[list[bool]], round_: int | None = None,
              fields: dict[str, dict] | None = None) -> dict:
    """A sealed run manifest that verifies, of a problem set graftbench cannot rebuild (not anchored: a report
    takes it only with ``allow_unanchored``); ``fields`` adds fields to the samples of a problem id (``mod-0``,
    ``mod-1``, …)."""
    problems = [{"id": f"mod-{i}", "problem_sha256": f"{i:064x}", "key": "3"} for i in range(len(table))]
    samples = []
    for problem, row in zip(problems, table):
        for j, correct in enumerate(row):
            output = f"Final answer: {3 if correct else 5}"
            samples.append({"problem_id": problem["id"], "sample_index": j, "correct": correct,
                            "extracted": "3" if correct else "5", "decode_tokens": 4 if mode == "graft" else 300,
                            "ttft_s": 0.1, "wall_s": 1.0, "energy_j": 3.0, "mode": mode, "output": output,
                            "output_sha256": sha256_text(output), "key": "3", "cue": "",
                            "problem_sha256": problem["problem_sha256"], "prefill_tokens": 10,
                            "prefill_tokens_saved": 0, "artifact_id": None, "artifact_tokens": 0,
                            "finish_reason": "eos", "certified": None, "certificate_sha256": None,
                            "layout": "answer-cue" if mode == "graft" else None,
                            "example_answer": "5" if mode == "graft" else None,
                            "copied": (not correct) if mode == "graft" else None, "seed": j,
                            **(fields or {}).get(problem["id"], {})})
    settings = {"graft": mode == "graft", "max_new_tokens": 256, "samples": len(table[0]), "verifier_version": 2,
                **({"round": round_} if round_ else {})}
    config = {"model": "smollm2-135m", "dtype": "float32"}
    return build_manifest(run=run, command="eval", config=config, config_fingerprint=pin_fingerprint(config),
                          settings=settings, problem_set={"source": SYNTHETIC, "n": len(problems)},
                          problems=problems, samples=samples, energy={"method": "estimate"}, store=None)


def test_the_report_shows_certificates_and_each_fallback_with_its_reason(tmp_path):
    reason = "hash: artifact 0123abcd: payload SHA-256 differs from its header"
    fields = {"mod-0": {"certified": True, "certify_s": 2.5}, "mod-1": {"certified": True, "certify_s": 1.5},
              "mod-2": {"fallback": reason, "mode": "baseline"}}
    paths = []
    for run, mode, extra in (("graft", "graft", fields), ("plain", "graft", None), ("base", "baseline", None)):
        paths.append(tmp_path / f"{run}.json")
        paths[-1].write_text(json.dumps(_manifest(run, mode, [[True], [True], [False]], fields=extra)))
    result, text = invoke(*paths, "--out", tmp_path / "rep", "--allow-unanchored")
    assert result.exit_code == 0, result.output
    rows = {run.label: dict(zip(RUN_COLUMNS, run_row(run))) for run in build_report(paths, allow_unanchored=True).runs}
    assert (rows["graft"]["certificates"], rows["graft"]["fallbacks"]) == ("2 of 2 equal", "1 (hash 1)")
    assert (rows["plain"]["certificates"], rows["plain"]["fallbacks"]) == ("none (no --certify)", "0")
    assert rows["base"]["certificates"] == "—"
    line = f"graft: mod-2 fell back to the baseline: {reason}"
    assert line in text  # printed in full, not only counted
    markdown = (tmp_path / "rep" / "report.md").read_text()
    assert "| 2 of 2 equal | 1 (hash 1) |" in markdown and f"- {line}" in markdown


def test_the_eval_summary_says_what_was_checked_and_counts_the_certification_in_its_wall_time():
    from graftbench.cli.tables import checks_lines, summary_table
    from graftbench.results.metrics import run_checks
    from rich.console import Console

    reason = "cpu: artifact 0123abcd was written on another kind of CPU"
    manifest = _manifest("graft", "graft", [[True], [True], [False]], fields={
        "mod-0": {"certified": True, "certify_s": 2.5}, "mod-1": {"certified": True, "certify_s": 1.5},
        "mod-2": {"fallback": reason, "mode": "baseline"}})
    checks = run_checks(manifest["samples"])
    lines = checks_lines(checks)
    assert lines[0].startswith("certificates: 2 of 2 equal")
    assert f"  mod-2: {reason}" in lines  # the reason as the sample records it, whatever its check
    assert lines[-1] == "wall time: 7.0 s (3.0 s solving, 4.0 s certifying)"
    console = Console(width=80, record=True)
    console.print(summary_table([("graft", manifest["totals"])], "estimate", checks={"graft": checks}))
    assert manifest["totals"]["wall_s"] == 3.0 and " 7.0" in console.export_text()  # the column counts the audit
    assert checks_lines(run_checks(_manifest("plain", "graft", [[True]])["samples"])) == [
        "certificates: none (--certify recomputes each graft and compares its logits)"]
    assert checks_lines(run_checks(_manifest("base", "baseline", [[True]])["samples"])) == []
    # a graft run (--certify or not) whose samples all ran as the baseline has no graft to certify
    fallen = _manifest("fell", "graft", [[True]], fields={"mod-0": {"fallback": reason, "mode": "baseline"}})
    assert checks_lines(run_checks(fallen["samples"]))[0] == "fallbacks: 1 problem(s) ran as the baseline, their " \
        "artifact refused:"


def test_n_samples_rounds_and_copy_controls(tmp_path):
    paths = []
    tables = {1: [[False, True, False, False], [False, False, False, False], [True, False, True, True]],
              2: [[True, True, False, True], [False, True, False, False], [True, True, True, True]]}
    for round_, table in tables.items():
        for mode in ("baseline", "graft"):
            path = tmp_path / f"{mode}-r{round_}.json"
            path.write_text(json.dumps(_manifest(f"{mode}-r{round_}", mode, table if mode == "graft" else
                                                 [[False] * 4] * 3, round_)))
            paths.append(path)
    out = tmp_path / "rep"
    result, text = invoke(*paths, "--out", out, "--format", "lm-eval", "--seed", "5", "--resamples", "500",
                          "--allow-unanchored")
    assert result.exit_code == 0, result.output
    markdown = (out / "report.md").read_text()
    assert "## Rounds" in markdown and "| 4 |" in markdown  # samples per problem
    assert_png(out / "rounds.png")
    report = build_report(paths, seed=5, resamples=500, allow_unanchored=True)
    graft = next(r for r in report.runs if r.label == "graft-r1")
    assert graft.summary["copy"]["copy_rate"] == round(8 / 12, 6)  # the incorrect samples copied the example
    assert graft.summary["copy"]["copy_baseline"] == 0.0  # the example's answer 5 is never the key 3
    row = dict(zip(RUN_COLUMNS, run_row(graft)))
    assert row["copy rate"].startswith("66.7%") and row["copy baseline"].startswith("0.0%")
    assert row["mode · layout"] == "graft · answer-cue"
    assert row["pass@N"].endswith("(k=4)")
    assert len(report.comparisons) == 2  # each round's graft against its own baseline, not across rounds
    records = [json.loads(line) for line in
               next((out / "lm-eval" / "graft-r1").glob("samples_*.jsonl")).read_text().splitlines()]
    assert len(records) == 3 and all(len(r["resps"][0]) == 4 and len(r["filtered_resps"][0]) == 4 for r in records)


@pytest.mark.parametrize("make, fragment", [
    (lambda tmp: tmp / "nowhere", "does not exist"),
    (lambda tmp: tmp, "holds no manifest.json"),
    (lambda tmp: (tmp / "notes.txt", (tmp / "notes.txt").write_text("hello"))[0], "not valid JSON"),
    (lambda tmp: REFERENCE_MANIFESTS / "exact-smollm2-135m.json", "is not a graftbench.manifest"),
])
def test_bad_input_names_the_path_and_exits_2(tmp_path, make, fragment):
    path = make(tmp_path)
    result, text = invoke(BASELINE, path, "--out", tmp_path / "rep")
    assert result.exit_code == 2, result.output
    assert str(path) in text and "neither a run folder nor a run manifest" in text
    assert fragment in text
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("args, option", [(["--seed", "-1"], "--seed"), (["--resamples", "5"], "--resamples"),
                                          (["--format", "html"], "--format")])
def test_bad_options_are_refused_naming_them(args, option):
    result, text = invoke(BASELINE, *args)
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in text


def test_the_report_imports_no_torch_and_the_cli_default_matches_metrics():
    import subprocess
    import sys

    code = ("import sys, graftbench.cli.app, graftbench.report.compare, graftbench.report.plots, "
            "graftbench.report.lmeval; "
            "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    from graftbench.cli import report
    from graftbench.results import metrics

    assert report.RESAMPLES == metrics.RESAMPLES


def test_rounds_curve_keeps_an_equal_baseline_line_visible(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from graftbench.report import plots

    drawn = {}
    monkeypatch.setattr(plots, "_finish", lambda figure, axes, title, path: drawn.setdefault("axes", axes))
    summary = {"avg_at_n": 0.25, "accuracy_ci95": [0.1, 0.5]}
    rounds = [SimpleNamespace(round=r, series=series, summary=summary) for r in (1, 2)
              for series in ("baseline", "graft", "recurring")]
    plots.rounds_curve(rounds, tmp_path / "rounds.png")
    lines = {bars.get_label(): [round(x, 6) for x in bars.lines[0].get_xdata()] for bars in drawn["axes"].containers}
    assert lines == {"baseline": [0.94, 1.94], "graft": [1.06, 2.06], "recurring": [1.12, 2.12]}


def test_a_flywheel_recurring_run_is_its_own_series_not_the_held_out_graft_line():
    flywheel = REFERENCE_MANIFESTS / "flywheel-qwen2.5-coder-0.5b-program"
    report = build_report([f"{flywheel}-r1-baseline.json", f"{flywheel}-r1-graft.json",
                           f"{flywheel}-r1-recurring.json"], resamples=100)
    assert [(r.label.rsplit("-", 1)[-1], r.mode, r.series) for r in report.rounds] == [
        ("baseline", "baseline", "baseline"), ("graft", "graft", "graft"), ("recurring", "graft", "recurring")]
    assert len(report.comparisons) == 1  # the recurring run shares no problem with the held-out baseline
    assert [row[2] for row in round_rows(report)] == ["baseline", "graft", "recurring"]


def test_a_graft_run_is_paired_only_with_a_baseline_of_the_same_mode_budget_and_sampling():
    qwen = REFERENCE_MANIFESTS / "transfer-qwen2.5-coder-0.5b"
    runs = [f"{qwen}-program-graft-avg4.json", f"{qwen}-program-baseline-avg4.json",  # program, avg@4
            f"{qwen}-baseline-avg4.json", f"{qwen}-baseline.json", f"{qwen}-program-baseline.json"]
    report = build_report(runs)
    assert [(c["graft"], c["baseline"]) for c in report.comparisons] == [
        ("transfer-qwen2.5-coder-0.5b-program-graft-avg4", "transfer-qwen2.5-coder-0.5b-program-baseline-avg4")]
    arms = {r.label: r.arm for r in report.runs}
    assert arms["transfer-qwen2.5-coder-0.5b-baseline"][2:7] == ("text", 256, None, 1, ("greedy",))
    assert arms["transfer-qwen2.5-coder-0.5b-program-baseline-avg4"][2:7] == ("program", 256, None, 4, (0.7, 0.95))


def test_the_prompt_arm_rows_pair_samples_that_grafted_the_same_example_and_name_a_differing_one():
    from types import SimpleNamespace

    from graftbench.report.prompt_arm import prompt_arm_rows

    def run(label, example_as, logits, graft_from="nearest"):
        settings = {"graft": True, "graft_from": graft_from, **({"example_as": example_as} if example_as else {})}
        samples = [{"problem_id": f"p{i}", "sample_index": 0, "artifact_id": f"a{i}", "logits_sha256": h,
                    "ttft_s": 0.5 if example_as else 0.1, "energy_j": 2.0} for i, h in enumerate(logits)]
        return SimpleNamespace(label=label, arm=("m",), manifest={"settings": settings, "samples": samples})

    graft, prompt = run("graft", None, ["x", "y", "z"]), run("prompt", "prompt", ["x", "Y", "z"])
    other = run("other", None, ["x", "y", "z"], graft_from="other-family")
    [row] = prompt_arm_rows([graft, prompt, other])
    assert (row["graft"], row["samples"], row["logits_equal"], row["first_differences"]) == ("graft", 3, 2, ["p1#0"])
    assert (row["prompt_ttft_s"], row["graft_ttft_s"], row["prompt_energy_j"]) == (0.5, 0.1, 6.0)
    assert prompt_arm_rows([graft, other]) == []


def _mean_correct_by_problem(samples: list[dict], ids: set[str]) -> dict[str, float]:
    by_problem: dict[str, list[bool]] = {}
    for s in samples:
        if s["problem_id"] in ids:
            by_problem.setdefault(s["problem_id"], []).append(bool(s["correct"]))
    return {pid: sum(v) / len(v) for pid, v in by_problem.items()}


def test_paired_comparisons_by_family_and_on_a_pooled_subset_are_the_per_problem_differences(tmp_path):
    qwen = REFERENCE_MANIFESTS / "transfer-qwen2.5-coder-0.5b"
    graft, baseline = Path(f"{qwen}-program-graft-avg4.json"), Path(f"{qwen}-program-baseline-avg4.json")
    report = build_report([graft, baseline], families=("paths", "mod"))
    subsets = [tuple(c["families"]) for c in report.family_comparisons]
    assert subsets == [("paths", "mod"), ("base",), ("digits",), ("divisors",), ("gcd",), ("mod",), ("paths",)]
    manifests = {p: load_manifest(p) for p in (graft, baseline)}
    for row in report.family_comparisons:
        ids = {p["id"] for p in manifests[graft]["problems"] if p["family"] in row["families"]}
        ours = _mean_correct_by_problem(manifests[graft]["samples"], ids)
        theirs = _mean_correct_by_problem(manifests[baseline]["samples"], ids)
        diffs = [ours[i] - theirs[i] for i in ids]
        assert row["problems"] == len(ids) == 10 * len(row["families"])
        assert row["mean_difference"] == pytest.approx(sum(diffs) / len(diffs))
        assert row["graft_better"] == sum(d > 0 for d in diffs) and row["baseline_better"] == sum(d < 0 for d in diffs)
        assert row["ci95"][0] <= row["mean_difference"] <= row["ci95"][1]
    # the overall comparison is unchanged by the subsets, and the markdown and JSON carry them
    assert report.comparisons == build_report([graft, baseline]).comparisons
    result, text = invoke(graft, baseline, "--families", "paths,mod", "--out", tmp_path / "rep")
    assert result.exit_code == 0, result.output
    first = report.family_comparisons[0]
    cell = f"{100 * first['mean_difference']:+.1f} pp [{100 * first['ci95'][0]:+.1f}, {100 * first['ci95'][1]:+.1f}]"
    assert "| paths + mod | transfer-qwen2.5-coder-0.5b-program-graft-avg4 |" in (tmp_path / "rep" / "report.md").read_text()
    assert cell in (tmp_path / "rep" / "report.md").read_text() and cell in text
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["family_comparisons"][0]["families"] == ["paths", "mod"]


def test_a_pooled_family_that_no_run_has_is_refused_naming_it(tmp_path):
    qwen = REFERENCE_MANIFESTS / "transfer-qwen2.5-coder-0.5b"
    result, _ = invoke(f"{qwen}-program-graft-avg4.json", f"{qwen}-program-baseline-avg4.json",
                       "--families", "paths,grid-detour", "--out", tmp_path / "rep")
    assert result.exit_code == 2 and "'grid-detour' not among the runs' families" in result.output
    assert not (tmp_path / "rep").exists()


def test_the_per_family_table_carries_pass_at_n_decode_tokens_per_correct_and_the_copy_controls():
    from graftbench.report.compare import FAMILY_COLUMNS, family_rows

    graft = REFERENCE_MANIFESTS / "methods-qwen2.5-coder-1.5b-llama-f16-program-graft.json"
    manifest = load_manifest(graft)
    report = build_report([graft])
    rows = {row[1]: dict(zip(FAMILY_COLUMNS, row)) for row in family_rows(report)}
    assert sorted(rows) == ["crt", "fermat", "floor-sum", "grid-detour", "incl-excl", "recurrence"]
    family = {p["id"]: p["family"] for p in manifest["problems"]}
    for name, row in rows.items():
        samples = [s for s in manifest["samples"] if family[s["problem_id"]] == name]
        correct = [s for s in samples if s["correct"]]
        by_problem: dict[str, bool] = {}
        for s in samples:
            by_problem[s["problem_id"]] = by_problem.get(s["problem_id"], False) or s["correct"]
        assert row["pass@N"] == f"{100 * sum(by_problem.values()) / len(by_problem):.1f}%"
        per_correct = sum(s["decode_tokens"] for s in samples) / len(correct) if correct else None
        assert row["decode tok / correct"] == ("—" if per_correct is None else f"{per_correct:.1f}")
        copied = sum(1 for s in samples if s["copied"])
        assert row["copy rate"] == f"{100 * copied / len(samples):.1f}% of {len(samples)}"
        assert row["copy baseline"].startswith("0.0% (graft ")  # no two methods problems share an answer


def test_runs_that_share_only_some_problems_are_compared_on_those(tmp_path):
    baseline = tmp_path / "baseline.json"
    graft = tmp_path / "graft.json"
    baseline.write_text(json.dumps(_manifest("baseline", "baseline", [[False], [True], [False], [False]])))
    # two more problems than the baseline: mod-4 and mod-5 are the graft's alone
    graft.write_text(json.dumps(_manifest("graft", "graft", [[True], [True], [True], [False], [True], [True]])))
    (row,) = build_report([baseline, graft], seed=1, resamples=200, allow_unanchored=True).comparisons
    assert (row["problems"], row["graft_better"], row["baseline_better"]) == (4, 2, 0)
    assert row["mean_difference"] == 0.5  # (1 + 0 + 1 + 0) / 4 on the shared problems


def test_why_a_familys_copy_cells_are_empty_is_read_from_that_familys_routes(tmp_path):
    from graftbench.report.compare import FAMILY_COLUMNS, family_rows

    made = _manifest("graft", "graft", [[True], [False], [True], [False]])
    problems = [{**p, "family": "own" if i < 2 else "other"} for i, p in enumerate(made["problems"])]
    samples = []
    for s in made["samples"]:
        if s["problem_id"] in ("mod-0", "mod-1"):  # the problem's own solution: no copy is recorded
            s = {**s, "route": "exact", "copied": None, "example_answer": None}
        else:
            s = {**s, "route": "similar"}
        samples.append(s)
    path = tmp_path / "graft.json"
    path.write_text(json.dumps(build_manifest(
        run="graft", command="eval", config=made["config"], config_fingerprint=made["config_fingerprint"],
        settings=made["settings"], problem_set=made["problem_set"], problems=problems, samples=samples,
        energy=made["energy"], store=None)))
    rows = {row[1]: dict(zip(FAMILY_COLUMNS, row)) for row in family_rows(build_report([path], allow_unanchored=True))}
    assert rows["own"]["copy rate"] == rows["own"]["copy baseline"] == "— (exact routes only)"
    assert rows["other"]["copy rate"] == "50.0% of 2"
