"""The kind of CPU guards the store: each deposit keeps a writer record (its kind of CPU and pin) beside the artifact,
outside its bytes; an artifact of a pin not proven portable is grafted only on a kind that wrote it (refused with
the reason ``cpu`` elsewhere, ``--strict`` fails, ``store ls`` shows the kinds); pin-mismatch messages name the
engine and each differing field in its own terms, with the option that fixes it; a graft run that grafted nothing
says so in its summary and manifest."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest
import torch
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.engine.pin_terms import pin_differences
from graftbench.eval.preflight import PreflightError, store_notes
from graftbench.settings import EvalSettings
from graftbench.store import writers
from graftbench.store.codec import encode_artifact
from graftbench.store.folder import Store, reindex_folder_store
from graftbench.store.ids import artifact_id_of
from graftbench.store.writers import WRITERS_DIR, kind_refusal, this_kind

runner = CliRunner()
OTHER_KIND = {"cpu_model": "Another Vendor CPU 9000", "cpu_capability_native": "AVX2", "cpu_kernel_flags": []}


def _artifact(tokens: int = 4, fingerprint: str = "c" * 64, model: str = "smollm2-135m") -> bytes:
    """A small valid artifact (no model) under the pin ``fingerprint``."""
    generator = torch.Generator().manual_seed(tokens)
    layers = [(torch.randn(1, 2, tokens, 4, generator=generator), torch.randn(1, 2, tokens, 4, generator=generator))]
    header = {"config_fingerprint": fingerprint, "positions": [0, tokens], "dtype": "float32", "kv_heads": 2,
              "head_dim": 4, "layers": [{"kind": "full", "seen": tokens, "kept": tokens}], "parent": None,
              "problem_key": f"key-{tokens}", "problem_text": f"problem {tokens}", "answer": "7", "source": "reference",
              "model": model}
    return encode_artifact(header, torch.arange(tokens), layers)


def present_as_written_on(store_root: Path, kind: dict | None) -> None:
    """Rewrite every writer record of the folder store at ``store_root`` to name the CPU ``kind`` (``None``: remove
    the records, as a store deposited before they were kept), then rebuild its index from the files."""
    for path in sorted((store_root / WRITERS_DIR).iterdir()):
        record = json.loads(path.read_bytes())
        path.unlink()
        if kind is not None:
            record["cpu"] = kind
            data = writers.record_bytes(record["artifact"], kind, record["pin"])
            (path.parent / writers.record_name(record["artifact"], data)).write_bytes(data)
    report, _ = reindex_folder_store(store_root)
    assert not report.skipped, report.skipped


# ---- the records and the guard, no model ---------------------------------------------------------------------------

def test_a_deposit_records_this_kind_and_its_pin_outside_the_bytes_and_reindex_reads_them_back(tmp_path):
    store = Store(tmp_path / "s")
    data = _artifact()
    artifact_id = store.put(data, pin={"threads": 2})
    assert artifact_id == artifact_id_of(data)  # the id is the SHA-256 of the bytes alone
    assert store.path(artifact_id).read_bytes() == data  # the record is not in the artifact's bytes
    records = sorted((store.root / WRITERS_DIR).iterdir())
    assert [p.name.split(".")[0] for p in records] == [artifact_id]
    assert store.writer_kinds(artifact_id) == [this_kind()]
    assert store.recorded_pins() == {"c" * 64: {"threads": 2}}
    store.put(data, pin={"threads": 2})  # the same deposit again: the same record, no second file
    assert sorted((store.root / WRITERS_DIR).iterdir()) == records
    (store.root / "index.sqlite").unlink()
    reindex_folder_store(store.root)
    assert Store(store.root, readonly=True).writer_kinds(artifact_id) == [this_kind()]


def test_equal_bytes_written_on_two_kinds_record_both(tmp_path, monkeypatch):
    store = Store(tmp_path / "s")
    artifact_id = store.put(_artifact())
    monkeypatch.setattr(writers, "this_kind", lambda: OTHER_KIND)
    assert store.put_reporting(_artifact()) == (artifact_id, False)  # one copy of the bytes, a second record
    assert {k["cpu_model"] for k in store.writer_kinds(artifact_id)} == {OTHER_KIND["cpu_model"],
                                                                         this_kind()["cpu_model"]}


def test_an_unreadable_writer_record_is_named_by_reindex_and_left_in_place(tmp_path):
    store = Store(tmp_path / "s")
    artifact_id = store.put(_artifact())
    bad = store.root / WRITERS_DIR / f"{artifact_id}.{'0' * 16}.json"
    bad.write_text('{"format": "graftbench.writer/1", "artifact": "not this one"}')
    report, _ = reindex_folder_store(store.root)
    assert [name for name, _ in report.skipped] == [f"{WRITERS_DIR}/{bad.name}"] and bad.exists()
    assert store.writer_kinds(artifact_id) == [this_kind()]


def test_the_guard_grafts_only_on_a_kind_that_wrote_it_unless_the_pin_is_proven_portable(monkeypatch):
    here = this_kind()
    assert kind_refusal("p" * 64, [here], here, assume_kind=False) is None
    refusal = kind_refusal("p" * 64, [OTHER_KIND], here, assume_kind=True)  # --assume-kind covers no record only
    assert "written on another kind of CPU (Another Vendor CPU 9000" in refusal and "not proven portable" in refusal
    assert "records no kind of CPU" in kind_refusal("p" * 64, [], here, assume_kind=False)
    assert "--assume-kind" in kind_refusal("p" * 64, [], here, assume_kind=False)
    assert kind_refusal("p" * 64, [], here, assume_kind=True) is None
    monkeypatch.setattr(writers, "PORTABLE_PINS", MappingProxyType({"p" * 64: "replays of both kinds"}))
    assert writers.kind_refusal("p" * 64, [OTHER_KIND], here, assume_kind=False) is None  # the guard unchanged


def test_no_pin_is_declared_portable_yet():
    assert dict(writers.PORTABLE_PINS) == {}


def test_store_ls_shows_the_kinds_that_wrote_the_artifacts(tmp_path):
    store = Store(tmp_path / "s")
    store.put(_artifact(4)), store.put(_artifact(5))
    shown = runner.invoke(app, ["store", "ls", "--store", str(store.root)])
    assert shown.exit_code == 0, shown.output
    assert f"written on {writers.describe_cpu(this_kind())}: 2 artifact(s)" in " ".join(shown.output.split())
    present_as_written_on(store.root, None)
    shown = " ".join(runner.invoke(app, ["store", "ls", "--store", str(store.root)]).output.split())
    assert "no kind of CPU recorded: 2 artifact(s), grafted only under --assume-kind" in shown


# ---- pin-mismatch messages in the engine's own terms ---------------------------------------------------------------

TORCH_PIN = {"model": "smollm2-135m", "weights_sha256": "a" * 64, "tokenizer_sha256": "b" * 64, "dtype": "float32",
             "device": "cpu", "threads": 2, "chunk_size": 64, "isa": "native", "libraries": {"torch": "2.13.0"}}
LLAMA_PIN = {"model": "smollm2-135m", "weights_sha256": "a" * 64, "dtype": "gguf", "threads": 2, "chunk_size": 64,
             "engine": {"engine": "llama.cpp", "type_k": "q8_0", "type_v": "q8_0", "n_batch": 64, "flash_attn": True}}


def test_a_torch_pin_difference_names_the_field_and_the_option_that_fixes_it():
    run = {**TORCH_PIN, "threads": 1, "libraries": {"torch": "2.12.0"}}
    assert pin_differences(TORCH_PIN, run, ray=True) == [
        "library versions (install the versions shown): torch 2.13.0 (this run 2.12.0)",
        "torch threads 2 (this run 1: pass --worker-threads 2)"]
    assert pin_differences(TORCH_PIN, {**TORCH_PIN, "threads": 1}) == [
        "torch threads 2 (this run 1: set OMP_NUM_THREADS=2 in the environment)"]
    assert pin_differences(TORCH_PIN, {**TORCH_PIN, "chunk_size": 32}) == [
        "chunk size (tokens per prefill forward) 64 (this run 32: pass --chunk-size 64)"]


def test_a_llama_cpp_store_is_explained_in_llama_cpp_terms_and_another_engine_is_not_a_dtype():
    both = pin_differences(LLAMA_PIN, TORCH_PIN)
    assert both == ["engine llama.cpp (this run torch: pass --engine llama.cpp)"]
    assert not any("gguf" in line or "float32" in line for line in both)
    other = {**LLAMA_PIN, "engine": {**LLAMA_PIN["engine"], "type_k": "f16", "type_v": "f16", "flash_attn": False}}
    assert pin_differences(LLAMA_PIN, other) == ["flash attention True (this run False: pass --flash-attn)",
                                                 "KV cache type q8_0 (this run f16: pass --kv-type q8_0)"]
    assert pin_differences(LLAMA_PIN, {**LLAMA_PIN, "chunk_size": 32}) == [
        "n_batch = n_ubatch (tokens per llama_decode call) 64 (this run 32: pass --chunk-size 64)"]


def test_the_preflight_names_the_thread_count_before_the_model_loads_and_strict_refuses(tmp_path):
    store = Store(tmp_path / "s")
    store.put(_artifact(), pin={**TORCH_PIN})
    known = {"model": "smollm2-135m", "threads": 1, "isa": "native", "chunk_size": 64}
    notes = store_notes(store, "s", known, None, None, ray=True)
    assert len(notes) == 1 and "none under this run's torch smollm2-135m" in notes[0]
    assert "torch threads 2 (this run 1: pass --worker-threads 2)" in notes[0]
    assert "run with the pin above" not in notes[0]
    assert store_notes(store, "s", {**known, "threads": 2}, None, None, ray=True) == []  # it may hold this pin
    from graftbench.eval.preflight import preflight

    with pytest.raises(PreflightError, match=r"--strict: .*torch threads 2.*nothing was run"):
        preflight(store.root, known, None, None, EvalSettings(graft=True, strict=True), ray=True)


def test_the_preflight_says_when_no_artifact_of_the_pin_was_written_on_this_kind(tmp_path):
    store = Store(tmp_path / "s")
    store.put(_artifact(), pin={**TORCH_PIN})
    assert store_notes(store, "s", TORCH_PIN, "c" * 64, this_kind()) == []
    present_as_written_on(store.root, OTHER_KIND)
    notes = store_notes(store, "s", TORCH_PIN, "c" * 64, this_kind())
    assert len(notes) == 1 and "none of which may be grafted on this kind of CPU" in notes[0]
    assert "Another Vendor CPU 9000" in notes[0]


def test_a_resume_under_another_thread_count_names_the_thread_count(tmp_path):
    from graftbench.results.runs import RunDir, RunError

    record = {"command": "eval", "config_fingerprint": "a" * 64, "config": {"threads": 2, "dtype": "float32"}}
    with RunDir(tmp_path, "r") as run:
        run.open(record)
    with pytest.raises(RunError, match=r"config_fingerprint: threads 2 \(this run 1\)"):
        with RunDir(tmp_path, "r") as run:
            run.open({**record, "config_fingerprint": "b" * 64, "config": {"threads": 1, "dtype": "float32"}})


def test_a_graft_run_that_grafted_nothing_says_so_and_old_manifests_without_it_still_verify():
    from graftbench.results.manifest import graft_use, graft_use_note

    samples = [{"mode": "baseline", "fallback": "cpu: artifact …"}, {"mode": "baseline", "fallback": None}]
    use = graft_use(samples)
    assert use == {"grafted": 0, "baseline": 2, "fallbacks": {"cpu": 1}, "none_grafted": True}
    note = graft_use_note({"graft_use": use})
    assert "grafted no artifact: all 2 sample(s) ran as the baseline" in note and "1 cpu" in note
    assert graft_use_note({"graft_use": graft_use([{"mode": "graft"}])}) is None
    assert graft_use_note({}) is None  # a manifest written before graft_use


# ---- eval --graft on an artifact presented as written on another kind (the default model) --------------------------

def _problems_file(tmp_path: Path, problems) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps({"id": p.id, "problem": p.problem, "answer": p.answer,
                                        "solution": p.solution}) + "\n" for p in problems))
    return path


@pytest.fixture()
def other_kind_store(session, tmp_path):
    """A store holding two deposits of the default model, presented as written on another kind of CPU."""
    from graftbench.eval.deposit import deposit_items, items_from_problems
    from graftbench.faults.catalogue import tiny_problem

    problems = [tiny_problem(700), tiny_problem(701)]
    store = Store(tmp_path / "store")
    report = deposit_items(session, store, items_from_problems(problems))
    assert len(report.deposited) == 2
    present_as_written_on(store.root, OTHER_KIND)
    return store, problems


def test_eval_graft_refuses_an_artifact_of_another_kind_and_records_the_fallback_with_its_reason(
        session, other_kind_store, tmp_path):
    from graftbench.eval.eval_run import run_eval
    from graftbench.results.manifest import verify_manifest

    store, problems = other_kind_store
    settings = EvalSettings(max_new_tokens=4, graft=True)
    result = run_eval(session, problems, "tiny", "other-kind", settings, runs_root=tmp_path / "runs",
                      store_root=store.root)
    assert [s.mode for s in result.samples] == ["baseline", "baseline"]
    assert all(s.fallback.startswith("cpu: ") and "another kind of CPU" in s.fallback for s in result.samples)
    assert result.manifest["graft_use"] == {"grafted": 0, "baseline": 2, "fallbacks": {"cpu": 2},
                                            "none_grafted": True}
    assert verify_manifest(result.run.manifest_path)[0] == []

    present_as_written_on(store.root, None)  # no kind recorded: refused, then grafted under --assume-kind
    result = run_eval(session, problems, "tiny", "no-kind", settings, runs_root=tmp_path / "runs",
                      store_root=store.root)
    assert all("records no kind of CPU" in s.fallback for s in result.samples)
    assumed = run_eval(session, problems, "tiny", "assumed", EvalSettings(max_new_tokens=4, graft=True,
                                                                          assume_kind=True),
                       runs_root=tmp_path / "runs", store_root=store.root)
    assert [s.mode for s in assumed.samples] == ["graft", "graft"]
    assert assumed.manifest["graft_use"]["none_grafted"] is False and assumed.manifest["settings"]["assume_kind"]


def test_eval_graft_strict_refuses_an_artifact_of_another_kind_with_a_clear_message(session, other_kind_store,
                                                                                     tmp_path):
    from graftbench.eval.evaluate import StrictFallbackError
    from graftbench.eval.eval_run import run_eval

    store, problems = other_kind_store
    with pytest.raises(StrictFallbackError, match="cpu check failed: it was written on another kind of CPU"):
        run_eval(session, problems, "tiny", "strict", EvalSettings(max_new_tokens=4, graft=True, strict=True),
                 runs_root=tmp_path / "runs", store_root=store.root)
    result = runner.invoke(app, ["eval", "--graft", "--strict", "--store", str(store.root), "--problems",
                                 str(_problems_file(tmp_path, problems)), "--max-new-tokens", "4",
                                 "--chunk-size", str(session.config.chunk_size), "--runs-dir", str(tmp_path / "cli")])
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert "--strict:" in out and "none of which may be grafted on this kind of CPU" in out
    assert "Another Vendor CPU 9000" in out and "nothing was run" in out


def test_a_store_on_object_storage_keeps_the_records_as_objects_that_another_machine_reads(tmp_path, monkeypatch):
    from graftbench.store.object_store import CACHE_ENV
    from graftbench.store.open import open_store, reindex_store

    url = f"file://{tmp_path}/url-store"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "depositor-cache"))
    artifact_id = open_store(url).put(_artifact(), pin={"threads": 1})
    assert [p.name.split(".")[0] for p in (tmp_path / "url-store" / WRITERS_DIR).iterdir()] == [artifact_id]
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "worker-cache"))  # another machine: an index from the objects alone
    worker = open_store(url, readonly=True)
    assert worker.writer_kinds(artifact_id) == [this_kind()]
    assert worker.recorded_pins() == {"c" * 64: {"threads": 1}}
    report, _ = reindex_store(url)
    assert report.skipped == [] and open_store(url, readonly=True).writer_kinds(artifact_id) == [this_kind()]
