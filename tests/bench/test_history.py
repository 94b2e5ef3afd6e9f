"""Benchmark results are never overwritten: an earlier run's JSON and markdown move to ``runs/``; every one written
carries its provenance (date, code version, machine) in its JSON and a line naming them in its markdown."""

import json
import os
from datetime import datetime, timezone

from graftbench.bench.history import keep_earlier, run_date
from graftbench.bench.report import write_json_and_markdown
from graftbench.util.display_text import markdown_text
from graftbench.util.isa import describe_cpu
from graftbench.util.provenance import code_version, machine, provenance_line


def _result(date: str, figure: float) -> dict:
    return {"environment": {"date": date, "processor": "test CPU"}, "figure": figure}


def test_second_run_moves_the_first_into_runs(tmp_path):
    write_json_and_markdown(_result("2026-12-02T14:32:12Z", 1.22), "first\n", tmp_path, "bench-m")
    paths = write_json_and_markdown(_result("2026-12-02T15:08:27Z", 0.89), "second\n", tmp_path, "bench-m")

    assert paths == [tmp_path / "bench-m.json", tmp_path / "bench-m.md"]
    assert json.loads(paths[0].read_text())["figure"] == 0.89 and paths[1].read_text().endswith("\n\nsecond\n")
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["bench-m-2026-12-02T143212Z.json",
                                                      "bench-m-2026-12-02T143212Z.md"]
    assert json.loads((runs / "bench-m-2026-12-02T143212Z.json").read_text())["figure"] == 1.22
    assert (runs / "bench-m-2026-12-02T143212Z.md").read_text().endswith("\n\nfirst\n")


def test_three_runs_keep_two_earlier_ones_and_a_taken_name_gets_a_counter(tmp_path):
    for figure in (1.0, 2.0, 3.0):  # the same start time three times: names must not collide
        write_json_and_markdown(_result("2026-12-02T15:08:27Z", figure), f"{figure}\n", tmp_path, "bench-m")

    runs = tmp_path / "runs"
    kept = {p.name: json.loads(p.read_text())["figure"] for p in runs.glob("*.json")}
    assert kept == {"bench-m-2026-12-02T150827Z.json": 1.0, "bench-m-2026-12-02T150827Z-2.json": 2.0}
    assert (runs / "bench-m-2026-12-02T150827Z-2.md").read_text().endswith("\n\n2.0\n")
    assert json.loads((tmp_path / "bench-m.json").read_text())["figure"] == 3.0


def test_other_stems_are_left_alone(tmp_path):
    write_json_and_markdown(_result("2026-12-02T14:00:00Z", 1.0), "a\n", tmp_path, "bench-a")
    write_json_and_markdown(_result("2026-12-02T14:00:00Z", 2.0), "b\n", tmp_path, "bench-a-bfloat16")

    assert not (tmp_path / "runs").exists()
    assert json.loads((tmp_path / "bench-a.json").read_text())["figure"] == 1.0


def test_a_json_without_a_date_is_named_by_its_modification_time(tmp_path):
    earlier = tmp_path / "route-quality.json"
    earlier.write_text("{not json")
    when = datetime(2026, 11, 30, 19, 47, 48, tzinfo=timezone.utc).timestamp()
    os.utime(earlier, (when, when))

    assert run_date(earlier) == "2026-11-30T194748Z"
    moved = keep_earlier(tmp_path, "route-quality")
    assert moved == [tmp_path / "runs" / "route-quality-2026-11-30T194748Z.json"]
    assert moved[0].read_text() == "{not json" and not earlier.exists()


def test_a_lone_markdown_is_not_moved(tmp_path):
    (tmp_path / "bench-m.md").write_text("no JSON beside me\n")

    assert keep_earlier(tmp_path, "bench-m") == []
    assert (tmp_path / "bench-m.md").exists() and not (tmp_path / "runs").exists()


def test_every_write_carries_its_provenance_and_the_markdown_names_it_under_the_title(tmp_path):
    result = _result("2026-12-02T14:32:12Z", 1.22)
    json_path, md_path = write_json_and_markdown(result, "# Bench: m\n\n| a |\n", tmp_path, "bench-m")

    written = json.loads(json_path.read_text())
    block = written.pop("provenance")
    assert written == result and "provenance" not in result  # the caller's dict is left as it was
    assert set(block) == {"created_utc", "code", "machine"} and "gpu" not in block["machine"]
    assert block["machine"] == machine() and block["code"]["version"] == code_version()["version"]
    assert set(block["code"]) == {"version", "commit", "dirty", "reason"}  # its values: tests/util/test_provenance.py
    title, blank, line, blank_2, table = md_path.read_text().splitlines()
    assert (title, blank, blank_2, table) == ("# Bench: m", "", "", "| a |")
    assert line == provenance_line(block) and line.startswith(f"Measured on {markdown_text(describe_cpu(machine()))}, ")
    commit = block["code"]["commit"]
    assert (f"commit {commit[:12]}" in line) if commit else ("commit unknown" in line)
    assert line.endswith(" + uncommitted changes.") == bool(block["code"]["dirty"])


def test_a_gpu_result_names_its_gpu_and_a_file_with_only_a_provenance_is_named_by_its_date(tmp_path):
    gpu_result = {"environment": {"accelerator": {"gpu": "NVIDIA H200"}}, "figure": 1}
    json_path, md_path = write_json_and_markdown(gpu_result, "no title\n", tmp_path, "ttft")
    block = json.loads(json_path.read_text())["provenance"]
    assert block["machine"]["gpu"] == "NVIDIA H200"
    assert md_path.read_text() == f"{provenance_line(block)}\n\nno title\n"  # no title: the line goes first
    assert md_path.read_text().startswith("Measured on NVIDIA H200, on a host with ")

    json_path.write_text(json.dumps({"figure": 2, "provenance": {**block, "created_utc": "2026-12-05T16:01:02Z"}}))
    assert run_date(json_path) == "2026-12-05T160102Z"  # no environment.date: the provenance's date
