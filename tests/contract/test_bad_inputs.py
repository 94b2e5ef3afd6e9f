"""Bad inputs: manifests edited in any field, hostile manifests and artifacts under property-based fuzzing through
the whole graft path, problem-set files that ``tests/problems/test_problems.py`` does not already cover, and names that try
to leave their folder. Every one is refused with graftbench's own error naming what is wrong; nothing crashes."""

from __future__ import annotations

import copy
import re
import shutil

import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from graftbench.engine.torch import graft
from graftbench.store.codec import ArtifactError, check_artifact_id
from graftbench.store.ids import artifact_id_of
from graftbench.eval.deposit import deposit_items, items_from_problems
from graftbench.faults.catalogue import (
    MANIFEST_EDITS,
    PROBLEM_SET_FAULTS,
    Lab,
    escaping_artifact_entry,
    mutate,
    split_artifact,
    tiny_problem,
)
from graftbench.faults.scenarios import apply_manifest_edit, problem_set_error, verify_edited_manifest
from graftbench.results.manifest import ManifestError, verify_manifest, write_manifest
from graftbench.problems.loading import load_problems
from graftbench.problems.types import ProblemSetError
from graftbench.results.runs import RunDir, RunError
from graftbench.settings import EvalSettings
from graftbench.store.folder import Store
from graftbench.verify.answers import VERIFIER_VERSION
from graftbench.eval.eval_run import run_eval

# ----------------------------------------------------------------------------------------- manifests


@pytest.fixture(scope="module")
def graft_run(session, tmp_path_factory):
    """A certified graft eval over two deposited problems: a manifest with every kind of field filled in."""
    root = tmp_path_factory.mktemp("manifests")
    problems = [tiny_problem(i) for i in range(2)]
    deposit_items(session, Store(root / "store"), items_from_problems(problems))
    result = run_eval(session, problems, "builtin", "g", EvalSettings(max_new_tokens=6, graft=True, certify=True),
                      runs_root=root, store_root=root / "store")
    assert all(s.mode == "graft" and s.certified for s in result.samples)
    return root, result


def _verify_edited(root, manifest, name="edited.json"):
    return verify_edited_manifest(manifest, root / name, root / "store")  # re-serialized, NOT re-sealed


def test_the_graft_manifest_verifies_untouched(graft_run):
    root, result = graft_run
    mismatches, notes = verify_manifest(result.run.manifest_path, store=root / "store")
    assert mismatches == []
    assert notes == [f"2 samples re-verified under verifier {VERIFIER_VERSION}; 2 artifact payloads checked against {root / 'store'}"]
    mismatches, notes = verify_manifest(result.run.manifest_path)  # the store the manifest records is not read
    assert mismatches == []
    assert notes == [f"2 samples re-verified under verifier {VERIFIER_VERSION}; 2 artifact payloads not checked (no "
                     "store given with --store)"]


def test_an_artifact_the_store_does_not_hold_is_not_checked_unless_required(graft_run, tmp_path):
    root, result = graft_run
    other = tmp_path / "other-store"
    (other / "artifacts").mkdir(parents=True)  # a store, but not the one the run deposited into
    mismatches, notes = verify_manifest(result.run.manifest_path, store=other)
    assert mismatches == []
    assert notes[0] == f"2 samples re-verified under verifier {VERIFIER_VERSION}; 0 artifact payloads checked against {other}, 2 not checked (absent from the store)"
    mismatches, _ = verify_manifest(result.run.manifest_path, store=other, require_artifacts=True)
    assert len(mismatches) == 2 and all(m.endswith(f"absent from store {other}") for m in mismatches)
    mismatches, notes = verify_manifest(result.run.manifest_path, store=tmp_path / "nowhere")
    assert mismatches == [] and notes[0].endswith(f"2 artifact payloads not checked (no store at {tmp_path / 'nowhere'})")
    assert verify_manifest(result.run.manifest_path, store=tmp_path / "nowhere", require_artifacts=True)[0] == [
        f"artifacts: 2 required but no store at {tmp_path / 'nowhere'}"]


def test_an_artifact_the_store_holds_with_other_bytes_is_a_mismatch(graft_run, tmp_path):
    root, result = graft_run
    held = tmp_path / "held-store"
    shutil.copytree(root / "store", held)
    first = sorted((held / "artifacts").glob("*.safetensors"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 1
    first.write_bytes(bytes(data))
    mismatches, notes = verify_manifest(result.run.manifest_path, store=held)
    assert mismatches == [f"artifact {first.stem[:16]}: payload SHA-256 differs from the manifest"]
    assert notes[0].endswith(f"2 artifact payloads checked against {held}")


def test_verify_manifest_cli_tells_absent_from_different(graft_run, tmp_path):
    from typer.testing import CliRunner

    from graftbench.cli.app import app

    root, result = graft_run
    (tmp_path / "empty" / "artifacts").mkdir(parents=True)
    args = ["verify-manifest", str(result.run.manifest_path), "--store", str(tmp_path / "empty"),
            "--allow-unanchored"]  # tiny hand-made problems, recorded under the name builtin: not anchored
    unchecked = CliRunner().invoke(app, args)
    assert unchecked.exit_code == 4 and "2 not checked (absent from the store)" in unchecked.output
    accepted = CliRunner().invoke(app, args + ["--allow-unchecked-payloads"])
    assert accepted.exit_code == 0 and "verified, except" in accepted.output
    required = CliRunner().invoke(app, args + ["--require-artifacts"])
    assert required.exit_code == 1 and "2 mismatch(es)" in required.output


@pytest.mark.parametrize("name, edit", MANIFEST_EDITS, ids=[name for name, _ in MANIFEST_EDITS])
def test_changing_any_field_fails_verification_and_names_it(graft_run, name, edit):
    root, result = graft_run
    expected, mismatches = apply_manifest_edit(result.manifest, edit, root / "edited.json", root / "store")
    assert any(expected in line for line in mismatches), mismatches
    assert "manifest_sha256 does not match the manifest's content" in mismatches


def test_a_resealed_edit_of_a_derived_value_is_still_caught(graft_run):
    """A forger who recomputes manifest_sha256 and the sealed field digests is still caught by the re-derivations."""
    from graftbench.results.manifest import seal_sha256, sealed_fields

    root, result = graft_run
    manifest = copy.deepcopy(result.manifest)
    manifest["totals"]["correct"] += 1
    manifest["config_fingerprint"] = "0" * 64
    body = {k: v for k, v in manifest.items() if k not in ("manifest_sha256", "sealed_fields")}
    manifest["sealed_fields"] = sealed_fields(body)
    manifest["manifest_sha256"] = seal_sha256({**body, "sealed_fields": manifest["sealed_fields"]})
    mismatches = _verify_edited(root, manifest)
    assert [m.split(":")[0] for m in mismatches] == ["totals.correct", "config_fingerprint"]


def test_an_older_manifest_without_sealed_fields_still_verifies(graft_run):
    from graftbench.results.manifest import seal_sha256

    root, result = graft_run
    manifest = {k: v for k, v in result.manifest.items() if k not in ("sealed_fields", "manifest_sha256")}
    manifest["manifest_sha256"] = seal_sha256(manifest)
    path = root / "older.json"
    write_manifest(manifest, path)
    mismatches, notes = verify_manifest(path)
    assert mismatches == [] and notes[-1].startswith("no sealed_fields (an older manifest)")
    manifest["samples"][0]["decode_tokens"] += 1
    write_manifest(manifest, path)
    assert verify_manifest(path)[0][0] == "manifest_sha256 does not match the manifest's content"


@pytest.mark.parametrize("edit, expected", [
    (lambda m: m.update(samples="not a list"), "samples: not a list of objects"),
    (lambda m: m["samples"].append(7), "samples: not a list of objects"),
    (lambda m: m.update(problems=[1, 2]), "problems: not a list of objects"),
    (lambda m: m["samples"].append(copy.deepcopy(m["samples"][0])), "problem_id appears 2 times"),
    (lambda m: m["samples"][0].update(problem_id=["x"]), "problem_id is not among the manifest's problems"),
    (lambda m: m["samples"][0].update(wall_s="slow"), "totals cannot be recomputed"),
    (escaping_artifact_entry, "is not 64 lowercase hex digits"),
    (lambda m: m["artifacts"].append("x"), "artifacts: the list differs"),
    (lambda m: m.update(sealed_fields=[]), "sealed_fields: not a map"),
    (lambda m: m.update(store=5), "store changed"),
], ids=["samples-str", "sample-int", "problems-ints", "duplicate-sample", "list-id", "str-seconds",
        "escaping-artifact", "artifact-str", "digests-list", "store-int"])
def test_malformed_manifest_structures_are_mismatches_not_crashes(graft_run, edit, expected):
    root, result = graft_run
    manifest = copy.deepcopy(result.manifest)
    edit(manifest)
    mismatches = _verify_edited(root, manifest)
    assert any(expected in line for line in mismatches), mismatches


@pytest.mark.parametrize("text, reason", [
    ('{"schema": "graftbench.manifest/1", "x": NaN}', "NaN is not a JSON number"),
    ('{"schema": "graftbench.manifest/1", "x": Infinity}', "Infinity is not a JSON number"),
    ("[" * 100_000 + "]" * 100_000, "is not valid JSON"),
    ('{"schema": "graftbench.manifest/1", "x": ' + "9" * 5000 + "}", "is not valid JSON"),
    ('{"schema": "other"}', "is not a graftbench.manifest/1 or graftbench.manifest/2 document"),
])
def test_unreadable_manifests_raise_manifest_error(tmp_path, text, reason):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(ManifestError, match=re.escape(reason)):
        verify_manifest(path)


def _paths(value, prefix=()):
    """Every path into a JSON value (dict keys and list indices), the value's own included."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_any_edit_to_a_manifest_is_reported_never_a_crash(graft_run, data):
    """Replace or delete the value at any path of a real manifest: verify never raises anything but
    ManifestError, and reports a mismatch other than its own hash (unless the manifest hash itself was edited)."""
    root, result = graft_run
    paths = [p for p in _paths(result.manifest) if p]
    path = data.draw(st.sampled_from(paths), label="path")
    manifest = copy.deepcopy(result.manifest)
    parent = manifest
    for step in path[:-1]:
        parent = parent[step]
    if data.draw(st.booleans(), label="delete"):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JSON_VALUES.filter(lambda v: v != parent[path[-1]]), label="value")
    try:
        mismatches = _verify_edited(root, manifest, "fuzzed.json")
    except ManifestError:
        assert path == ("schema",)
        return
    assert mismatches
    if path not in {("manifest_sha256",), ("sealed_fields",)}:  # without digests: an older manifest, hash only
        assert [m for m in mismatches if not m.startswith("manifest_sha256")], mismatches


# ----------------------------------------------------------------------------------------- artifacts through the graft


@pytest.fixture(scope="module")
def real_artifact(session, tmp_path_factory):
    """A store with one real 12-token artifact of the default model; returns (lab, id, bytes)."""
    lab = Lab(session, Store(tmp_path_factory.mktemp("fuzz-store")))
    problem = tiny_problem(400)
    ids = session.deposit_ids(problem.problem, problem.answer, problem.solution)[:12]
    data, _ = lab.build(problem, ids=ids)
    return lab, lab.store.put(data), data


PINNED_FIELDS = ("positions", "dtype", "kv_heads", "head_dim", "layers", "parent", "format", "chunk_size",
                 "weights_sha256", "tokenizer_sha256", "config_fingerprint", "payload_sha256")
HEADER_VALUES = st.one_of(st.none(), st.integers(-3, 10**6), st.text(max_size=8), st.sampled_from(["bfloat16", "float32", "f" * 64]),
                          st.lists(st.integers(-3, 40), max_size=3),
                          st.lists(st.fixed_dictionaries({"kind": st.sampled_from(["full", "sliding"]),
                                                          "seen": st.integers(0, 40), "kept": st.integers(0, 40)}),
                                   max_size=3))
MUTATIONS = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**9)),
    st.tuples(st.just("cut"), st.integers(0, 10**9)),
    st.tuples(st.just("edit"), st.tuples(st.sampled_from(PINNED_FIELDS), HEADER_VALUES)),
    st.tuples(st.just("swap"), st.tuples(st.integers(0, 29), st.integers(0, 29), st.booleans())),
    st.tuples(st.just("drop"), st.integers(0, 60)),
    st.tuples(st.just("dtype"), st.tuples(st.integers(0, 60), st.sampled_from([torch.bfloat16, torch.float16, torch.float64]))),
)


def _mutate(data: bytes, kind: str, arg) -> bytes | None:
    """Mutated bytes (:func:`graftbench.faults.catalogue.mutate`), or None when the mutation changes nothing."""
    if kind == "edit" and split_artifact(data)[0].get(arg[0]) == arg[1]:
        return None
    return mutate(data, kind, arg)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutation=MUTATIONS)
def test_property_mutated_real_artifacts_never_graft_nor_crash(session, real_artifact, mutation):
    """1,000 mutations of a real artifact (bit flips, cuts, pinned header fields edited, tensors swapped, dropped
    or cast) through the store and the graft: under its id, as the store holds it, it is always refused with ArtifactError, never a cache. Re-hashed and
    renamed (a forgery), it is refused too unless its pinned header fields and payload hash are the original's
    (a flipped bit in, say, the problem text) or it is a tensor swap with a resealed payload hash: a consistent
    forgery that no header check can see (``--certify`` catches it; see tests/faults/test_faults.py)."""
    lab, artifact_id, data = real_artifact
    mutated = _mutate(data, *mutation)
    assume(mutated is not None and mutated != data)  # a mutation that changes nothing is no example: drawn again
    path = lab.store.path(artifact_id)
    path.write_bytes(mutated)
    try:
        with pytest.raises(ArtifactError) as info:
            graft.restore_chain(session.model, session.config, lab.store, artifact_id)
        assert info.value.artifact_id == artifact_id
    finally:
        path.write_bytes(data)
    forged_id = artifact_id_of(mutated)
    forged = lab.store.path(forged_id)
    forged.write_bytes(mutated)
    try:
        cache, _ = graft.restore_chain(session.model, session.config, lab.store, forged_id)
        grafted, original = lab.store.read(forged_id).header, lab.store.read(artifact_id).header
        benign = all(grafted.get(f) == original.get(f) for f in PINNED_FIELDS)  # e.g. a bit of problem_text
        assert benign or (mutation[0] == "swap" and mutation[1][2]), f"{mutation} grafted"
        assert cache.get_seq_length() == 12
    except ArtifactError as exc:
        assert exc.artifact_id == forged_id and exc.check in {"size", "hash", "format", "header", "tensors", "payload",
                                                              "config", "parent"}
    finally:
        forged.unlink()


# ----------------------------------------------------------------------------------------- problem sets (gaps)

# The problem-set files of the fault catalogue (benchmarks/faults.py tries them too), by file name.
CATALOGUED = {filename: content for _, filename, content, _ in PROBLEM_SET_FAULTS}


@pytest.mark.parametrize("name, content, where", [
    ("wide.csv", CATALOGUED["wide.csv"], "line 3: row 2 has 4 fields, the header names 3"),
    ("bigint.jsonl", CATALOGUED["bigint.jsonl"], "line 2: invalid JSON"),
    ("bigint.json", b'[{"id": "a", "problem": "q", "answer": ' + b"9" * 5000 + b"}]", "invalid JSON (Exceeds the limit"),
    ("deep.json", b"[" * 100_000 + b"]" * 100_000, "invalid JSON (maximum recursion depth"),
    ("huge.csv", b"id,problem,answer\na,p,1\nb," + b"x" * 10_000_000 + b",2\n", "row 2, field 'problem'"),
    ("binary.jsonl", b"\x00\x01\x02\xff\xfe garbage\n", "line 1: invalid UTF-8"),
    ("garbage.parquet", b"PAR1 this is not parquet", "datasets could not read the file"),
], ids=["csv-extra-field", "jsonl-5000-digit-int", "json-5000-digit-int", "json-deep", "csv-10mb-line",
        "binary-jsonl", "corrupt-parquet"])
def test_bad_problem_files_name_the_file_and_the_row(tmp_path, name, content, where):
    path = tmp_path / name
    error = problem_set_error(path, content)
    assert isinstance(error, ProblemSetError)
    assert str(error).startswith(f"{path}: ") and where in str(error)


@pytest.mark.parametrize("column, value, where", [
    ("problem", None, "row 2, field 'problem': problem text is missing"),
    ("answer", "twelve", "row 2, field 'answer': answer 'twelve' is not an integer"),
])
def test_bad_parquet_rows_name_the_file_row_and_field(tmp_path, column, value, where):
    rows = {"id": ["a", "b"], "problem": ["p", "q"], "answer": ["1", "2"]}
    rows[column][1] = value
    path = tmp_path / "set.parquet"
    pd.DataFrame(rows).to_parquet(path)
    with pytest.raises(ProblemSetError, match=re.escape(f"{path}: {where}")):
        load_problems(str(path))


# ----------------------------------------------------------------------------------------- names


@pytest.mark.parametrize("bad", ["a" * 64 + "\n", "\n" + "a" * 64, None, 7, b"a" * 64, "a" * 32 + "/" + "a" * 31])
def test_artifact_ids_with_newlines_or_other_types_are_refused(bad):
    with pytest.raises(ArtifactError) as info:
        check_artifact_id(bad)
    assert info.value.check == "id"


@pytest.mark.parametrize("bad", ["run\n", "a/../../b", "a/b", "-x", None, 7, "x" * 129])
def test_run_names_with_newlines_slashes_or_other_types_are_refused(tmp_path, bad):
    with pytest.raises(RunError, match="is not a plain folder name"):
        RunDir(tmp_path, bad)
    assert list(tmp_path.iterdir()) == []
