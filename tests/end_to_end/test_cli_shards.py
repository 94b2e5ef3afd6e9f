"""The one-round flywheel's stages run as shards 0/2 and 1/2 from the command line, against one shared store, and
merged per stage: equal to the same stages run in one process."""

import json

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app

runner = CliRunner()
TIMING = {"wall_s", "ttft_s", "energy_j", "certify_s"}
LIMIT = "6"  # of the built-in set's 12 problems: three families, three per shard
PROBLEMS = ["--problems", "builtin", "--limit", LIMIT, "--max-new-tokens", "8"]


def _ok(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _samples(path):
    return [{k: v for k, v in s.items() if k not in TIMING} for s in json.loads(path.read_text())["samples"]]


@pytest.mark.slow
def test_sharded_stages_merge_into_the_single_process_stages(session, tmp_path):
    """Six problems suffice: splitting a stage in two, sharing one store and merging in order are the same
    bookkeeping for any count of at least two per shard, and each problem only adds a prefill and a decode to every
    one of the nine stages run."""
    runs, one, shared = str(tmp_path / "runs"), str(tmp_path / "store-one"), str(tmp_path / "store-shared")
    _ok(["solve", *PROBLEMS, "--runs-dir", runs, "--run", "base"])
    _ok(["deposit", "--problems", "builtin", "--limit", LIMIT, "--store", one, "--runs-dir", runs, "--from-run", "base"])
    _ok(["eval", *PROBLEMS, "--graft", "--certify", "--store", one, "--runs-dir", runs, "--run", "graft"])
    for k in (0, 1):
        _ok(["solve", *PROBLEMS, "--shard", f"{k}/2", "--runs-dir", runs, "--run", f"base-{k}"])
    _ok(["merge", "base-0", "base-1", "--out", "base-merged", "--runs-dir", runs])
    for k in (0, 1):
        _ok(["deposit", "--problems", "builtin", "--limit", LIMIT, "--shard", f"{k}/2", "--store", shared,
             "--runs-dir", runs, "--from-run", "base-merged"])
    for k in (0, 1):
        _ok(["eval", *PROBLEMS, "--graft", "--certify", "--store", shared, "--shard", f"{k}/2", "--runs-dir", runs,
             "--run", f"graft-{k}"])
    merged = _ok(["merge", "graft-0", "graft-1", "--out", "graft-merged", "--runs-dir", runs])
    assert "(verified)" in merged.output
    for stage in ("base", "graft"):
        assert _samples(tmp_path / "runs" / f"{stage}-merged" / "manifest.json") == \
            _samples(tmp_path / "runs" / stage / "manifest.json")
    assert sorted(p.name for p in (tmp_path / "store-one" / "artifacts").rglob("*.safetensors")) == \
        sorted(p.name for p in (tmp_path / "store-shared" / "artifacts").rglob("*.safetensors"))


@pytest.mark.parametrize("spec", ["2/2", "x", "1/0"])
def test_a_bad_shard_exits_2_naming_it(spec, tmp_path):
    result = runner.invoke(app, ["deposit", "--problems", "builtin", "--shard", spec, "--store", str(tmp_path)])
    assert result.exit_code == 2
    assert f"shard '{spec}'" in result.output


def test_merge_without_shards_exits_2_naming_the_missing_run(tmp_path):
    result = runner.invoke(app, ["merge", "a", "b", "--out", "m", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "shard 'a': no manifest.json" in result.output
    assert not (tmp_path / "m").exists()
