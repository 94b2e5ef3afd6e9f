"""Solve/eval runs end to end on the default model: resume, fallback, budgets, manifests that catch tampering."""

from __future__ import annotations

import json
import os

import pytest

from graftbench.problems.builtin import builtin_problems
from graftbench.eval.deposit import deposit_items, items_from_problems
from graftbench.eval.evaluate import StrictFallbackError
from graftbench.results.manifest import verify_manifest, write_manifest
from graftbench.problems.types import Problem
from graftbench.results.runs import RunDir, RunError
from graftbench.settings import EvalSettings
from graftbench.store.folder import Store
from graftbench.verify.answers import VERIFIER_VERSION
from graftbench.eval.eval_run import run_eval

TINY = EvalSettings(max_new_tokens=6)


@pytest.fixture(scope="module")
def problems():
    return builtin_problems(n_per_family=1)[:4]


class Interrupt(Exception):
    pass


def test_interrupted_solve_resumes_without_loss_or_repeat(session, problems, tmp_path):
    seen = []

    def stop_after_two(sample):
        seen.append(sample.problem_id)
        if len(seen) == 2:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_eval(session, problems, "builtin", "r", TINY, runs_root=tmp_path, on_sample=stop_after_two)
    run = RunDir(tmp_path, "r")
    before = run.samples_path.read_bytes()
    assert [s["problem_id"] for s in run.read_samples()] == [p.id for p in problems[:2]]

    with open(run.samples_path, "ab") as handle:  # a write torn by a kill mid-line
        handle.write(b'{"problem_id": "torn')
    resumed = []
    result = run_eval(session, problems, "builtin", "r", TINY, runs_root=tmp_path, on_sample=lambda s: resumed.append(s.problem_id))
    assert resumed == [p.id for p in problems[2:]]
    lines = run.samples_path.read_bytes()
    assert lines.startswith(before)
    assert [s["problem_id"] for s in run.read_samples()] == [p.id for p in problems]
    assert [s.problem_id for s in result.samples] == [p.id for p in problems]
    assert verify_manifest(run.manifest_path) == ([], [f"{len(problems)} samples re-verified under verifier {VERIFIER_VERSION}; no artifacts used"])


def test_resume_with_other_settings_is_refused(session, problems, tmp_path):
    run_eval(session, problems[:1], "builtin", "r", TINY, runs_root=tmp_path)
    with pytest.raises(RunError, match="max_new_tokens"):
        run_eval(session, problems[:1], "builtin", "r", EvalSettings(max_new_tokens=7), runs_root=tmp_path)


@pytest.mark.parametrize("name", ["../escape", "/abs", "a\x00b", "..", ""])
def test_run_names_that_leave_the_folder_are_refused(tmp_path, name):
    with pytest.raises(RunError):
        RunDir(tmp_path, name)


@pytest.mark.parametrize("file", ["samples.jsonl", "appended_by.jsonl", "run.json", "manifest.json"])
@pytest.mark.parametrize("target", ["elsewhere.txt", "missing.txt"])
def test_a_run_file_linked_out_of_its_folder_is_refused_and_its_target_left_untouched(tmp_path, file, target):
    """A run folder prepared by someone else: its journal linked to a file elsewhere was cut (a "torn" last line)
    and appended to on resume, and a link to a missing file would have created it."""
    outside = tmp_path / target
    if target == "elsewhere.txt":
        outside.write_bytes(b"precious\nlast line, no newline")
    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / file).symlink_to(outside)
    run = RunDir(tmp_path / "runs", "r")
    with pytest.raises(RunError, match=f"run 'r': .*{file} is refused: it resolves to .*outside"):
        run.open({"settings": 1})
    assert (outside.read_bytes() == b"precious\nlast line, no newline") if target == "elsewhere.txt" \
        else not outside.exists()
    run.lock()  # the lock was released
    run.close()


def test_a_run_file_linked_inside_its_folder_and_a_fifo_journal(tmp_path):
    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / "kept.jsonl").write_text("")
    (folder / "samples.jsonl").symlink_to("kept.jsonl")
    with RunDir(tmp_path / "runs", "r") as run:
        assert run.open({"settings": 1}) == []  # a link that stays in the folder is the run's own file
    (folder / "samples.jsonl").unlink()
    os.mkfifo(folder / "samples.jsonl")
    with pytest.raises(RunError, match="it is a FIFO"):
        RunDir(tmp_path / "runs", "r").open({"settings": 1})


def test_token_budget_stops_the_run(session, problems, tmp_path):
    result = run_eval(session, problems, "builtin", "b", EvalSettings(max_new_tokens=6, token_budget=9),
                      runs_root=tmp_path)
    assert [s.decode_tokens for s in result.samples] == [6, 3]
    assert result.samples[1].finish_reason == "budget"
    assert result.manifest["totals"]["decode_tokens"] == 9


def _graft_run(session, problems, tmp_path, name, **kw):
    store_root = tmp_path / "store"
    settings = EvalSettings(max_new_tokens=8, graft=True, certify=True, **kw)
    return run_eval(session, problems, "builtin", name, settings, runs_root=tmp_path, store_root=store_root)


def test_graft_eval_certifies_and_a_corrupt_artifact_falls_back(session, problems, tmp_path):
    store = Store(tmp_path / "store")
    report = deposit_items(session, store, items_from_problems(problems[:2]))
    assert len(report.deposited) == 2 and not report.refused

    result = _graft_run(session, problems[:2], tmp_path, "g")
    for sample in result.samples:
        assert sample.mode == "graft" and sample.route == "exact"
        assert sample.certified is True and sample.certificate_sha256 == sample.logits_sha256
        assert sample.prefill_tokens_saved > 50 and sample.finish_reason == "stop"
    assert result.manifest["totals"]["certified"] == 2

    victim = report.deposited[0][1]
    data = bytearray(store.path(victim).read_bytes())
    data[-3] ^= 0x10
    store.path(victim).write_bytes(bytes(data))
    fallen = _graft_run(session, problems[:1], tmp_path, "g2")
    sample = fallen.samples[0]
    assert sample.mode == "baseline" and sample.fallback.startswith("hash:")
    assert victim[:16] in sample.fallback
    assert fallen.manifest["totals"]["fallbacks"] == 1
    with pytest.raises(StrictFallbackError, match=victim[:16]):
        _graft_run(session, problems[:1], tmp_path, "g3", strict=True)


def test_deposit_refuses_unverified_solutions(session, tmp_path):
    wrong = Problem("w", "What is $2+3$?", "5", "Adding, $2+3=6$. Final answer: 6")
    right = Problem("r", "What is $2+2$?", "4", "Adding gives $\\boxed{4}$.")
    report = deposit_items(session, Store(tmp_path / "s"), items_from_problems([wrong, right]))
    assert [pid for pid, *_ in report.deposited] == ["r"]
    assert report.refused == [("w", "final answer '6' does not verify against key '5'")]


def _tamper(manifest_path, out_path, edit):
    manifest = json.loads(manifest_path.read_text())
    edit(manifest)
    write_manifest(manifest, out_path)  # re-serialized but NOT re-sealed
    return verify_manifest(out_path)[0]


def test_verify_manifest_names_what_was_changed(session, problems, tmp_path):
    result = run_eval(session, problems[:2], "builtin", "m", TINY, runs_root=tmp_path)
    path = result.run.manifest_path
    assert verify_manifest(path)[0] == []
    first = result.samples[0].sample_id

    def flip_output_byte(m):
        text = m["samples"][0]["output"]
        m["samples"][0]["output"] = text[:-1] + chr(ord(text[-1]) ^ 1)

    mismatches = _tamper(path, tmp_path / "a.json", flip_output_byte)
    assert f"sample {first}: output_sha256 does not match the stored output" in mismatches

    flipped = not result.samples[1].correct
    mismatches = _tamper(path, tmp_path / "b.json", lambda m: m["samples"][1].update(correct=flipped))
    assert any(line.startswith(f"sample {problems[1].id}#0: correct recorded {flipped}") for line in mismatches)

    mismatches = _tamper(path, tmp_path / "c.json", lambda m: m["totals"].update(decode_tokens=1))
    assert any(line.startswith("totals.decode_tokens: recorded 1") for line in mismatches)
    assert "manifest_sha256 does not match the manifest's content" in mismatches
