"""The store and run folders without a model (issue #11): temporary files of killed writers are cleaned, never a
live writer's; a run folder is locked against a second process; a missing or damaged index is a clear error and
``store reindex`` rebuilds it from the files; a failed deposit never leaves the index naming a missing file; swapped
files are refused; read-only commands create nothing; a store that does not exist is refused unless asked for."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from graftbench.store.codec import ArtifactError, encode_artifact
from graftbench.store.ids import artifact_id_of
from graftbench.problems.builtin import builtin_problems
from graftbench.cli.app import app
from graftbench.util.durable import clean_temporaries, locked_temp
from graftbench.faults.harness import IMPORT_ROOT, FullIndex, put_in_subprocess, write_payloads
from graftbench.results.manifest import ManifestError
from graftbench.problems.types import Problem
from graftbench.results.runs import RunDir, RunError
from graftbench.results.samples import Sample
from graftbench.settings import EvalSettings
from graftbench.store.folder import Store
from graftbench.store.index import StoreError
from graftbench.store.open import clean_store, reindex_store, require_store
from graftbench.eval.deposit_plan import deposit_plan
from graftbench.eval.eval_run import run_eval

from tests.conftest import AIME2024, REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
LAYERS, HEADS, DIM = 2, 2, 4


def artifact(answer: str, tokens: int = 5, text: str | None = None) -> bytes:
    """A small valid artifact (no model): routable by ``problem_key`` ``key-<answer>`` and its problem text."""
    generator = torch.Generator().manual_seed(tokens)
    layers = [(torch.randn(1, HEADS, tokens, DIM, generator=generator),
               torch.randn(1, HEADS, tokens, DIM, generator=generator)) for _ in range(LAYERS)]
    header = {"config_fingerprint": "c" * 64, "positions": [0, tokens], "dtype": "float32", "kv_heads": HEADS,
              "head_dim": DIM, "layers": [{"kind": "full", "seen": tokens, "kept": tokens}] * LAYERS, "parent": None,
              "problem_key": f"key-{answer}", "problem_text": text or f"what is the number {answer} plus zero",
              "answer": answer, "source": "reference"}
    return encode_artifact(header, torch.arange(tokens), layers)


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def hold(code: str, *args) -> subprocess.Popen:
    """Start ``python -c code args`` that prints ``HELD`` once it holds what it takes, then sleeps."""
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, text=True,
                            cwd=IMPORT_ROOT)
    assert proc.stdout.readline().strip() == "HELD"
    return proc


def kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(60)


WRITING_CODE = """
import sys, time
from pathlib import Path
from graftbench.util.durable import locked_temp
fd, path = locked_temp(Path(sys.argv[1]))
print(path.name, flush=True)
print("HELD", flush=True)
time.sleep(600)
"""

RUN_CODE = """
import sys, time
from graftbench.results.runs import RunDir
run = RunDir(sys.argv[1], sys.argv[2])
run.open({"a": 1})
print("HELD", flush=True)
time.sleep(600)
"""

PUT_AFTER_READY = """
import sys
from graftbench.store.folder import Store
store = Store(sys.argv[1])
print("READY", flush=True)
store.put(open(sys.argv[2], "rb").read())
"""

# ----------------------------------------------------------------------------------------- temporary files


def test_cleaning_removes_a_dead_writers_temporary_file_and_never_a_live_one(tmp_path):
    stale = tmp_path / ".tmp-stale"
    stale.write_bytes(b"half an artifact")
    proc = subprocess.Popen([sys.executable, "-c", WRITING_CODE, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            cwd=IMPORT_ROOT)
    live = tmp_path / proc.stdout.readline().strip()
    assert proc.stdout.readline().strip() == "HELD"
    (tmp_path / "kept.json").write_text("{}")
    assert clean_temporaries(tmp_path) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "kept.json"])
    kill(proc)  # the kernel drops its lock: now it is a dead writer's file
    assert clean_temporaries(tmp_path) == [live]
    assert [p.name for p in tmp_path.iterdir()] == ["kept.json"]


def test_a_temporary_file_removed_before_its_writer_locks_it_is_replaced(tmp_path, monkeypatch):
    """The window between mkstemp and flock: a cleaner that takes the file there makes the writer take another."""
    import tempfile

    real, calls = tempfile.mkstemp, []

    def racing_mkstemp(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        calls.append(name)
        if len(calls) == 1:
            assert clean_temporaries(tmp_path) == [Path(name)]  # not locked yet: removable
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", racing_mkstemp)
    fd, path = locked_temp(tmp_path)
    try:
        assert len(calls) == 2 and path == Path(calls[1]) and path.exists()
        assert clean_temporaries(tmp_path) == []
    finally:
        os.close(fd)


def test_a_deposit_killed_before_its_rename_is_cleaned_when_the_store_is_opened(tmp_path):
    store = Store(tmp_path / "store")
    kept = store.put(artifact("1"))
    proc = put_in_subprocess(store.root, write_payloads(tmp_path / "payloads", [artifact("2")]),
                             fault="deposit-before-rename")
    assert proc.wait(120) == -signal.SIGKILL
    (left,) = store.temporaries()
    reopened = Store(store.root)
    assert reopened.cleaned == [store.artifacts / left]
    assert reopened.temporaries() == [] and reopened.ids() == [kept] and reopened.verify() == []


def test_store_clean_and_run_open_remove_only_dead_writers_files(tmp_path):
    store = Store(tmp_path / "store")
    (store.artifacts / ".tmp-dead").write_bytes(b"x")
    writer = hold(WRITING_CODE.replace('print(path.name, flush=True)\n', ''), store.artifacts)
    try:
        result = runner.invoke(app, ["store", "verify", "--store", str(store.root)])
        assert result.exit_code == 0 and "2 temporary file(s)" in result.output
        result = runner.invoke(app, ["store", "clean", "--store", str(store.root)])
        assert result.exit_code == 0 and f"{store.artifacts / '.tmp-dead'}" in result.output
        assert f"{store.root}: 1 temporary file(s) removed" in result.output
        (live,) = store.temporaries()  # the live writer's
    finally:
        kill(writer)
    assert clean_store(store.root) == [store.artifacts / live]

    run = RunDir(tmp_path / "runs", "r")
    run.path.mkdir(parents=True)
    (run.path / ".tmp-manifest").write_bytes(b"{")
    with run:
        run.open({"a": 1})
        assert run.cleaned == [run.path / ".tmp-manifest"]
    assert sorted(p.name for p in run.path.iterdir()) == ["run.json", "run.lock"]


def test_a_cleaner_running_all_the_time_never_breaks_a_deposit(tmp_path):
    """A process deposits 24 artifacts three times over while this one cleans the store in a loop."""
    store = Store(tmp_path / "store")
    data = [artifact(str(i), tokens=3 + i % 4) for i in range(24)]
    proc = put_in_subprocess(store.root, write_payloads(tmp_path / "payloads", data), rounds=3)
    removed = []
    while proc.poll() is None:
        removed += clean_store(store.root)
    assert proc.wait() == 0 and removed == []
    inv = store.inventory()
    assert inv["indexed"] == inv["intact"] == sorted(artifact_id_of(d) for d in data)
    assert inv["temporaries"] == inv["missing"] == inv["damaged"] == []

# ----------------------------------------------------------------------------------------- run lock


def test_a_run_held_by_another_process_is_refused_naming_it_until_that_process_dies(tmp_path):
    proc = hold(RUN_CODE, tmp_path, "r")
    try:
        with pytest.raises(RunError) as info:
            RunDir(tmp_path, "r").open({"a": 1})
        message = str(info.value)
        assert message.startswith(f"run 'r' is in use by pid {proc.pid} on ")
        assert "(started 20" in message and message.endswith("; wait for it or stop it")
        owner = json.loads((tmp_path / "r" / "run.lock.json").read_text())
        assert owner["pid"] == proc.pid and owner["host"] in message
    finally:
        kill(proc)  # SIGKILL: the lock file stays, but a dead process's lock does not block
    assert (tmp_path / "r" / "run.lock").exists()
    with RunDir(tmp_path, "r") as run:
        assert run.open({"a": 1}) == []
        assert json.loads(run.owner_path.read_text())["pid"] == os.getpid()
    assert not (tmp_path / "r" / "run.lock.json").exists()


def test_a_run_is_locked_against_a_second_open_and_released_on_close(tmp_path):
    first = RunDir(tmp_path, "r")
    first.open({"a": 1})
    assert first.open({"a": 1}) == []  # the holder may reopen
    with pytest.raises(RunError, match=rf"run 'r' is in use by pid {os.getpid()} "):
        RunDir(tmp_path, "r").open({"a": 1})
    first.close()
    second = RunDir(tmp_path, "r")
    with pytest.raises(RunError, match="exists with other settings"):
        second.open({"a": 2})
    with RunDir(tmp_path, "r") as third:  # the refusal above released the lock
        third.open({"a": 1})


def test_eval_refuses_a_run_that_another_process_holds(tmp_path):
    proc = hold(RUN_CODE, tmp_path, "r")
    try:
        with pytest.raises(RunError, match=f"in use by pid {proc.pid}"):
            run_eval(None, [Problem("p", "What is 1+1?", "2")], "x", "r", EvalSettings(), runs_root=tmp_path)
    finally:
        kill(proc)

# ----------------------------------------------------------------------------------------- the index


@pytest.fixture
def filled(tmp_path):
    store = Store(tmp_path / "store")
    ids = [store.put(artifact(str(i), tokens=3 + i)) for i in range(4)]
    return store, ids


@pytest.mark.parametrize("damage", ["garbage", "zero bytes", "truncated"])
def test_a_damaged_index_is_a_clear_error_naming_it_and_advising_reindex(filled, damage):
    store, _ = filled
    index = store.index_path
    raw = index.read_bytes()
    index.write_bytes({"garbage": b"not a database at all" * 100, "zero bytes": b"", "truncated": raw[:1500]}[damage])
    for open_it in (lambda: Store(store.root), lambda: Store(store.root, readonly=True),
                    lambda: Store(store.root, create=False)):
        with pytest.raises(StoreError) as info:
            open_it().ids()
        assert str(index) in str(info.value)
        assert f"`graftbench store reindex --store {store.root}`" in str(info.value)
    result = runner.invoke(app, ["store", "ls", "--store", str(store.root)])
    assert result.exit_code == 2 and "graftbench store reindex" in result.output and "Traceback" not in result.output


def test_a_damaged_index_met_while_reading_is_a_store_error_not_a_refused_artifact(filled):
    store, ids = filled
    store.index_path.write_bytes(b"x" * 4096)
    with pytest.raises(StoreError, match="is damaged"):
        store.read(ids[0])
    with pytest.raises(StoreError, match="is damaged"):
        store.put(artifact("9"))
    assert not store.path(artifact_id_of(artifact("9"))).exists()  # nothing new visible


def test_a_missing_index_is_not_silently_replaced_by_an_empty_one(filled):
    store, _ = filled
    store.index_path.unlink()
    for open_it in (lambda: Store(store.root), lambda: Store(store.root, readonly=True)):
        with pytest.raises(StoreError, match=r"has artifact files but no index .*store reindex --store"):
            open_it()
    assert not store.index_path.exists()


def test_reindex_rebuilds_the_same_index_from_the_files_and_names_what_it_skips(filled):
    store, ids = filled
    orphan = artifact("orphan", tokens=9)  # a complete file never indexed (a deposit killed before its row)
    store.path(artifact_id_of(orphan)).write_bytes(orphan)
    rows_before = store.rows()
    route_before = store.candidates("c" * 64, "what is the number 2 plus zero")
    damaged = store.path(ids[1])
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"\x00")
    (store.artifacts / "notes.txt").write_text("hello")
    bad_header = artifact_id_of(b"not safetensors")
    store.path(bad_header).write_bytes(b"not safetensors")
    store.index_path.write_bytes(b"garbage" * 600)

    report, cleaned = reindex_store(store.root)
    assert cleaned == []
    assert report.indexed == sorted({*ids, artifact_id_of(orphan)} - {ids[1]})
    skipped = dict(report.skipped)
    assert skipped[damaged.name] == "damaged: the SHA-256 of its bytes does not equal its name"
    assert skipped["notes.txt"].startswith("not an artifact file name")
    assert skipped[f"{bad_header}.safetensors"].startswith(f"artifact {bad_header[:16]}: format check failed")
    assert len(skipped) == 3 and damaged.exists() and (store.artifacts / "notes.txt").exists()  # nothing moved

    rebuilt = Store(store.root)
    reference = Store(store.root.parent / "reference")  # the row a deposit of the orphan gives
    reference.put(orphan)
    expected = {r["id"]: r for r in rows_before + reference.rows() if r["id"] != ids[1]}
    assert {r["id"]: r for r in rebuilt.rows()} == expected
    routed = rebuilt.candidates("c" * 64, "what is the number 2 plus zero")
    assert [c for c in routed if c[0] != artifact_id_of(orphan)] == [c for c in route_before if c[0] != ids[1]]
    assert rebuilt.find_exact("c" * 64, "key-orphan") == artifact_id_of(orphan)
    assert [p.name for p in store.root.iterdir() if p.name.startswith(".tmp-")] == []


def test_store_reindex_command(filled):
    store, ids = filled
    store.index_path.unlink()
    result = runner.invoke(app, ["store", "reindex", "--store", str(store.root)])
    assert result.exit_code == 0, result.output
    assert f"reindexed {store.root}: 4 artifact(s) indexed, 0 file(s) skipped" in result.output
    assert Store(store.root, readonly=True).ids() == sorted(ids)

# ----------------------------------------------------------------------------------------- failed writes


def test_a_failed_index_insert_never_removes_a_file_that_another_deposit_indexed(tmp_path):
    """Deposit A's index insert fails (disk full) just as deposit B of the same artifact runs in another process.
    Without the store's write lock B found A's file, indexed it, and A then removed it: an index row naming a
    missing file. With it, B waits for A to finish and its deposit completes."""
    store = Store(tmp_path / "store")
    data = artifact("7")
    paths = write_payloads(tmp_path / "payloads", [data])
    real_connect, other = Store._connect, []

    def start_the_other_deposit():
        other.append(subprocess.Popen([sys.executable, "-c", PUT_AFTER_READY, store.root, paths[0]],
                                      stdout=subprocess.PIPE, text=True, cwd=IMPORT_ROOT))
        assert other[0].stdout.readline().strip() == "READY"
        deadline = time.monotonic() + 2  # a tiny put takes milliseconds, unless it waits for the lock
        while other[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)

    store._connect = lambda: FullIndex(real_connect(store), before_failure=start_the_other_deposit)
    with pytest.raises(OSError, match="No space left|full"):
        store.put(data)
    assert other[0].wait(120) == 0
    inv = Store(store.root).inventory()
    assert inv["indexed"] == inv["intact"] == [artifact_id_of(data)] and inv["missing"] == []


@pytest.mark.parametrize("same_size", [True, False], ids=["same size", "other size"])
def test_swapped_artifact_files_are_both_refused(tmp_path, same_size):
    store = Store(tmp_path / "store")
    a, b = artifact("1"), artifact("2", tokens=5 if same_size else 6)
    id_a, id_b = store.put(a), store.put(b)
    assert (len(a) == len(b)) == same_size
    store.path(id_a).write_bytes(b)
    store.path(id_b).write_bytes(a)
    for artifact_id in (id_a, id_b):
        for read in (store.read, store.read_audited, lambda i: store.read(i, "sha256")):
            with pytest.raises(ArtifactError) as info:
                read(artifact_id)
            assert info.value.artifact_id == artifact_id
            assert info.value.check == ("hash" if same_size else "size")

# ----------------------------------------------------------------------------------------- stores that do not exist


@pytest.mark.parametrize("command", [["store", "ls"], ["store", "verify"], ["store", "clean"], ["store", "reindex"]])
def test_store_commands_on_a_missing_path_create_nothing(tmp_path, command):
    missing = tmp_path / "no-such-store"
    result = runner.invoke(app, [*command, "--store", str(missing)])
    assert result.exit_code == 2
    assert f"no store at {missing}: the folder does not exist" in " ".join(result.output.split())
    assert not missing.exists() and listing(tmp_path) == []


def test_read_only_commands_write_nothing_into_an_existing_store(filled):
    store, _ = filled
    (store.root / ".tmp-left").write_bytes(b"x")
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in store.root.rglob("*")}
    assert runner.invoke(app, ["store", "ls", "--store", str(store.root)]).exit_code == 0
    assert runner.invoke(app, ["store", "verify", "--store", str(store.root)]).exit_code == 0
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in store.root.rglob("*")} == before


def test_verify_manifest_with_a_missing_store_creates_nothing(tmp_path):
    missing = tmp_path / "no-such-store"
    manifest = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-recurring.json"
    result = runner.invoke(app, ["verify-manifest", str(manifest), "--store", str(missing)], env={"COLUMNS": "400"})
    assert result.exit_code == 2 and f"{missing}: no such folder" in result.output
    assert not missing.exists()


def test_a_graft_eval_on_a_store_that_does_not_exist_is_refused_unless_asked(tmp_path):
    missing = tmp_path / "nostore"
    problems = [Problem("p", "What is 1+1?", "2")]
    with pytest.raises(StoreError) as info:
        run_eval(None, problems, "x", "g", EvalSettings(graft=True), runs_root=tmp_path / "runs", store_root=missing)
    assert info.value.missing and str(missing) in str(info.value)
    assert not missing.exists() and not (tmp_path / "runs").exists()
    with pytest.raises(StoreError, match="not a graftbench store"):
        (tmp_path / "empty").mkdir()
        require_store(tmp_path / "empty")
    result = runner.invoke(app, ["eval", "--graft", "--store", str(missing), "--problems", "builtin", "--limit", "1"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and f"no store at {missing}" in text and "--new-store" in text
    assert not missing.exists()
    created = Store(missing, create=True)  # what --new-store asks for
    assert created.ids() == [] and (missing / "index.sqlite").exists()

# ----------------------------------------------------------------------------------------- check-exact, deposit


def test_check_exact_on_a_set_without_solutions_names_the_file(tmp_path):
    path = tmp_path / "answers-only.jsonl"
    path.write_text('{"id": "a", "problem": "What is 1+1?", "answer": "2"}\n')
    result = runner.invoke(app, ["check-exact", "--problems", str(path), "--samples", "2"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{path}: none of its 1 problems has a solution (no 'solution' field)" in text


def test_check_exact_journals_each_pair_and_a_rerun_resumes(tmp_path):
    args = ["check-exact", "--problems", str(AIME2024), "--runs-dir", str(tmp_path)]
    first = runner.invoke(app, args + ["--samples", "1"])
    assert first.exit_code == 0, first.output
    [run] = list(tmp_path.iterdir())
    assert run.name.startswith("exact-smollm2-135m-float32-") and len((run / "samples.jsonl").read_text().splitlines()) == 1
    again = runner.invoke(app, args + ["--samples", "2"])
    text = " ".join(again.output.split())
    assert again.exit_code == 0 and f"resuming {run}: 1 pair records already measured under this pin" in text
    assert "2 of 2 pairs byte-exact" in text
    lines = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == ["pair-000", "pair-001"]  # pair-000 was not measured twice
    assert json.loads((run / "exactness.json").read_text())["pairs"] == lines


def test_check_exact_extends_a_committed_expectation_without_measuring_its_pairs_again(tmp_path):
    expectation = tmp_path / "exact.json"
    args = ["check-exact", "--problems", str(AIME2024)]
    first = runner.invoke(app, args + ["--samples", "1", "--runs-dir", str(tmp_path / "a"), "--write-expect",
                                       str(expectation)])
    assert first.exit_code == 0, first.output
    recorded = json.loads(expectation.read_text())["pairs"]
    longer = runner.invoke(app, args + ["--samples", "2", "--runs-dir", str(tmp_path / "b"), "--extend",
                                        str(expectation), "--write-expect", str(expectation)])
    text = " ".join(longer.output.split())
    assert longer.exit_code == 0, longer.output
    assert f"extending {expectation}: 1 pair records from it (each reused when its pair's tokens and controls " \
        "match), 1 new pairs" in text
    [run] = list((tmp_path / "b").iterdir())
    assert [json.loads(line)["id"] for line in (run / "samples.jsonl").read_text().splitlines()] == ["pair-001"]
    assert json.loads(expectation.read_text())["pairs"][:1] == recorded and "2 of 2 pairs byte-exact" in text
    fewer = runner.invoke(app, args + ["--samples", "1", "--extend", str(expectation), "--runs-dir", str(tmp_path)])
    assert fewer.exit_code == 2 and "1 pairs asked for, fewer than the expectation's 2" in " ".join(fewer.output.split())
    missing = runner.invoke(app, args + ["--samples", "2", "--extend", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and f"manifest '{tmp_path / 'none.json'}' does not exist" in " ".join(missing.output.split())
    assert "model smollm2-135m:" not in missing.output  # refused before the model loads


def _sample(problem_id: str, correct: bool) -> Sample:
    values = {f.name: None for f in dataclasses.fields(Sample)}
    values.update(problem_id=problem_id, correct=correct, output="Final answer: 2", key="2")
    return Sample(**values)


def test_the_deposit_plan_counts_only_what_will_be_offered(tmp_path):
    problems = [Problem("a", "What is 1+1?", "2", "1+1=2. Final answer: 2"), Problem("b", "What is 1+2?", "3"),
                Problem("c", "What is 2+0?", "2")]
    with RunDir(tmp_path, "solve") as run:
        run.open({"a": 1})
        for sample in (_sample("b", False), _sample("c", True), _sample("elsewhere", True), _sample("a", True)):
            run.append(sample.to_json())
    plan = deposit_plan(problems, references=True, from_run=run)
    assert [(item.problem.id, item.source) for item in plan] == [("a", "reference"), ("c", "solve:solve"),
                                                                 ("a", "solve:solve")]
    assert len(deposit_plan(problems[:1], references=False, from_run=run)) == 1


LIBRARY_MANIFEST = REFERENCE_MANIFESTS / "transfer-qwen2.5-coder-0.5b-program-library.json"


def test_a_committed_manifest_stands_in_for_its_run_folder_and_a_tampered_one_is_refused(tmp_path):
    problems = builtin_problems(n_per_family=2)
    verified = [s for s in json.loads(LIBRARY_MANIFEST.read_text())["samples"] if s["correct"]]
    plan = deposit_plan(problems, references=False, from_manifest=LIBRARY_MANIFEST)
    assert [(item.problem.id, item.program) for item in plan] == [(s["problem_id"], s["program"]) for s in verified]
    assert len(plan) == 9 and {item.source for item in plan} == {"solve:transfer-qwen2.5-coder-0.5b-program-library"}
    tampered = json.loads(LIBRARY_MANIFEST.read_text())
    wrong = next(s for s in tampered["samples"] if not s["correct"])
    wrong["correct"] = True
    (tmp_path / "tampered.json").write_text(json.dumps(tampered))
    with pytest.raises(ManifestError, match="tampered.json' does not verify"):
        deposit_plan(problems, references=False, from_manifest=tmp_path / "tampered.json")


_MODES_PROBE = """
import os, stat, sys
from pathlib import Path
from graftbench.util.durable import append_json_line, write_file_atomic
folder = Path(sys.argv[1])
write_file_atomic(folder / "manifest.json", b"{}")
append_json_line(folder / "samples.jsonl", {"a": 1}, "a sample")
print(" ".join(oct(stat.S_IMODE(os.stat(folder / name).st_mode)) for name in ("manifest.json", "samples.jsonl")))
"""


@pytest.mark.parametrize("umask, mode", [(0o022, "0o644"), (0o077, "0o600"), (0o002, "0o644")])
def test_atomic_writes_and_appends_give_files_the_same_mode_under_the_umask(umask, mode, tmp_path):
    probe = f"import os; os.umask({umask})\n" + _MODES_PROBE
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(IMPORT_ROOT)}, check=True)
    assert done.stdout.split() == [mode, mode]  # an atomic write's temporary file is not left at mkstemp's 0600
