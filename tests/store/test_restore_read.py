"""The restore read path (XXH3-128 in one pass), index upgrades and the router's MinHash band index, without a model."""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graftbench.store import minhash
from graftbench.store.codec import ArtifactError, encode_artifact
from graftbench.store.reader import read_safetensors, xxh3_128_hex
from graftbench.store.folder import Store
from graftbench.store.index import SCHEMA_VERSION

from tests.store.test_artifact_reader import HEADER, VALID, _decode


@pytest.fixture
def stored(tmp_path):
    store = Store(tmp_path)
    return store, store.put(VALID)


def test_read_adopts_the_files_tensors_and_splits_its_time(stored):
    store, artifact_id = stored
    artifact = store.read(artifact_id)
    reference = _decode(VALID)
    assert artifact.token_ids.tolist() == reference.token_ids.tolist()
    for (k, v), (rk, rv) in zip(artifact.layers, reference.layers):
        assert torch.equal(k, rk) and torch.equal(v, rv)
    assert artifact.timing.bytes == len(VALID)
    assert artifact.timing.read_s > 0 and artifact.timing.integrity_s > 0
    # One storage per tensor, so a cache that replaces one layer's tensors frees that layer's bytes.
    pointers = {t.untyped_storage().data_ptr() for pair in artifact.layers for t in pair}
    assert len(pointers) == 2 * len(artifact.layers)


def test_index_records_the_xxh3_of_the_file(stored):
    store, artifact_id = stored
    with closing(sqlite3.connect(store.index_path)) as db:
        (digest,) = db.execute("SELECT xxh3_128 FROM artifacts WHERE id=?", (artifact_id,)).fetchone()
    assert digest == xxh3_128_hex(VALID) and len(digest) == 32
    assert read_safetensors(store.path(artifact_id), "xxh3_128").digest == digest
    assert read_safetensors(store.path(artifact_id), "sha256").digest == artifact_id


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(bit=st.integers(0, len(VALID) * 8 - 1), integrity=st.sampled_from(["xxh3_128", "sha256"]))
def test_any_flipped_bit_is_refused_as_a_hash_failure(stored, bit, integrity):
    store, artifact_id = stored
    damaged = bytearray(VALID)
    damaged[bit // 8] ^= 1 << (bit % 8)
    path = store.path(artifact_id)
    path.write_bytes(bytes(damaged))
    try:
        with pytest.raises(ArtifactError) as info:
            store.read(artifact_id, integrity)
        assert info.value.check == "hash"
    finally:
        path.write_bytes(VALID)
    assert store.read(artifact_id, integrity).id == artifact_id


def test_unknown_integrity_method_is_refused(stored):
    store, artifact_id = stored
    with pytest.raises(ValueError, match="integrity method 'md5'"):
        store.read(artifact_id, "md5")


def test_an_unindexed_file_is_checked_with_sha256(tmp_path):
    store = Store(tmp_path)
    artifact_id = hashlib.sha256(VALID).hexdigest()
    store.path(artifact_id).write_bytes(VALID)  # a file not yet indexed: no XXH3 to compare with
    assert store.read(artifact_id).id == artifact_id
    store.path(artifact_id).write_bytes(VALID[:-1] + bytes([VALID[-1] ^ 1]))
    with pytest.raises(ArtifactError, match="sha256 of the file does not equal its id"):
        store.read(artifact_id)


def _version_1_store(root, rows: list[tuple]) -> None:
    """An index as graftbench wrote it before XXH3 digests and band keys."""
    (root / "artifacts").mkdir(parents=True)
    with closing(sqlite3.connect(root / "index.sqlite")) as db, db:
        db.executescript("""
            CREATE TABLE artifacts (id TEXT PRIMARY KEY, config_fingerprint TEXT NOT NULL, problem_key TEXT,
                problem_text TEXT, answer TEXT, n_tokens INTEGER NOT NULL, parent TEXT, bytes INTEGER NOT NULL,
                source TEXT);
            CREATE INDEX by_problem ON artifacts (config_fingerprint, problem_key);""")
        db.executemany("INSERT INTO artifacts VALUES (?,?,?,?,?,?,?,?,?)", rows)


def test_an_older_index_is_upgraded_and_its_artifacts_read_with_sha256(tmp_path):
    artifact_id = hashlib.sha256(VALID).hexdigest()
    text = "find the remainder when 7^222 is divided by 1000."
    _version_1_store(tmp_path, [(artifact_id, "f" * 64, "k", text, "49", 5, None, len(VALID), "test")])
    (tmp_path / "artifacts" / f"{artifact_id}.safetensors").write_bytes(VALID)
    store = Store(tmp_path)
    assert store.read(artifact_id).id == artifact_id and store.verify() == []
    assert store.candidates("f" * 64, text) == [(artifact_id, text)]
    with closing(sqlite3.connect(store.index_path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION  # upgraded to the current schema


def _put_text(store: Store, text: str, fingerprint: str = "c" * 64) -> str:
    header = {**HEADER, "config_fingerprint": fingerprint, "problem_text": text, "answer": text[-3:]}
    return store.put(encode_artifact(header, torch.arange(5), _decode(VALID).layers))


def test_candidates_are_the_texts_that_share_a_band(tmp_path):
    store = Store(tmp_path)
    near = _put_text(store, "find the remainder when $7^{222}$ is divided by $1000$.")
    _put_text(store, "how many subsets of a 10-element set have exactly three elements?")
    _put_text(store, "find the remainder when $7^{222}$ is divided by $1000$.", fingerprint="d" * 64)
    found = store.candidates("c" * 64, "find the remainder when $7^{223}$ is divided by $1000$.")
    assert [artifact_id for artifact_id, _ in found] == [near]
    assert store.candidates("c" * 64, "") == []


def test_band_collision_probability_follows_jaccard():
    base = "let n be the least positive integer such that the sum of the digits of n is 2024."
    edited = base.replace("2024", "2025")
    a, b = minhash.minhash(base), minhash.minhash(edited)
    base_shingles, edited_shingles = minhash.shingles(base), minhash.shingles(edited)
    jaccard = len(base_shingles & edited_shingles) / len(base_shingles | edited_shingles)
    assert 0.8 < jaccard < 1.0
    agree = float((a == b).mean())
    assert abs(agree - jaccard) < 0.25  # each MinHash agrees with probability J (40 of them)
    assert set(minhash.band_keys("c", base)) & set(minhash.band_keys("c", edited))
    assert not set(minhash.band_keys("c", base)) & set(minhash.band_keys("d", base))
    with pytest.raises(ValueError, match="empty text"):
        minhash.minhash("")
