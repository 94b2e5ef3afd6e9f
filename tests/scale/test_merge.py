"""``graftbench merge``: shards run in their own folders give, merged, the manifest of the one-process run."""

import json
import shutil

import pytest

from graftbench.problems.builtin import builtin_problems
from graftbench.problems.shards import parse_shard
from graftbench.results.manifest import graft_use, verify_manifest, write_manifest
from graftbench.scale.merge import MergeError, ShardRun, merge_runs, merged_manifest
from graftbench.results.runs import RunError
from graftbench.settings import EvalSettings
from graftbench.eval.eval_run import run_eval

TIMING = {"wall_s", "ttft_s", "energy_j", "certify_s"}  # measured, so they differ between any two runs


def _problems():
    return [p for p in builtin_problems(n_per_family=2) if p.family in ("mod", "paths", "digits")]


def _same_but_timing(sample):
    return {k: v for k, v in sample.items() if k not in TIMING}


@pytest.fixture(scope="module", params=["greedy", "sampled"])
def sharded(request, session, tmp_path_factory):
    """One run in one process, and the same run as shards 0/2 and 1/2."""
    root = tmp_path_factory.mktemp(f"merge-{request.param}")
    extra = {} if request.param == "greedy" else {"samples": 2, "temperature": 0.7, "top_p": 0.95, "seed": 3}
    problems = _problems()
    single = run_eval(session, problems, "builtin", "single", EvalSettings(max_new_tokens=6, **extra),
                      command="solve", runs_root=root)
    for k in range(2):
        run_eval(session, problems, "builtin", f"part{k}", EvalSettings(max_new_tokens=6, shard=f"{k}/2", **extra),
                 command="solve", runs_root=root)
    return root, single


def test_merged_shards_equal_the_single_process_run(sharded):
    root, single = sharded
    result = merge_runs(["part1", "part0"], "merged", root)
    merged, one = result.manifest, single.manifest
    assert [s["problem_id"] for s in merged["samples"]] == [s["problem_id"] for s in one["samples"]]
    assert [_same_but_timing(s) for s in merged["samples"]] == [_same_but_timing(s) for s in one["samples"]]
    for section in ("problems", "problem_set", "settings", "config", "config_fingerprint", "command"):
        assert merged[section] == one[section], section
    assert merged["metrics"]["avg_at_n"] == one["metrics"]["avg_at_n"]
    assert [m["shard"] for m in merged["merged_from"]] == ["0/2", "1/2"]
    assert verify_manifest(root / "merged" / "manifest.json")[0] == []
    assert [json.loads(line) for line in (root / "merged" / "samples.jsonl").read_text().splitlines()] \
        == merged["samples"]


def test_a_merged_graft_run_records_what_it_grafted_as_the_one_process_run_does(sharded):
    root, _ = sharded
    shards = [ShardRun(name, root / name / "manifest.json", manifest, parse_shard(manifest["settings"]["shard"]))
              for name in ("part0", "part1")
              for manifest in [json.loads((root / name / "manifest.json").read_text())]]
    assert "graft_use" not in merged_manifest(shards, "merged-baseline")
    for shard in shards:
        shard.manifest["settings"]["graft"] = True
    merged = merged_manifest(shards, "merged-graft")
    assert merged["graft_use"] == graft_use(merged["samples"]) and merged["graft_use"]["none_grafted"] is True


def test_each_shard_ran_only_its_own_problems(sharded):
    root, single = sharded
    ids = [json.loads((root / f"part{k}" / "manifest.json").read_text())["problems"] for k in range(2)]
    assert sorted(p["id"] for part in ids for p in part) == sorted(p["id"] for p in single.manifest["problems"])
    assert all(ids)


def test_a_missing_or_repeated_shard_is_refused(sharded):
    root, _ = sharded
    with pytest.raises(MergeError, match=r"each of 0/2 … 1/2 exactly once"):
        merge_runs(["part0"], "m1", root)
    with pytest.raises(MergeError, match=r"each of 0/2 … 1/2 exactly once"):
        merge_runs(["part0", "part0"], "m2", root)
    with pytest.raises(MergeError, match="not a shard's run"):
        merge_runs(["single", "part0"], "m3", root)
    assert not (root / "m1").exists() and not (root / "m2").exists()


def test_a_shard_with_other_settings_is_refused(sharded, session):
    root, _ = sharded
    manifest = json.loads((root / "part0" / "manifest.json").read_text())
    run_eval(session, _problems(), "builtin", "other1", EvalSettings(max_new_tokens=5, shard="1/2",
             samples=manifest["settings"]["samples"], temperature=manifest["settings"]["temperature"],
             top_p=manifest["settings"]["top_p"], seed=manifest["settings"]["seed"]), command="solve", runs_root=root)
    with pytest.raises(MergeError, match=r"shard 'other1': settings differ .*max_new_tokens"):
        merge_runs(["part0", "other1"], "m4", root)


def test_a_tampered_shard_is_refused(sharded, tmp_path):
    root, _ = sharded
    manifest = json.loads((root / "part0" / "manifest.json").read_text())
    manifest["samples"][0]["correct"] = not manifest["samples"][0]["correct"]
    write_manifest(manifest, tmp_path / "tampered.json")
    with pytest.raises(MergeError, match="tampered.json': its manifest does not verify"):
        merge_runs([tmp_path / "tampered.json", root / "part1"], "m5", root)


def test_an_unfinished_shard_is_refused(sharded):
    root, _ = sharded
    with pytest.raises(MergeError, match="shard 'nowhere': no manifest.json"):
        merge_runs(["part0", "nowhere"], "m6", root)


def test_an_interrupted_merge_resumes_and_another_run_is_not_overwritten(sharded):
    root, _ = sharded
    first = merge_runs(["part0", "part1"], "again", root)
    lines = (root / "again" / "samples.jsonl").read_text().splitlines(keepends=True)
    (root / "again" / "samples.jsonl").write_text("".join(lines[:2]))
    (root / "again" / "manifest.json").unlink()
    resumed = merge_runs(["part0", "part1"], "again", root)
    assert [_same_but_timing(s) for s in resumed.manifest["samples"]] == \
        [_same_but_timing(s) for s in first.manifest["samples"]]
    assert (root / "again" / "samples.jsonl").read_text() == "".join(lines)
    shutil.copytree(root / "part0", root / "taken")
    with pytest.raises(RunError, match=r"other settings \(shard\)"):
        merge_runs(["part0", "part1"], "taken", root)
    shutil.copytree(root / "single", root / "timed")  # the same settings, but its own measured samples
    with pytest.raises(RunError, match="already holds other samples"):
        merge_runs(["part0", "part1"], "timed", root)
    assert (root / "single" / "samples.jsonl").read_bytes() == (root / "timed" / "samples.jsonl").read_bytes()
