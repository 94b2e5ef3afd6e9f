"""Faults on the default model, with nothing lost: every damaged, forged or foreign artifact is refused naming the
artifact and the check, and eval --graft falls back recording why; deposits and solves killed with SIGKILL, two
depositing processes at once, and a full disk leave the store and the samples files consistent.

The faults and the scenarios come from ``graftbench.faults`` (``benchmarks/faults.py`` applies the same catalogue
and plays the same scenarios).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import pickle
import re
import signal
from pathlib import Path

import pytest
import torch

from graftbench.engine.torch import graft
from graftbench.store import router
from graftbench.store.codec import ArtifactError
from graftbench.store.ids import artifact_id_of
from graftbench.eval.deposit import deposit_items, items_from_problems
from graftbench.util.durable import StorageError
from graftbench.eval.evaluate import StrictFallbackError
from graftbench.faults.catalogue import ARTIFACT_FAULTS, Lab, flip_bit, reforge, tiny_problem, write_problem_set
from graftbench.faults.harness import lines_of
from graftbench.faults.store_faults import (
    clean_after_a_killed_write,
    damage_and_reindex,
    resume_while_another_runs,
    swap_files,
)
from graftbench.faults.scenarios import (
    deposit_on_a_full_disk,
    graft_refusal,
    kill_a_resumed_solve,
    kill_put,
    put_concurrently,
    solve_on_a_full_disk,
    write_manifest_on_a_full_disk,
)
from graftbench.results.manifest import verify_manifest
from graftbench.problems.loading import load_problems
from graftbench.problems.types import normalize_problem_text, problem_key
from graftbench.results.runs import RunDir, RunError
from graftbench.settings import EvalSettings
from graftbench.store.folder import Store
from graftbench.eval.eval_run import run_eval

REPO = Path(__file__).resolve().parents[2]




@pytest.fixture(scope="module")
def faulty(session, tmp_path_factory):
    """A store holding one faulty artifact per fault of the catalogue, each routed from its own problem."""
    root = tmp_path_factory.mktemp("faults")
    lab = Lab(session, Store(root / "store"))
    cases = {}
    for i, fault in enumerate(ARTIFACT_FAULTS):
        problem = tiny_problem(100 + i)
        cases[fault.name] = (problem, fault.build(lab, problem))
    return lab, root, cases


# ----------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("fault", ARTIFACT_FAULTS, ids=lambda f: f.name)
def test_every_artifact_fault_is_refused_naming_the_artifact_and_the_check(session, faulty, fault):
    lab, _, cases = faulty
    _, artifact_id = cases[fault.name]
    error = graft_refusal(session, lab.store, artifact_id)
    assert isinstance(error, ArtifactError)
    assert error.check == fault.check
    assert error.artifact_id == artifact_id
    assert str(error).startswith(f"artifact {artifact_id[:16]}: {fault.check} check failed: ")


def test_eval_graft_falls_back_on_every_fault_and_records_why(session, faulty):
    lab, root, cases = faulty
    problems = [cases[f.name][0] for f in ARTIFACT_FAULTS]
    result = run_eval(session, problems, "faults", "faults", EvalSettings(max_new_tokens=4, graft=True),
                      runs_root=root / "runs", store_root=lab.store.root)
    assert [s.problem_id for s in result.samples] == [p.id for p in problems]
    for fault, sample in zip(ARTIFACT_FAULTS, result.samples):
        artifact_id = cases[fault.name][1]
        assert sample.route == "exact" and sample.mode == "baseline" and sample.artifact_id is None
        assert sample.fallback.startswith(f"{fault.check}: artifact {artifact_id[:16]}: {fault.check} check failed")
        assert sample.prefill_tokens == len(session.solve_prompt_ids(cases[fault.name][0].problem))
    totals = result.manifest["totals"]
    assert totals["fallbacks"] == len(ARTIFACT_FAULTS) and totals["grafts"] == 0
    assert verify_manifest(result.run.manifest_path)[0] == []
    assert not (lab.store.root / "UNPICKLED").exists()


@pytest.mark.parametrize("name", ["bit flip in the payload", "header claims another model", "chained: parent missing"])
def test_strict_raises_instead_of_falling_back(session, faulty, name):
    lab, root, cases = faulty
    problem, artifact_id = cases[name]
    check = next(f.check for f in ARTIFACT_FAULTS if f.name == name)
    settings = EvalSettings(max_new_tokens=4, graft=True, strict=True)
    with pytest.raises(StrictFallbackError, match=rf"problem {problem.id}: artifact {artifact_id[:16]}: {check} check"):
        run_eval(session, [problem], "faults", f"strict-{problem.id}", settings, runs_root=root / "runs",
                 store_root=lab.store.root)
    assert RunDir(root / "runs", f"strict-{problem.id}").read_samples() == []


def test_a_consistent_forgery_passes_the_header_checks_but_not_certify(session, tmp_path):
    """Keys edited and the file re-hashed, header untouched: no header check can see it; --certify does."""
    lab = Lab(session, Store(tmp_path / "store"))
    problem = tiny_problem(300)

    def perturb(tensors):
        tensors["layers.5.keys"] = tensors["layers.5.keys"].clone()
        tensors["layers.5.keys"][0, 1, 3, 7] += 0.5

    forged = lab.plant(problem, lambda data: reforge(data, tensors_edit=perturb))
    result = run_eval(session, [problem], "faults", "forged", EvalSettings(max_new_tokens=4, graft=True, certify=True),
                      runs_root=tmp_path, store_root=lab.store.root)
    sample = result.samples[0]
    assert sample.mode == "graft" and sample.artifact_id == forged and sample.fallback is None
    assert sample.certified is False and sample.certificate_sha256 != sample.logits_sha256
    assert result.certificate_mismatches == [problem.id]


def test_the_router_never_picks_an_artifact_of_another_config(session, tmp_path):
    store = Store(tmp_path)
    problem = tiny_problem(301)
    other = dataclasses.replace(session.config, threads=97)
    store.put(Lab(session, store).build(problem, config=other)[0])
    route = router.route(store, session.config.fingerprint, problem_key(problem),
                        normalize_problem_text(problem.problem), 0.6)
    assert route.kind == "none" and route.artifact_id is None
    assert router.route(store, other.fingerprint, problem_key(problem), "", 0.6).kind == "exact"


def test_nothing_is_ever_unpickled(session, faulty, monkeypatch):
    lab, _, cases = faulty
    calls = []
    for module, name in ((pickle, "loads"), (pickle, "load"), (pickle, "Unpickler"), (torch, "load")):
        monkeypatch.setattr(module, name, lambda *a, _name=name, **k: calls.append(_name))
    for fault in ARTIFACT_FAULTS:
        with pytest.raises(ArtifactError):
            graft.restore_chain(session.model, session.config, lab.store, cases[fault.name][1])
    cache, chain = graft.restore_chain(session.model, session.config, lab.store, lab.deposit(tiny_problem(302)))
    assert cache.get_seq_length() == chain[0].token_ids.numel() > 0
    assert calls == [] and not (lab.store.root / "UNPICKLED").exists()
    source = "\n".join(p.read_text() for p in sorted((REPO / "graftbench").rglob("*.py")))
    assert not re.search(r"\bimport (c?pickle|dill|joblib|marshal)\b|\bpickle\.|torch\.load\(|np\.load\(", source)


def test_a_damaged_copy_is_replaced_by_the_next_deposit_of_the_same_artifact(session, tmp_path):
    lab = Lab(session, Store(tmp_path))
    artifact_id = lab.deposit(tiny_problem(303))
    path = lab.store.path(artifact_id)
    path.write_bytes(flip_bit(path.read_bytes(), 12345))
    assert lab.store.inventory()["damaged"] == [artifact_id]
    assert lab.deposit(tiny_problem(303)) == artifact_id
    assert lab.store.read(artifact_id).id == artifact_id and lab.store.verify() == []


# ----------------------------------------------------------------------------------------- crashes


@pytest.mark.parametrize("point", ["deposit-before-rename", "deposit-before-index"])
def test_a_deposit_killed_at_any_point_leaves_nothing_visible_and_the_next_completes(session, tmp_path, point):
    lab = Lab(session, Store(tmp_path / "store"))
    kept = lab.deposit(tiny_problem(0))
    problem = tiny_problem(1)
    data, _ = lab.build(problem)
    assert kill_put(lab.store.root, data, point, tmp_path / "payloads") == -signal.SIGKILL

    inv = Store(lab.store.root, readonly=True).inventory()  # read-only: opening for writing would clean
    assert inv["indexed"] == [kept] and inv["damaged"] == [] and inv["missing"] == [] and inv["other"] == []
    if point == "deposit-before-rename":
        assert inv["intact"] == [kept] and len(inv["temporaries"]) == 1 and inv["orphans"] == []
        assert [p.name for p in Store(lab.store.root).cleaned] == inv["temporaries"]  # the kill's leftover, cleaned
        assert Store(lab.store.root, readonly=True).inventory()["temporaries"] == []
    else:  # the file is complete but not indexed: invisible to readers until the next deposit indexes it
        assert inv["orphans"] == [artifact_id_of(data)] and inv["temporaries"] == []
    assert lab.store.find_exact(session.config.fingerprint, problem_key(problem)) is None
    assert lab.store.verify() == []

    report = deposit_items(session, lab.store, items_from_problems([problem]))
    assert [(pid, aid, new) for pid, aid, _, new in report.deposited] == [(problem.id, artifact_id_of(data), point == "deposit-before-rename")]
    assert lab.store.find_exact(session.config.fingerprint, problem_key(problem)) == artifact_id_of(data)
    assert lab.store.ids() == sorted([kept, artifact_id_of(data)]) and lab.store.verify() == []


@pytest.mark.parametrize("mode", ["sample-torn", "random"])
def test_a_solve_killed_with_sigkill_loses_at_most_the_problem_in_flight(session, tmp_path, mode):
    """Two samples recorded, then a solve process resumes and is killed: mid-write of its first sample
    (``sample-torn``) or as soon as it has recorded one more (``random``). Resuming records each problem once
    and keeps every line recorded before byte-identical."""
    # 12 problems: in the random mode this process polls for the third line and kills the solve; the nine problems
    # after it (not two) keep the solve running while a loaded machine delays the poll, so it is killed, not done
    path = write_problem_set(tmp_path / "set.jsonl", [tiny_problem(i) for i in range(12)])
    problems = load_problems(str(path))
    solve = kill_a_resumed_solve(session, path, tmp_path / "runs", "killed", mode, recorded=2)
    assert solve.interrupted  # the first run stopped after two samples
    prior, at_kill = solve.prior, solve.at_kill
    assert solve.exit_code == -signal.SIGKILL
    assert at_kill.startswith(prior)
    if mode == "sample-torn":
        assert len(at_kill) > len(prior) and not at_kill.endswith(b"\n")
    recorded = lines_of(at_kill)

    after = lines_of(solve.after)
    assert after[: len(recorded)] == recorded and solve.after.startswith(prior)
    assert [json.loads(line)["problem_id"] for line in after] == [p.id for p in problems]
    assert solve.resumed == [p.id for p in problems[len(recorded):]]
    assert verify_manifest(solve.run.manifest_path)[0] == []


# ----------------------------------------------------------------------------------------- concurrency


@pytest.mark.parametrize("same", [True, False], ids=["same-artifacts", "different-artifacts"])
def test_two_processes_depositing_at_once_leave_a_consistent_index_and_intact_payloads(session, tmp_path, same):
    lab = Lab(session, Store(tmp_path / "store"))
    artifacts = [lab.build(tiny_problem(10 + i))[0] for i in range(4)]
    puts = put_concurrently(lab.store.root, artifacts, same, tmp_path / "payloads", rounds=3)
    assert puts.refused == []  # whatever the index showed while they ran was complete and intact
    assert puts.exit_codes == [0, 0]
    expected = sorted(artifact_id_of(data) for data in artifacts)
    inv = lab.store.inventory()
    assert inv["indexed"] == expected and inv["intact"] == expected
    assert inv["damaged"] == inv["orphans"] == inv["missing"] == inv["temporaries"] == []
    assert lab.store.verify() == []
    for data, problem in zip(artifacts, [tiny_problem(10 + i) for i in range(4)]):
        assert lab.store.find_exact(session.config.fingerprint, problem_key(problem)) == artifact_id_of(data)


# ----------------------------------------------------------------------------------------- full disk


@pytest.mark.parametrize("where", ["file", "index"], ids=["artifact file", "index row"])
def test_a_full_disk_during_deposit_raises_a_clear_error_and_leaves_the_store_as_it_was(session, tmp_path, where):
    lab = Lab(session, Store(tmp_path / "store"))
    lab.deposit(tiny_problem(20))
    full = deposit_on_a_full_disk(session, lab.store, tiny_problem(21), where)
    error = full.error
    assert isinstance(error, StorageError)
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert str(error).startswith("[Errno 28] cannot write ")
    assert str(lab.store.artifacts if where == "file" else lab.store.index_path) in str(error)
    assert "this write was undone (what was written before it is kept), free some space and run again" in str(error)
    assert full.after == full.before
    assert len(full.retry.deposited) == 1 and lab.store.verify() == []


def test_a_full_disk_during_solve_keeps_the_samples_file_as_it_was(session, tmp_path):
    problems = [tiny_problem(i) for i in range(3)]
    full = solve_on_a_full_disk(session, problems, tmp_path, "full", free=40)
    run = full.run
    assert isinstance(full.error, StorageError)
    assert full.error.errno == errno.ENOSPC and full.refused == 1
    assert f"cannot write sample '{problems[1].id}' to {run.samples_path}: No space left on device" in str(full.error)
    assert full.after_error == full.at_fill and full.at_fill.count(b"\n") == 1
    assert not full.manifest_written
    assert [s.problem_id for s in full.resumed.samples] == [p.id for p in problems]
    assert run.samples_path.read_bytes().startswith(full.at_fill)


def test_a_full_disk_while_writing_a_manifest_keeps_the_old_one(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text('{"old": true}\n')
    error = write_manifest_on_a_full_disk({"new": "x" * 100}, path, free=5)
    assert isinstance(error, StorageError) and re.search(rf"cannot write {re.escape(str(path))}", str(error))
    assert path.read_text() == '{"old": true}\n' and sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


# ----------------------------------------------------------------------------------------- store and run folders


def test_swapped_artifact_files_are_both_refused_and_eval_falls_back_recording_it(session, tmp_path):
    """Each file keeps the other's bytes under its own name: a route never restores another artifact than the one
    it named; both problems fall back to a normal prefill and the sample says why."""
    lab = Lab(session, Store(tmp_path / "store"))
    problems = [tiny_problem(400), tiny_problem(401)]
    ids = [lab.deposit(p) for p in problems]
    swap_files(lab.store, *ids)
    result = run_eval(session, problems, "faults", "swapped", EvalSettings(max_new_tokens=4, graft=True),
                      runs_root=tmp_path / "runs", store_root=lab.store.root)
    for sample, artifact_id, problem in zip(result.samples, ids, problems):
        assert sample.route == "exact" and sample.mode == "baseline" and sample.artifact_id is None
        check = sample.fallback.split(":")[0]
        assert check in ("hash", "size")
        assert sample.fallback.startswith(f"{check}: artifact {artifact_id[:16]}: {check} check failed")
        assert sample.prefill_tokens == len(session.solve_prompt_ids(problem.problem))
    assert result.manifest["totals"]["fallbacks"] == 2 and result.manifest["totals"]["grafts"] == 0


def test_a_damaged_index_is_a_clear_error_and_reindex_restores_every_route(session, tmp_path):
    lab = Lab(session, Store(tmp_path / "store"))
    problems = [tiny_problem(410), tiny_problem(411)]
    for problem in problems:
        lab.deposit(problem)
    seen = damage_and_reindex(session, lab.store.root, tmp_path / "runs", problems)
    advice = f"`graftbench store reindex --store {lab.store.root}`"
    for error in (seen.open_error, seen.eval_error):
        assert error is not None and str(lab.store.index_path) in str(error) and advice in str(error)
    assert seen.rows_after == seen.rows_before and len(seen.rows_after) == 2 and seen.skipped == []
    result = run_eval(session, problems, "faults", "reindexed", EvalSettings(max_new_tokens=4, graft=True),
                      runs_root=tmp_path / "runs", store_root=lab.store.root)
    assert [s.mode for s in result.samples] == ["graft", "graft"]


def test_a_second_process_resuming_a_run_is_refused_naming_the_holder(session, tmp_path):
    # 12 problems: the solve process holds the run while it solves them, the window in which this process's resume
    # must find it held; with 4 a loaded machine could let the solve finish first
    path = write_problem_set(tmp_path / "set.jsonl", [tiny_problem(i) for i in range(12)])
    seen = resume_while_another_runs(session, path, tmp_path / "runs", "shared")
    assert isinstance(seen.error, RunError)
    assert str(seen.error).startswith(f"run 'shared' is in use by pid {seen.holder_pid} on ")
    assert str(seen.error).endswith("; wait for it or stop it")
    after = lines_of(seen.after)
    assert after[: len(lines_of(seen.at_kill))] == lines_of(seen.at_kill)
    assert [json.loads(line)["problem_id"] for line in after] == [f"tiny-{i}" for i in range(12)]
    assert not seen.run.owner_path.exists()  # released at the end of the resume


def test_opening_the_store_cleans_a_killed_writers_temporary_file_and_keeps_a_live_ones(session, tmp_path):
    lab = Lab(session, Store(tmp_path / "store"))
    seen = clean_after_a_killed_write(lab.store.root, lab.build(tiny_problem(420))[0], tmp_path / "payloads")
    assert seen.exit_code == -signal.SIGKILL
    assert len(seen.before) == 2 and len(seen.removed) == 1
    assert seen.left == sorted(set(seen.before) - set(seen.removed))
    assert lab.store.temporaries() == [] and lab.store.ids() == []


# ----------------------------------------------------------------------------------------- damaged run folders


def test_a_damaged_samples_line_is_a_clear_error_naming_the_file_and_line(tmp_path):
    run = RunDir(tmp_path, "r")
    run.open({"a": 1})
    run.append({"problem_id": "p1"})
    run.append({"problem_id": "p2"})
    data = run.samples_path.read_bytes()
    run.samples_path.write_bytes(data.replace(b'"p1"', b'"p1\xff'))
    with pytest.raises(RunError, match=rf"{re.escape(str(run.samples_path))}: line 1 is not a sample"):
        run.read_samples()
    run.samples_path.write_bytes(data + b"[1, 2]\n")
    with pytest.raises(RunError, match="line 3 is not a sample"):
        run.read_samples()
    (run.path / "run.json").write_text("{not json")
    with pytest.raises(RunError, match="run.json is not valid JSON"):
        run.open({"a": 1})


def test_outputs_with_unicode_line_separators_survive_a_resume(tmp_path):
    """Each sample is one JSON line split on b'\\n' only: U+2028, U+0085 and form feeds inside outputs stay."""
    with RunDir(tmp_path, "r") as run:
        run.open({"a": 1})
        odd = "a\u2028b\u2029c\x85d\x0ce\x1cf"
        run.append({"problem_id": "p1", "output": odd})
        run.append({"problem_id": "p2", "output": "x"})
    with RunDir(tmp_path, "r") as resumed:
        assert [s.get("output") for s in resumed.open({"a": 1})] == [odd, "x"]
