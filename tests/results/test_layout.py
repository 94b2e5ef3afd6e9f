"""The committed results' layout (graftbench.results.layout): two roots, manifests/ and results/, one folder per kind
of machine in each holding only what was recorded on that kind, one naming scheme (set, model, bf16 marker, mode,
arm), the bench command naming its files by the same scheme, and a path recorded under the earlier layout found where
it lies now. No model."""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

import pytest

from graftbench.cli.bench import BATCHED, BenchSection, _stem
from graftbench.results import layout
from graftbench.results.anchor import INDEX_NAME, read_index
from graftbench.results.exact_manifest import read_replay_log

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / layout.RESULTS
MANIFEST_ROOT = ROOT / layout.MANIFESTS
SETS = {"aime2024", "aime2025", "transfer", "flywheel", "exact", "methods"}  # what a manifest's name starts with
# How a committed file's recorded CPU tells its kind of machine, for the kinds of CPU (the oldest manifest records
# none: OLDEST_MANIFEST; a GPU's folder is named by its device, which the manifest's accelerator records)
KINDS = {
    "amd-epyc-avx512": lambda env: env["cpu_model"] == "AMD EPYC" and env["cpu_capability_native"] == "AVX512",
    "intel-xeon-amx": lambda env: "Xeon" in env["cpu_model"] and "amx_bf16" in env["cpu_kernel_flags"],
}
OLDEST_MANIFEST = "amd-epyc-avx512/aime2024-smollm2-135m-baseline.json"  # its environment records no CPU model
MANIFESTS = [p for folder in layout.manifest_folders(ROOT) for p in sorted(folder.glob("*.json"))]


def test_the_manifests_root_holds_the_index_the_logs_and_one_folder_per_kind_and_results_the_rest():
    assert {p.name for p in MANIFEST_ROOT.iterdir() if p.is_file()} == {
        "README.md", "SHA256SUMS", "replays.jsonl", "emulated-replays.jsonl", "program-replays.jsonl"}
    assert {p.name for p in RESULTS.iterdir() if p.is_file()} == {"README.md"}
    kinds = layout.kinds(ROOT)
    assert set(KINDS) <= set(kinds) and layout.REFERENCE_KIND in KINDS
    assert layout.manifest_folders(ROOT) == [MANIFEST_ROOT / kind for kind in kinds if (MANIFEST_ROOT / kind).is_dir()]
    assert {p.name for p in RESULTS.iterdir() if p.is_dir()} <= set(kinds)
    assert {p.name for p in RESULTS.glob("*/*")} <= {"bench", "reports", "traces"}
    assert all(p.suffix == ".json" for folder in layout.manifest_folders(ROOT) for p in folder.iterdir())
    assert len(MANIFESTS) == len(read_index(MANIFEST_ROOT / INDEX_NAME)) >= 66


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.relative_to(MANIFEST_ROOT).as_posix())
def test_each_manifest_lies_under_the_kind_of_cpu_it_records_and_is_named_by_the_scheme(path):
    manifest = json.loads(path.read_text())
    relative = path.relative_to(MANIFEST_ROOT)
    kind, accelerator = relative.parts[0], manifest["config"].get("accelerator")
    if accelerator:  # a GPU's folder is named by its device
        assert kind == accelerator["gpu"].lower().replace(" ", "-"), (kind, accelerator["gpu"])
    elif manifest["environment"].get("cpu_model") or relative.as_posix() != OLDEST_MANIFEST:
        assert kind in KINDS and KINDS[kind](manifest["environment"]), (kind, manifest["environment"])
    config, stem = manifest["config"], path.stem
    model = config["model"].replace(":", "-")
    assert stem.split(f"-{model}")[0] in SETS and f"-{model}" in stem
    after_model = stem.split(f"-{model}", 1)[1]
    assert after_model.startswith("-bf16") == (config["dtype"] == "bfloat16")
    engine = config.get("engine") or {}
    assert after_model.startswith("-llama-") == (engine.get("engine") == "llama.cpp")
    if engine:  # the engine marker names the KV cache type
        assert after_model.startswith(f"-llama-{engine['type_k']}")
    program = (manifest.get("settings") or {}).get("mode") == "program"
    assert ("-program" in after_model) == program


def test_no_committed_file_name_spells_out_bfloat16_and_each_benchmark_marks_its_dtype():
    names = [p.relative_to(ROOT).as_posix() for folder in (RESULTS, MANIFEST_ROOT) for p in folder.rglob("*")
             if p.is_file()]
    assert len(names) > 150 and [n for n in names if "bfloat16" in n] == []
    benchmarks = [p for folder in layout.result_folders(ROOT) for p in folder.rglob("*.json")
                  if isinstance(json.loads(p.read_text()).get("environment"), dict)]
    dtypes = {p: json.loads(p.read_text())["environment"].get("dtype") for p in benchmarks}
    checked = [p for p, dtype in dtypes.items() if dtype]  # isa-cost measures both dtypes: no marker
    assert len(checked) == 21
    assert all(("-bf16" in p.name) == (dtypes[p] == "bfloat16") for p in checked)


def test_the_bench_command_names_its_files_by_the_scheme():
    assert _stem(None, "gemma3-270m", "bfloat16", BATCHED, False) == "bench-gemma3-270m-bf16"
    assert _stem(None, "gemma3-270m", "float32", BATCHED, False) == "bench-gemma3-270m"
    assert _stem(BenchSection.head_to_head, "smollm2-135m", "bfloat16", BATCHED, True) == \
        "head-to-head-smollm2-135m-bf16-smoke"
    assert [layout.dtype_marker(d) for d in ("float32", "bfloat16", "float16")] == ["", "-bf16", "-float16"]


def test_a_file_is_a_manifest_for_the_index_only_inside_a_kinds_folder():
    assert layout.is_manifest(PurePosixPath("intel-xeon-amx/exact-smollm2-135m.json"))
    assert layout.is_manifest(PurePosixPath("nvidia-h200/sub/exact-x.json"))
    assert not layout.is_manifest(PurePosixPath("run.json"))  # at the root, beside the index and the logs


def test_kinds_are_the_folders_under_either_root_and_none_without_one(tmp_path):
    assert layout.kinds(tmp_path) == [] and layout.manifest_folders(tmp_path) == []
    (tmp_path / "results" / "b-kind" / "bench").mkdir(parents=True)
    (tmp_path / "manifests" / "a-kind").mkdir(parents=True)
    (tmp_path / "manifests" / "SHA256SUMS").write_text("")
    assert layout.kinds(tmp_path) == ["a-kind", "b-kind"]
    assert layout.manifest_folders(tmp_path) == [tmp_path / "manifests" / "a-kind"]
    assert layout.result_folders(tmp_path) == [tmp_path / "results" / "b-kind" / "bench"]


@pytest.mark.parametrize("recorded, now", [
    ("results/amd-epyc-avx512/manifests/exact-smollm2-135m.json", "manifests/amd-epyc-avx512/exact-smollm2-135m.json"),
    ("results/nvidia-h200/manifests/sub/x.json", "manifests/nvidia-h200/sub/x.json"),
    ("manifests/intel-xeon-amx/exact-smollm2-135m.json", "manifests/intel-xeon-amx/exact-smollm2-135m.json"),
    ("results/amd-epyc-avx512/bench/bench-smollm2-135m.json", "results/amd-epyc-avx512/bench/bench-smollm2-135m.json"),
    ("results/amd-epyc-avx512/manifests", "results/amd-epyc-avx512/manifests"),  # a folder, not a file in one
    ("manifests/aime2024-baseline-smollm2-135m.json", "manifests/aime2024-baseline-smollm2-135m.json"),
])
def test_a_path_recorded_under_the_earlier_layout_is_found_where_it_lies_now(recorded, now):
    assert layout.current_path(recorded) == now


def test_every_manifest_the_program_replay_log_and_the_reports_name_by_an_earlier_path_lies_at_its_new_path():
    """The recorded files are never rewritten: a path they name under results/<kind>/manifests/ is followed through
    layout.current_path and lands on a committed manifest (whether its seal is the one replayed is
    tests/programs/test_replay.py's check)."""
    log = [json.loads(line) for line in (ROOT / layout.PROGRAM_REPLAY_LOG).read_text(encoding="utf-8").splitlines()]
    named = {r["manifest"] for r in log}
    named |= {path for summary in RESULTS.glob("*/reports/*/summary.json")
              for path in re.findall(r"results/[^\"/]+/manifests/[^\"]+\.json", summary.read_text(encoding="utf-8"))}
    earlier = sorted(path for path in named if path.startswith("results/"))
    assert len(earlier) >= 25
    assert [path for path in earlier if not (ROOT / layout.current_path(path)).is_file()] == []


def test_a_manifest_named_by_its_earlier_path_is_found_where_it_lies_now(tmp_path, monkeypatch):
    moved = tmp_path / "manifests" / "a-kind" / "exact-m.json"
    moved.parent.mkdir(parents=True)
    moved.write_text("{}")
    earlier = tmp_path / "results" / "a-kind" / "manifests" / "exact-m.json"
    assert layout.moved_manifest(earlier) == moved  # an absolute path
    monkeypatch.chdir(tmp_path)
    assert layout.moved_manifest(Path("results/a-kind/manifests/exact-m.json")) == Path("manifests/a-kind/exact-m.json")
    assert layout.moved_manifest(Path("results/a-kind/manifests/none.json")) is None  # not at its new place either
    assert layout.moved_manifest(Path("manifests/a-kind/exact-m.json")) is None  # where it lies now
    earlier.parent.mkdir(parents=True)
    earlier.write_text("{}")
    assert layout.moved_manifest(earlier) is None  # a file at the earlier path is that file


def test_verify_manifest_of_an_earlier_path_names_where_the_manifest_lies_now(monkeypatch):
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, ["verify-manifest", "results/amd-epyc-avx512/manifests/exact-smollm2-135m.json"],
                                terminal_width=400)
    assert result.exit_code == 2, result.output
    assert ("error: manifest 'results/amd-epyc-avx512/manifests/exact-smollm2-135m.json' does not exist: the committed "
            "manifests moved to manifests/<kind>/, and this one to manifests/amd-epyc-avx512/exact-smollm2-135m.json"
            ) in " ".join(result.output.split())
    missing = CliRunner().invoke(app, ["verify-manifest", "results/amd-epyc-avx512/manifests/none.json"])
    assert missing.exit_code == 2 and missing.output.split() == [
        "error:", "manifest", "'results/amd-epyc-avx512/manifests/none.json'", "does", "not", "exist"]


def test_the_replay_logs_keep_replays_on_an_emulated_cpu_apart():
    """A replay under an emulator (graftbench/util/cpuid.py) is evidence about dispatch, never a replay on a CPU:
    every line of the emulated log records its emulation and names a committed expectation; no line of the replay
    log records one, nor a CPU whose emulation could not be checked (``emulation_unchecked``)."""
    expectations = {json.loads(p.read_text(encoding="utf-8")).get("manifest_sha256") for p in MANIFESTS
                    if p.name.startswith("exact-")}
    emulated = read_replay_log(ROOT / layout.EMULATED_REPLAY_LOG)
    assert emulated and all(r["replayed_on"].get("emulated", {}).get("seen") for r in emulated)
    assert {r["expectation_sha256"] for r in emulated} <= expectations
    unproven = ("emulated", "emulation_unchecked")
    assert not [r for r in read_replay_log(ROOT / layout.REPLAY_LOG) if any(r["replayed_on"].get(k) for k in unproven)]
    recorded_emulated = [p.name for p in MANIFESTS if any(
        json.loads(p.read_text(encoding="utf-8")).get("environment", {}).get(k) for k in unproven)]
    assert recorded_emulated == []  # a manifest of an emulated CPU belongs to no kind of machine's folder
