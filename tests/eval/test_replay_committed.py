"""make replay-exact (graftbench/eval/replay_committed.py): every replay judged from the record it logged, every
committed file tried, each completed comparison logged, and a non-zero exit at the end where one should not differ.
No model is loaded: the replays are stand-ins, except one real replay that crashes before its comparison."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from graftbench.eval import replay_committed as rc
from graftbench.results.exact_manifest import known_to_reproduce, pin_differences, read_replay_log, verified_cpus
from graftbench.util import isa
from graftbench.util.hashing import sha256_json

from typer.testing import CliRunner

from graftbench.cli.app import app

from tests.conftest import REFERENCE_MANIFESTS, ROOT

AMD = {"cpu_model": "AMD EPYC", "cpu_capability_native": "AVX512", "cpu_kernel_flags": ["avx512_bf16"]}
XEON = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_capability_native": "AVX512",
        "cpu_kernel_flags": ["amx_bf16", "amx_tile", "avx512_bf16"]}
EXPECTED = {"manifest_sha256": "m" * 64, "environment": AMD, "config": {"model": "smollm2-135m"},
            "pairs": [{"id": f"pair-{i:03d}"} for i in range(50)]}


def _record(compared: int, equal: int, difference: str | None = None, pins: list[str] | None = None,
            sha: str = "m" * 64) -> dict:
    return {"expectation_sha256": sha, "compared": compared, "equal": equal, "first_difference": difference,
            "pin_differences": pins or [], "recorded_on": AMD, "replayed_on": XEON}


def _judge(record, returncode, here=AMD, known=(), output="the last line"):
    return rc.judge("exact-x.json", EXPECTED, record, returncode, output, 5, list(known), here)


def test_a_replay_that_logged_no_record_fails_on_every_cpu_kind():
    for here in (AMD, XEON):
        outcome = _judge(None, 1, here, output="Traceback ...\nMemoryError")
        assert (outcome.verdict, outcome.failed, outcome.completed) == (rc.FAILED, True, False)
        assert outcome.detail == "no replay record logged (exit status 1): MemoryError"
    assert _judge(None, -9, XEON).failed  # killed


def test_a_completed_difference_fails_where_known_to_reproduce_and_is_a_finding_elsewhere():
    differs = _record(1, 0, "pair-000: artifact id 30c456f497844963 != 472e19a514eb720c")
    here = _judge(differs, 1, AMD)
    assert (here.verdict, here.failed, here.completed) == (rc.DIFFERS, True, True)
    elsewhere = _judge(differs, 1, XEON)
    assert (elsewhere.verdict, elsewhere.failed, elsewhere.completed) == (rc.DIFFERS_UNPROVEN, False, True)
    assert "first difference pair-000: artifact id 30c456f497844963" in elsewhere.detail
    assert "recorded on AMD EPYC (AVX512; avx512_bf16)" in elsewhere.detail and "Intel(R) Xeon(R)" in elsewhere.detail
    proven = [{**_record(5, 5), "replayed_on": XEON}]  # an equal replay logged on the Xeon: now strict there
    assert _judge(differs, 1, XEON, known=proven).verdict == rc.DIFFERS


def test_equal_only_when_every_pair_asked_compared_equal_with_exit_status_zero():
    equal = _judge(_record(5, 5), 0)
    assert (equal.verdict, equal.failed, equal.completed) == (rc.EQUAL, False, True)
    assert equal.detail.startswith("5 compared, 5 equal (recorded on")
    assert _judge(_record(3, 3), 0).verdict == rc.FAILED  # fewer pairs than asked and no difference
    assert _judge(_record(5, 5), 1).verdict == rc.FAILED  # a crash after logging an equal outcome
    assert _judge(_record(2, 1, "pair-001: graft logits"), 0).verdict == rc.FAILED  # a difference, exit 0
    assert _judge(_record(2, 0, "pair-001: graft logits"), 1).verdict == rc.FAILED  # counts that do not add up
    assert _judge(_record(5, 5, sha="o" * 64), 0).verdict == rc.FAILED  # the record of another expectation
    assert rc.judge("x", {**EXPECTED, "pairs": EXPECTED["pairs"][:3]}, _record(3, 3), 0, "", 5, [], AMD).verdict \
        == rc.EQUAL  # an expectation of 3 pairs replayed with --limit 5


def test_a_pin_difference_is_not_comparable_and_names_the_fields():
    outcome = _judge(_record(0, 0, pins=["engine.system_info", "libraries.llama-cpp-python"]), 1)
    assert (outcome.verdict, outcome.failed, outcome.completed) == (rc.NOT_COMPARABLE, False, False)
    assert outcome.detail == "this machine's pin differs in engine.system_info, libraries.llama-cpp-python"
    assert _judge(_record(0, 0, pins=["threads"]), 0).verdict == rc.FAILED  # not comparable, yet exit 0


def _committed_root(tmp_path: Path) -> tuple[Path, list[str]]:
    """A results tree of four CPU expectations and one GPU certificate (copies of committed files)."""
    names = ["exact-smollm2-135m.json", "exact-gemma3-270m.json", "exact-smollm2-135m-bf16.json",
             "exact-smollm2-135m-llama-f16.json"]
    folder = tmp_path / "manifests" / "amd-epyc-avx512"
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes((REFERENCE_MANIFESTS / name).read_bytes())
    gpu = tmp_path / "manifests" / "nvidia-h200"
    gpu.mkdir(parents=True)
    (gpu / "exact-random-gemma3-12b-bf16.json").write_bytes(
        (ROOT / "manifests/nvidia-h200/exact-random-gemma3-12b-bf16.json").read_bytes())
    return tmp_path, [f"manifests/amd-epyc-avx512/{name}" for name in names]


def test_every_expectation_is_tried_each_completed_comparison_logged_and_the_exit_status_says_a_failure(
        tmp_path, monkeypatch):
    root, names = _committed_root(tmp_path)
    assert [p.relative_to(root).as_posix() for p in rc.committed_cpu_expectations(root)] == sorted(names)
    monkeypatch.setattr(rc.isa, "environment", lambda: XEON)  # not the recorded kind: a difference is a finding
    monkeypatch.setattr(rc, "why_not_runnable", lambda expected: None)
    scripted = {  # by file: (exit status, the record it logs, or None: a crash before its comparison ended)
        "exact-gemma3-270m.json": (1, None),
        "exact-smollm2-135m-bf16.json": (1, (1, 0, "pair-000: artifact id 1 != 2")),
        "exact-smollm2-135m.json": (0, (5, 5, None)),
        "exact-smollm2-135m-llama-f16.json": (1, (0, 0, None, ["engine.system_info"])),
    }
    ran = []

    def stand_in(root_, path, limit, work, env=None, across_cpu_kinds=False):
        assert not across_cpu_kinds  # not asked for
        ran.append((path.name, limit))
        code, counts = scripted[path.name]
        record = None
        if counts is not None:
            record = {**_record(*counts), "expectation_sha256": json.loads(path.read_text())["manifest_sha256"]}
        return subprocess.CompletedProcess([], code, "", "Traceback\nRuntimeError: boom" if record is None else ""), record

    monkeypatch.setattr(rc, "replay_once", stand_in)
    log, said = tmp_path / "replays.jsonl", []
    outcomes = rc.replay_committed(root, 5, log, say=said.append)
    assert sorted(ran) == sorted((name, 5) for name in scripted)  # the crash did not stop the loop
    assert [(o.name.rsplit("/", 1)[1], o.verdict) for o in outcomes] == [
        ("exact-gemma3-270m.json", rc.FAILED), ("exact-smollm2-135m-bf16.json", rc.DIFFERS_UNPROVEN),
        ("exact-smollm2-135m-llama-f16.json", rc.NOT_COMPARABLE), ("exact-smollm2-135m.json", rc.EQUAL)]
    # the completed comparisons and the pin found not comparable are logged; the crash logged nothing to keep
    assert [(r["compared"], r["equal"], r["pin_differences"]) for r in read_replay_log(log)] == [
        (1, 0, []), (0, 0, ["engine.system_info"]), (5, 5, [])]
    assert said[0] == ("manifests/amd-epyc-avx512/exact-gemma3-270m.json: failed: no replay record logged "
                       "(exit status 1): RuntimeError: boom")
    assert rc.exit_status(outcomes) == 1
    assert rc.summary(outcomes) == ("1 failed; 1 differs on a kind of CPU not proven to reproduce; 1 not comparable; "
                                    "1 equal. Failed: manifests/amd-epyc-avx512/exact-gemma3-270m.json")
    assert rc.exit_status(outcomes[1:]) == 0  # an unproven difference is a finding, not a failure
    with pytest.raises(ValueError, match="not a committed CPU expectation"):
        rc.replay_committed(root, 5, log, only=[root / "manifests/nvidia-h200/exact-random-gemma3-12b-bf16.json"])


def test_make_replay_exact_on_an_emulated_cpu_replays_nothing_and_says_where_to_log(tmp_path, monkeypatch, capsys):
    """An emulated CPU's replays prove no pin: `make replay-exact` (which logs to manifests/replays.jsonl) refuses
    before the first replay, exit status 2, pointing to the emulated log."""
    monkeypatch.setattr(rc.isa, "environment", lambda: {"cpu_model": "AMD EPYC", "emulated": {"seen": "Haswell"}})
    monkeypatch.setattr(rc, "committed_cpu_expectations", lambda root: pytest.fail("an expectation was looked up"))
    log = tmp_path / "replays.jsonl"
    assert rc.main(str(ROOT), 5, str(log)) == 2
    assert "log it to emulated-replays.jsonl" in capsys.readouterr().err and not log.exists()


def test_an_expectation_whose_library_or_model_is_not_installed_is_not_run_and_says_why():
    expected = json.loads((REFERENCE_MANIFESTS / "exact-smollm2-135m.json").read_text())
    absent = {**expected, "config": {**expected["config"], "libraries": {"no-such-distribution-here": "1.0"}}}
    assert rc.why_not_runnable(absent) == "no-such-distribution-here not installed"
    native = {**expected, "config": {**expected["config"], "isa": "native", "cpu_capability": "NOT-THIS-CPU"}}
    assert rc.why_not_runnable(native) == f"pinned to the native kernels of NOT-THIS-CPU; this CPU is " \
                                          f"{isa.native_capability()}"


def test_a_real_replay_that_fails_before_comparing_logs_nothing_and_fails(tmp_path):
    """A fresh process that stops before its comparison (here its problem set is gone) writes no record: FAILED,
    whatever the CPU, with its last line quoted."""
    expected = json.loads((REFERENCE_MANIFESTS / "exact-smollm2-135m.json").read_text())
    broken = {**expected, "problem_set": {**expected["problem_set"], "source": str(tmp_path / "gone.jsonl")}}
    broken["manifest_sha256"] = sha256_json({k: v for k, v in broken.items() if k != "manifest_sha256"})
    path = tmp_path / "exact-broken.json"
    path.write_text(json.dumps(broken))
    done, record = rc.replay_once(ROOT, path, 1, tmp_path / "work", timeout_s=300)
    assert record is None and done.returncode != 0
    outcome = rc.judge(path.name, broken, record, done.returncode, done.stdout + done.stderr, 1, [], isa.environment())
    assert outcome.verdict == rc.FAILED and "gone.jsonl" in outcome.detail, outcome.detail


def test_replay_exact_runs_the_loop_over_every_file():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\nreplay-exact:"):].split("\n\n", 1)[0]
    assert "graftbench.eval.replay_committed import main" in recipe and "|| exit 1" not in recipe


LLAMA_CERTIFICATE = REFERENCE_MANIFESTS / "exact-smollm2-135m-llama-f16.json"


def _pin_with_system_info(pin: dict, change) -> dict:
    """``pin`` (a llama.cpp certificate's) with ``change`` applied to its system_info, in both fields that hold it."""
    info = change(pin["engine"]["system_info"])
    return {**pin, "cpu_capability": info, "engine": {**pin["engine"], "system_info": info}}


def test_a_pin_that_differs_in_cpu_features_alone_is_told_from_any_other_difference():
    recorded = json.loads(LLAMA_CERTIFICATE.read_text())["config"]
    assert "AVX_VNNI = 1 | " in recorded["engine"]["system_info"]
    no_vnni = _pin_with_system_info(recorded, lambda info: info.replace("AVX_VNNI = 1 | ", ""))
    assert rc.cpu_feature_difference(recorded, no_vnni) == {
        "fields": ["cpu_capability", "engine.system_info"], "recorded_only": ["AVX_VNNI = 1"], "replayed_only": []}
    amx = _pin_with_system_info(recorded, lambda info: info.replace("AVX_VNNI = 1", "AMX_INT8 = 1"))
    assert rc.cpu_feature_difference(recorded, amx)["replayed_only"] == ["AMX_INT8 = 1"]
    assert rc.cpu_feature_difference(recorded, recorded) is None  # equal pins: an ordinary replay
    not_these = {  # each another code path, not CPU features alone: stays not comparable
        "a build switch": _pin_with_system_info(recorded, lambda info: info.replace("OPENMP = 1 | ", "")),
        "another llama.cpp": {**no_vnni, "engine": {**no_vnni["engine"], "llama_cpp_python": "0.3.35"}},
        "another cache": {**no_vnni, "engine": {**no_vnni["engine"], "type_k": "q8_0"}},
        "another thread count": {**no_vnni, "threads": 2},
        "not a system_info": _pin_with_system_info(recorded, lambda info: "AVX2 = 1"),
    }
    for why, here in not_these.items():
        assert rc.cpu_feature_difference(recorded, here) is None, why
    one_field = {**recorded, "cpu_capability": no_vnni["cpu_capability"]}  # the engine's system_info equal
    assert rc.cpu_feature_difference(recorded, one_field)["fields"] == ["cpu_capability"]


def test_adopting_the_cpu_features_changes_those_fields_only_and_keeps_the_pairs():
    expected = json.loads(LLAMA_CERTIFICATE.read_text())
    here = _pin_with_system_info(expected["config"], lambda info: info.replace("AVX_VNNI = 1 | ", ""))
    adopted, difference = rc.adopt_cpu_features(expected, here)
    assert pin_differences(adopted["config"], here) == []
    assert pin_differences(expected["config"], adopted["config"]) == difference["fields"]
    assert adopted["pairs"] == expected["pairs"] and adopted["manifest_sha256"] == expected["manifest_sha256"]
    assert "AVX_VNNI = 1" in expected["config"]["engine"]["system_info"]  # the expectation itself is untouched
    assert rc.adopt_cpu_features(expected, {**here, "threads": 2}) is None
    assert rc.describe_features(difference) == "AVX_VNNI = 1 recorded, not here"


def _across(compared: int, equal: int, difference: str | None = None,
            pins=("cpu_capability", "engine.system_info")) -> dict:
    return {**_record(compared, equal, difference, list(pins)),
            "across_cpu_kinds": {"recorded_only": ["AVX_VNNI = 1"], "replayed_only": []}}


def test_a_comparison_across_cpu_kinds_is_logged_never_failed_and_never_proves_the_recorded_kind():
    equal = _judge(_across(5, 5), 0, AMD)
    assert (equal.verdict, equal.failed, equal.completed, equal.kept) == (rc.EQUAL_ACROSS, False, True, True)
    assert "AVX_VNNI = 1 recorded, not here" in equal.detail and "pin differs in cpu_capability" in equal.detail
    # a difference is a finding, even where the expectation is known to reproduce (here: the recorded kind)
    differs = _judge(_across(2, 1, "pair-001: state 1 != 2"), 1, AMD)
    assert (differs.verdict, differs.failed, differs.completed) == (rc.DIFFERS_ACROSS, False, True)
    assert rc.exit_status([equal, differs]) == 0
    # counts or exit status that contradict the record, or a pin that differs in more than CPU features: failed
    assert _judge(_across(3, 3), 0).verdict == rc.FAILED
    assert _judge(_across(5, 5), 1).verdict == rc.FAILED
    assert _judge(_across(2, 1, "pair-001: state"), 0).verdict == rc.FAILED
    assert _judge(_across(5, 5, pins=("cpu_capability", "threads")), 0).verdict == rc.FAILED
    assert _judge(_across(5, 5, pins=()), 0).verdict == rc.FAILED
    # an equal comparison across kinds verifies no CPU: the replayed kind stays unproven
    record = {**_across(5, 5), "replayed_on": XEON}
    assert verified_cpus(EXPECTED, [record]) == [AMD]
    assert not known_to_reproduce(EXPECTED, [record], XEON)
    assert rc.summary([equal, differs]) == "1 equal on another kind of CPU; 1 differs on another kind of CPU"


def test_replay_exact_asked_across_cpu_kinds_passes_the_option_to_llama_cpp_certificates_alone(tmp_path, monkeypatch):
    root, names = _committed_root(tmp_path)
    monkeypatch.setattr(rc, "why_not_runnable", lambda expected: None)
    asked = {}

    def stand_in(root_, path, limit, work, env=None, across_cpu_kinds=False):
        asked[path.name] = across_cpu_kinds
        sha = json.loads(path.read_text())["manifest_sha256"]
        record = {**(_across(5, 5) if across_cpu_kinds else _record(5, 5)), "expectation_sha256": sha}
        return subprocess.CompletedProcess([], 0, "", ""), record

    monkeypatch.setattr(rc, "replay_once", stand_in)
    log = tmp_path / "replays.jsonl"
    outcomes = rc.replay_committed(root, 5, log, say=lambda line: None, across_cpu_kinds=True)
    assert asked == {"exact-gemma3-270m.json": False, "exact-smollm2-135m-bf16.json": False,
                     "exact-smollm2-135m.json": False, "exact-smollm2-135m-llama-f16.json": True}
    assert {o.name.rsplit("/", 1)[1]: o.verdict for o in outcomes}["exact-smollm2-135m-llama-f16.json"] \
        == rc.EQUAL_ACROSS
    assert [("across_cpu_kinds" in r) for r in read_replay_log(log)] == [False, False, True, False]
    assert rc.replay_arguments(Path("e.json"), 5, Path("l.jsonl"), True)[-1] == "--across-cpu-kinds"
    assert "--across-cpu-kinds" not in rc.replay_arguments(Path("e.json"), 5, Path("l.jsonl"))


def test_across_cpu_kinds_is_refused_without_expect_and_for_a_torch_expectation():
    runner = CliRunner()
    alone = runner.invoke(app, ["check-exact", "--across-cpu-kinds"])
    assert alone.exit_code != 0 and "--across-cpu-kinds applies with --expect only" in alone.output
    torch = runner.invoke(app, ["check-exact", "--expect", str(REFERENCE_MANIFESTS / "exact-smollm2-135m.json"),
                                "--across-cpu-kinds"])
    assert torch.exit_code != 0
    assert "engine 'torch' does not support comparing a certificate on another kind of CPU" in torch.output


def test_replay_exact_passes_replay_across_cpu_kinds_through():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\nreplay-exact:"):].split("\n\n", 1)[0]
    assert '"$(REPLAY_ACROSS_CPU_KINDS)"' in recipe and 'across_cpu_kinds=sys.argv[2] == "1"' in recipe


def test_every_committed_qwen_certificate_has_a_completed_five_pair_comparison_logged():
    """The committed replay log (manifests/replays.jsonl) holds, for every committed Qwen certificate, 5 pairs compared
    equal on the kind of CPU it was recorded on, or, for a llama.cpp certificate whose recorded build reports CPU
    features no machine that replayed it had, a completed comparison across CPU kinds (``--across-cpu-kinds``: 5
    pairs equal, or up to its first difference; logged, proving no kind). The torch certificates pin --isa avx2 and have their recorded-kind replay."""
    from graftbench.util.isa import same_cpu_kind

    records = read_replay_log(ROOT / "manifests" / "replays.jsonl")
    certificates = sorted(ROOT.glob("manifests/*/exact-qwen*.json"))
    assert len(certificates) == 10  # 4 torch (--isa avx2), 4 native llama.cpp builds, 2 on the portable build
    awaiting = []
    for path in certificates:
        expected = json.loads(path.read_text())
        own = [r for r in records if r["expectation_sha256"] == expected["manifest_sha256"]]
        on_kind = [r for r in own if not r["pin_differences"] and r["compared"] == r["equal"] == 5
                   and same_cpu_kind(expected["environment"], r["replayed_on"])]
        across = [r for r in own if r.get("across_cpu_kinds") is not None
                  and (r["compared"] == r["equal"] == 5 or r["first_difference"] is not None)  # stops at one
                  and set(r["pin_differences"]) <= set(rc.CPU_FEATURE_FIELDS)]
        assert on_kind or across, path.name
        if not on_kind:
            assert expected["config"].get("engine"), path.name  # a torch certificate has its recorded-kind replay
            awaiting.append(path.name)
    assert set(awaiting) <= {f"exact-qwen2.5-coder-{size}-llama-{cache}.json"
                             for size in ("0.5b", "1.5b") for cache in ("f16", "q8_0")}


def test_replay_portable_replays_every_committed_portable_expectation_without_reinstalling():
    """``make replay-portable`` runs replay-exact's loop on all 50 pairs of every committed portable expectation, in
    this make (not a sub-make, which drops ``-o .venv/.installed`` and would reinstall the venv): a dry run."""
    alone = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # not `make test`'s
    done = subprocess.run(["make", "-n", "-o", ".venv/.installed", "-o", ".llama-portable/.installed",
                           "replay-portable"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=alone)
    assert done.returncode == 0, done.stderr
    portable = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("manifests/*/exact-*-portable.json"))
    assert portable and "pip install" not in done.stdout and "-m venv" not in done.stdout, done.stdout
    assert done.stdout.count("graftbench.eval.replay_committed import main") == 1
    assert done.stdout.rstrip().endswith('50 "" ' + " ".join(portable)), done.stdout
