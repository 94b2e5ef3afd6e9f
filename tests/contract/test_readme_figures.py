"""The README's headline figures equal what the committed manifests and benchmark files they link to say (the
reference machine's folders, manifests/amd-epyc-avx512/ and results/amd-epyc-avx512/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MANIFESTS = REFERENCE_MANIFESTS
RESULTS = ROOT / "results" / REFERENCE_MANIFESTS.name / "bench"
BENCH_LINK = RESULTS.relative_to(ROOT).as_posix()
LINK = MANIFESTS.relative_to(ROOT).as_posix()  # a README link to a manifest: (manifests/<kind>/NAME.json)


def _totals(name: str) -> dict:
    return json.loads((MANIFESTS / f"{name}.json").read_text())["totals"]


def _score(totals: dict) -> str:
    return f"{totals['correct']}/{totals['samples']}"


@pytest.mark.parametrize("baseline, graft", [
    ("aime2024-smollm2-135m-baseline", "aime2024-smollm2-135m-recurring"),
    ("aime2024-qwen2.5-coder-0.5b-baseline", "aime2024-qwen2.5-coder-0.5b-recurring"),
    ("transfer-smollm2-135m-baseline", "transfer-smollm2-135m-graft"),
    ("transfer-qwen2.5-coder-0.5b-program-baseline", "transfer-qwen2.5-coder-0.5b-program-graft"),
])
def test_the_readmes_baseline_to_graft_scores_are_the_manifests(baseline, graft):
    assert f"{_score(_totals(baseline))} → {_score(_totals(graft))}" in README
    assert f"({LINK}/{baseline}.json)" in README and f"({LINK}/{graft}.json)" in README


def test_the_readmes_recurring_decode_tokens_and_certificates_are_the_manifests():
    smol_base, smol = _totals("aime2024-smollm2-135m-baseline"), _totals("aime2024-smollm2-135m-recurring")
    ratio = smol_base["decode_tokens"] / smol["decode_tokens"]
    assert f"{smol_base['decode_tokens']:,} → {smol['decode_tokens']} decode tokens ({ratio:.0f}× fewer)" in README
    equal = smol["certified"] - smol["certificate_mismatches"]
    assert f"{equal}/{smol['samples']} certificates equal" in README
    qwen_base, qwen = _totals("aime2024-qwen2.5-coder-0.5b-baseline"), _totals("aime2024-qwen2.5-coder-0.5b-recurring")
    assert f"{qwen_base['mean_decode_tokens']:.1f} → {qwen['mean_decode_tokens']:.1f} decode tokens" in README


# The reference machine's torch expectations of real models (the random-weights certificate beside them is not a README
# figure: docs/gpu.md; the llama.cpp certificates have their own test)
EXPECTATIONS = sorted(p for p in MANIFESTS.glob("exact-*.json")
                      if not {"random_weights", "engine"} & set(json.loads(p.read_text())["config"]))


def test_every_reference_expectation_of_a_real_model_is_linked_from_the_readme():
    isa_pins = sorted(json.loads(p.read_text())["config"]["isa"] for p in EXPECTATIONS)
    assert isa_pins.count("avx2") == 8  # four models in two dtypes; the portable pin's beside them (not an empty glob)
    assert set(isa_pins) <= {"avx2", "portable"}
    assert all(f"({LINK}/{path.name})" in README for path in EXPECTATIONS)


@pytest.mark.parametrize("path", EXPECTATIONS, ids=lambda path: path.name)
def test_each_linked_expectation_is_fifty_of_fifty_byte_exact(path):
    totals = json.loads(path.read_text())["totals"]
    assert (totals["exact_pairs"], totals["pairs"], totals["kl_max"], totals["min_argmax_agreement"]) == (50, 50, 0, 1)
    assert "**50/50** pairs, KL 0, argmax 100%" in README


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_the_readmes_ttft_figures_are_the_benchmark_files(model):
    row = next(row for row in json.loads((RESULTS / f"bench-{model}.json").read_text())["ttft"] if row["tokens"] == 8192)
    prefill_s = row["prefill"]["ttft_query_1_s"]["median"]
    graft_ms = row["graft"]["query_1/xxh3_128"]["total_s"]["median"] * 1000
    assert all(row["logits_equal"].values())
    assert f"({BENCH_LINK}/bench-{model}.json)" in README
    assert (f"`{model}`: {prefill_s:.2f} s against {graft_ms:.1f} ms, **{row['ttft_ratio']['query_1']:.0f}×**"
            in README)


def test_the_readmes_ttft_ratios_stand_beside_the_real_query_and_sha256():
    """Each 1-token headline ratio is shown with the real AIME query's (XXH3-128, as the graft reads by default) and
    with SHA-256 integrity, all from the same benchmark rows; the page cache was warm (the file says so), and the
    README says so rather than claiming a cold read."""
    real, sha = [], []
    for model in ("smollm2-135m", "gemma3-270m"):
        row = next(r for r in json.loads((RESULTS / f"bench-{model}.json").read_text())["ttft"] if r["tokens"] == 8192)
        assert row["file_read"].startswith("page cache warm") and all(row["logits_equal"].values())
        prefill_s = row["prefill"]["ttft_query_real_s"]["median"]
        graft_s = row["graft"]["query_real/xxh3_128"]["total_s"]["median"]
        assert abs(prefill_s / graft_s - row["ttft_ratio"]["query_real"]) < 1e-9
        real.append(f"{prefill_s:.2f} s against {1000 * graft_s:.1f} ms, **{row['ttft_ratio']['query_real']:.1f}×**")
        sha.append(f"{prefill_s / row['graft']['query_real/sha256']['total_s']['median']:.1f}×")
        tokens = row["query_tokens"]["query_real"]
        assert f"{tokens} and" in README or f"and {tokens} tokens" in README
    assert f"{real[0]}; {real[1]}; the same with SHA-256 integrity: {sha[0]} and {sha[1]}" in README
    assert "**44.6×**" in README and "**58.6×**" in README
    assert "from a warm page cache: a cold read is not measured" in README


def test_the_readmes_aime2025_arms_are_all_zero():
    arms = sorted(MANIFESTS.glob("aime2025-*.json"))
    assert len(arms) == 9
    assert {json.loads(path.read_text())["totals"]["correct"] for path in arms} == {0}
    assert "AIME 2025 against the AIME 2024 library: 0/30 in every arm" in README


def test_the_readmes_flywheel_recurring_rounds_are_all_correct():
    rounds = [_totals(f"flywheel-qwen2.5-coder-0.5b-program-r{r}-recurring") for r in (1, 2, 3)]
    assert [t["correct"] for t in rounds] == [t["samples"] for t in rounds] == [36, 72, 112]
    assert {f"{t['mean_decode_tokens']:.1f}" for t in rounds} == {"4.9"}
    assert "recurring **100%** every round at 4.9 decode tokens" in README


def test_the_readmes_fault_counts_are_the_fault_report():
    last = (RESULTS / "faults.txt").read_text().strip().splitlines()[-1]
    assert f"({BENCH_LINK}/faults.txt)" in README
    tried, survived, artifacts, samples = (int(n) for n in re.findall(
        r"faults tried: (\d+)\s+faults survived: (\d+)\s+artifacts lost: (\d+)\s+samples lost: (\d+)", last)[0])
    assert f"**{tried} tried, {survived} survived**, {artifacts} artifacts and {samples} samples lost" in README


def test_the_readmes_llama_cpp_recurring_figures_are_the_manifests():
    base = _totals("aime2024-qwen2.5-coder-1.5b-llama-f16-baseline")
    graft = _totals("aime2024-qwen2.5-coder-1.5b-llama-f16-recurring")
    assert (base["correct"], graft["correct"], graft["certified"], graft["samples"]) == (0, 30, 30, 30)
    assert (f"**0/30 → 30/30**, {base['mean_decode_tokens']:.1f} → {graft['mean_decode_tokens']:.1f} decode tokens "
            f"per problem, 30/30 certificates equal; the baseline's {base['decode_tokens']:,} decode tokens in "
            f"{round(base['wall_s'] / 60)} minutes") in README


def test_the_readmes_llama_cpp_certificates_are_the_files_it_links():
    paths = sorted(MANIFESTS.glob("exact-*-llama-*.json"))
    assert {"exact-smollm2-135m-llama-f16.json", "exact-gemma3-270m-llama-f16.json"} <= {p.name for p in paths}
    for path in paths:
        assert f"({LINK}/{path.name})" in README
        totals = json.loads(path.read_text())["totals"]
        assert totals["exact_pairs"] == (44 if path.name.startswith("exact-gemma3") else 50) and totals["pairs"] == 50
    assert "`gemma3-270m` 44/50, not certified" in README


def _points(c: dict) -> str:
    return f"{100 * c['mean_difference']:+.1f} points [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]"


@pytest.mark.parametrize("baseline, graft", [
    ("aime2024-smollm2-135m-baseline", "aime2024-smollm2-135m-recurring"),
    ("aime2024-qwen2.5-coder-0.5b-baseline", "aime2024-qwen2.5-coder-0.5b-recurring"),
    ("transfer-smollm2-135m-baseline", "transfer-smollm2-135m-graft"),
    ("transfer-qwen2.5-coder-0.5b-program-baseline", "transfer-qwen2.5-coder-0.5b-program-graft"),
])
def test_the_readmes_paired_differences_are_the_reports(baseline, graft):
    """The README's paired graft − baseline figures are what `graftbench report` computes on the linked manifests
    (Newcombe's interval: one sample per problem)."""
    from graftbench.report.compare import build_report

    (comparison,) = build_report([MANIFESTS / f"{baseline}.json", MANIFESTS / f"{graft}.json"]).comparisons
    assert comparison["ci95_method"] == "newcombe" and comparison["ci95"][0] < comparison["ci95"][1]
    assert _points(comparison).replace("-", "−") in README


def test_the_readmes_method_transfer_figures_are_the_manifests_under_the_preregistered_test():
    from graftbench.report.compare import build_report
    from graftbench.report.prompt_arm import prompt_arm_rows

    tag = "methods-qwen2.5-coder-1.5b-llama-f16-program"
    paths = [MANIFESTS / f"{tag}-{arm}.json" for arm in ("baseline", "graft", "prompt")]
    report = build_report(paths, families=("grid-detour", "recurrence"))  # the pre-registration's test and seed

    def cell(c):
        return f"{100 * c['mean_difference']:+.1f} points [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]"

    kept = next(c for c in report.family_comparisons if c["graft"] == f"{tag}-graft"
                and c["families"] == ["grid-detour", "recurrence"])
    overall = next(c for c in report.comparisons if c["graft"] == f"{tag}-graft")
    low, high = kept["ci95"]
    assert low <= 0 <= high  # null by the pre-registered rule, as the README says
    assert f"**{cell(kept)}**".replace("-", "−") in README and cell(overall).replace("-", "−") in README
    prompt = prompt_arm_rows(report.runs)[0]
    assert f"{prompt['logits_equal']} of {prompt['samples']} samples" in README
    # the samples of one problem share their first context: the count holds each context once per sample
    first_steps = {s["logits_sha256"] for s in json.loads(paths[2].read_text())["samples"]}
    samples_per_problem = prompt["samples"] // len(first_steps)
    assert len(first_steps) * samples_per_problem == prompt["samples"]
    assert (f"{prompt['logits_equal']} of {prompt['samples']} samples ({len(first_steps)} contexts, each counted once "
            f"for each of its {samples_per_problem} samples)") in README
    assert f"{prompt['prompt_ttft_s']:.2f} s against {prompt['graft_ttft_s']:.2f} s grafted" in README
