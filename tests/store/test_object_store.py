"""Stores on object storage (issue #15): ``--store s3://bucket/prefix`` (and ``file://``, ``memory://``) against a
real S3-compatible server that the tests start on loopback (moto's server; dummy credentials; nothing leaves
127.0.0.1). Deposits from two processes at once; a depositor killed mid-upload leaves no object; ``store verify``
catches a damaged object; the index is rebuilt from the objects alone with an empty cache; the read-through cache
reads each object once and refuses a damaged copy; routing equals a folder store's; a third process grafts from
the store with the real model (``model``, ``slow``)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from graftbench.store.codec import ArtifactError, encode_artifact
from graftbench.store.ids import SUFFIX, artifact_id_of
from graftbench.cli.app import app
from graftbench.faults.harness import IMPORT_ROOT
from graftbench.store import object_backend
from graftbench.store.object_backend import ENDPOINT_ENV
from graftbench.store.object_store import CACHE_ENV, ObjectStore
from graftbench.store.router import Route, gate_ratio, rank_candidates, route, route_other_family, route_top_ranked
from graftbench.store.folder import Store, is_store_url
from graftbench.store.index import StoreError
from graftbench.store.open import open_store, require_store

runner = CliRunner()
LAYERS, HEADS, DIM = 2, 2, 4
FINGERPRINT = "c" * 64
TEXTS = {
    "mod-1": "what is the remainder when 2 to the power 10 is divided by 7",
    "mod-2": "what is the remainder when 3 to the power 12 is divided by 11",
    "paths-1": "how many lattice paths go from (0,0) to (4,3) using unit steps right and up",
    "digits-1": "what is the sum of the digits of 2 to the power 20",
}
QUERIES = [
    TEXTS["mod-1"],                                                                  # exact
    "what is the remainder when 5 to the power 13 is divided by 7",                  # similar
    "how many lattice paths go from (0,0) to (5,5) using unit steps right and up",  # similar
    "name the capital city of a country in europe",                                  # none
]


def artifact(problem_id: str, tokens: int = 5, text: str | None = None) -> bytes:
    """A small valid artifact (no model), routable by its problem text ``TEXTS[problem_id]``."""
    generator = torch.Generator().manual_seed(tokens + len(problem_id))
    layers = [(torch.randn(1, HEADS, tokens, DIM, generator=generator),
               torch.randn(1, HEADS, tokens, DIM, generator=generator)) for _ in range(LAYERS)]
    text = text or TEXTS.get(problem_id, f"problem {problem_id}")
    header = {"config_fingerprint": FINGERPRINT, "positions": [0, tokens], "dtype": "float32", "kv_heads": HEADS,
              "head_dim": DIM, "layers": [{"kind": "full", "seen": tokens, "kept": tokens}] * LAYERS, "parent": None,
              "problem_key": f"key-{text}", "problem_text": text, "answer": "1", "source": "reference",
              "problem_id": problem_id}
    return encode_artifact(header, torch.arange(tokens), layers)


def object_name(data: bytes) -> str:
    return f"artifacts/{artifact_id_of(data)}{SUFFIX}"


# ------------------------------------------------------------------------------------------ the S3 server


class Requests:
    """WSGI middleware in front of moto's app: records (method, path, range header, status, query) of every
    request (status ``None`` for a request that never got an answer)."""

    def __init__(self, app):
        self.app, self.log, self.lock = app, [], threading.Lock()

    def __call__(self, environ, start_response):
        entry = [environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("HTTP_RANGE"), None,
                 environ.get("QUERY_STRING", "")]

        def recording(status, headers, *args):
            entry[3] = int(status.split()[0])
            return start_response(status, headers, *args)

        with self.lock:
            self.log.append(entry)
        return self.app(environ, recording)

    def whole_gets(self, key: str, artifact_id: str) -> int:
        """GETs of the whole object of ``artifact_id`` under ``key`` (bucket/prefix), not ranged header reads."""
        with self.lock:
            return sum(1 for method, path, ranged, _, _ in self.log
                       if method == "GET" and ranged is None and path == f"/{key}/artifacts/{artifact_id}{SUFFIX}")

    def puts(self, key: str, artifact_id: str) -> list[int]:
        """The statuses of the PUTs of the object of ``artifact_id`` under ``key``, in order."""
        with self.lock:
            return [status for method, path, _, status, query in self.log
                    if method == "PUT" and path == f"/{key}/artifacts/{artifact_id}{SUFFIX}"
                    and "partNumber" not in query]


@pytest.fixture(scope="module")
def moto_server():
    """moto's S3 server on 127.0.0.1 (a free port), every request recorded."""
    import s3fs  # noqa: F401  (a test dependency: missing, the test fails)
    import moto.server as server_module  # a test dependency: missing, the test fails
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    requests = Requests(server._server.app)  # werkzeug's server calls its .app for each request
    server._server.app = requests
    host, port = server.get_host_and_port()
    yield SimpleNamespace(endpoint=f"http://{host}:{port}", port=port, requests=requests)
    server.stop()


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """One store cache per simulated machine: ``caches(name)`` points this process at it and returns it."""
    def use(name: str = "worker") -> Path:
        folder = tmp_path / f"cache-{name}"
        monkeypatch.setenv(CACHE_ENV, str(folder))
        return folder
    use()
    return use


@pytest.fixture
def s3(moto_server, tmp_path, monkeypatch, caches):
    """A fresh bucket on the loopback server, dummy credentials, and the store URL ``s3://<bucket>/store``."""
    import s3fs

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv(ENDPOINT_ENV, moto_server.endpoint)
    bucket = f"graftbench-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": moto_server.endpoint}, skip_instance_cache=True,
                           use_listings_cache=False)
    fs.mkdir(bucket)
    return SimpleNamespace(url=f"s3://{bucket}/store", key=f"{bucket}/store", fs=fs, server=moto_server)


def objects(s3) -> list[str]:
    """The names under the store's ``artifacts/`` on the server."""
    return sorted(path.rsplit("/", 1)[-1] for path in s3.fs.find(f"{s3.key}/artifacts"))


# ------------------------------------------------------------------------------------------ processes

PUT_CODE = """
import sys
from graftbench.store.open import open_store
store = open_store(sys.argv[1])
data = open(sys.argv[2], "rb").read()
print("READY", flush=True)
sys.stdin.readline()
print("WRITTEN" if store.put_reporting(data)[1] else "KEPT", flush=True)
"""


def depositor(url: str, data: bytes, folder: Path, name: str, env: dict | None = None) -> subprocess.Popen:
    """A process (its own store cache: another machine) that opens the store, says READY, and puts ``data``
    when a line arrives on its stdin."""
    folder.mkdir(parents=True, exist_ok=True)
    payload = folder / f"{name}.bin"
    payload.write_bytes(data)
    environment = {key: value for key, value in os.environ.items() if key != "GRAFTBENCH_FAULT"}
    environment.update({CACHE_ENV: str(folder / f"cache-{name}"), **(env or {})})
    proc = subprocess.Popen([sys.executable, "-c", PUT_CODE, url, str(payload)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=IMPORT_ROOT,
                            env=environment)
    line = proc.stdout.readline().strip()
    assert line == "READY", (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def go(*procs: subprocess.Popen) -> list[str]:
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outcome = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outcome.append(out.strip())
    return outcome


# ------------------------------------------------------------------------------------------ deposits


def test_a_url_is_a_store_on_object_storage_and_a_path_is_a_folder(tmp_path):
    assert is_store_url("s3://bucket/prefix") and is_store_url("file:///tmp/x") and is_store_url("memory://x")
    assert not is_store_url("store") and not is_store_url(str(tmp_path)) and not is_store_url(Path("s3://b/p"))
    assert type(open_store(tmp_path / "folder")) is Store
    assert type(open_store("memory://graftbench-kind")) is ObjectStore
    with pytest.raises(ValueError, match="is a URL, not a folder: open it with open_store"):
        Store("memory://graftbench-kind")


def test_two_processes_deposit_the_same_artifact_at_once(s3, tmp_path):
    data = artifact("mod-1", tokens=2000)
    first, second = (depositor(s3.url, data, tmp_path, name) for name in ("a", "b"))
    outcome = go(first, second)
    assert set(outcome) <= {"WRITTEN", "KEPT"} and "WRITTEN" in outcome  # both succeed
    assert objects(s3) == [f"{artifact_id_of(data)}{SUFFIX}"]  # one object: these very bytes
    assert s3.fs.cat_file(f"{s3.key}/{object_name(data)}") == data
    statuses = s3.server.requests.puts(s3.key, artifact_id_of(data))
    assert 200 in statuses and set(statuses) <= {200, 412}  # conditional writes: created, or "already there"
    assert open_store(s3.url, readonly=True).ids() == [artifact_id_of(data)]


def test_two_processes_deposit_different_artifacts_at_once(s3, tmp_path):
    one, other = artifact("mod-1"), artifact("paths-1")
    assert go(depositor(s3.url, one, tmp_path, "a"), depositor(s3.url, other, tmp_path, "b")) == ["WRITTEN"] * 2
    assert objects(s3) == sorted(f"{artifact_id_of(d)}{SUFFIX}" for d in (one, other))
    store = open_store(s3.url, readonly=True)
    assert store.ids() == sorted(artifact_id_of(d) for d in (one, other)) and store.verify() == []


def test_a_second_deposit_is_refused_by_the_condition_and_changes_nothing(s3):
    data = artifact("mod-1")
    assert open_store(s3.url).put_reporting(data) == (artifact_id_of(data), True)
    modified = s3.fs.info(f"{s3.key}/{object_name(data)}")["LastModified"]
    assert open_store(s3.url).put_reporting(data) == (artifact_id_of(data), False)
    assert s3.server.requests.puts(s3.key, artifact_id_of(data)) == [200, 412]  # If-None-Match: * refused the second
    assert s3.fs.info(f"{s3.key}/{object_name(data)}")["LastModified"] == modified


def test_a_large_artifact_goes_up_in_parts_under_the_same_condition(s3, monkeypatch):
    """Objects of two chunks or more are multipart uploads (artifacts of thousands of tokens are hundreds of MB):
    the condition is checked when the upload completes, and the refused upload leaves no parts behind."""
    monkeypatch.setattr(object_backend, "MULTIPART_CHUNK_BYTES", 5 << 20)
    data = artifact("mod-1", tokens=100_000)  # about 12.8 MB: three parts
    assert len(data) > 10 << 20
    assert open_store(s3.url).put_reporting(data)[1] is True
    assert open_store(s3.url).put_reporting(data)[1] is False
    completions = [status for method, path, _, status, query in s3.server.requests.log
                   if method == "POST" and path == f"/{s3.key}/{object_name(data)}" and "uploadId=" in query]
    assert completions == [200, 412]  # the second upload's completion refused by If-None-Match
    assert s3.fs.cat_file(f"{s3.key}/{object_name(data)}") == data
    assert not s3.fs.call_s3("list_multipart_uploads", Bucket=s3.key.split("/")[0]).get("Uploads")


def test_a_damaged_object_is_replaced_by_a_deposit_of_its_bytes(s3):
    data = artifact("mod-1")
    s3.fs.pipe_file(f"{s3.key}/{object_name(data)}", data[:-1] + bytes([data[-1] ^ 1]))
    assert open_store(s3.url).put_reporting(data)[1] is True
    assert s3.fs.cat_file(f"{s3.key}/{object_name(data)}") == data


class CutProxy:
    """A loopback TCP proxy to the S3 server that stops forwarding a connection's requests once ``limit`` bytes
    of them have passed (``cut`` is then set), so that the client is caught in the middle of an upload."""

    def __init__(self, port: int, limit: int):
        self.target, self.limit, self.cut, self.sockets = port, limit, threading.Event(), []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source, target, requests: bool):
        passed = 0
        try:
            while chunk := source.recv(1 << 16):
                if requests and passed + len(chunk) > self.limit:
                    target.sendall(chunk[: self.limit - passed])
                    self.cut.set()
                    return  # the rest of this upload never arrives
                target.sendall(chunk)
                passed += len(chunk) if requests else 0
        except OSError:
            return

    def close(self):
        for sock in [self.listener, *self.sockets]:
            sock.close()


def test_a_depositor_killed_mid_upload_leaves_no_object(s3, tmp_path):
    data = artifact("mod-1", tokens=40_000)  # about 5 MB: cut after 1 MB of it
    proxy = CutProxy(s3.server.port, limit=1 << 20)
    try:
        proc = depositor(s3.url, data, tmp_path, "killed", env={ENDPOINT_ENV: f"http://127.0.0.1:{proxy.port}"})
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proxy.cut.wait(60), "the upload never passed 1 MB"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
    finally:
        proxy.close()  # the server sees the upload's connection end early
    # the server's thread records the PUT once it has parsed the headers, which a loaded machine may delay past the
    # cut; then a second for it to answer, which it must not
    deadline = time.monotonic() + 60
    while not s3.server.requests.puts(s3.key, artifact_id_of(data)) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    assert s3.server.requests.puts(s3.key, artifact_id_of(data)) == [None]  # it reached the server, never answered
    assert objects(s3) == []  # nothing partial is visible
    store = open_store(s3.url)
    assert store.ids() == [] and store.verify() == []
    assert store.put_reporting(data) == (artifact_id_of(data), True)  # the next deposit succeeds
    assert s3.server.requests.puts(s3.key, artifact_id_of(data)) == [None, 200]
    assert s3.fs.cat_file(f"{s3.key}/{object_name(data)}") == data and open_store(s3.url).verify() == []


# ------------------------------------------------------------------------------------------ index and verify


def test_store_verify_catches_a_corrupted_object(s3, caches):
    payload_damaged, header_damaged, intact = artifact("mod-1"), artifact("paths-1"), artifact("digits-1")
    store = open_store(s3.url)
    for data in (payload_damaged, header_damaged, intact):
        store.put(data)
    assert runner.invoke(app, ["store", "verify", "--store", s3.url]).exit_code == 0
    flipped = bytearray(payload_damaged)
    flipped[-3] ^= 0x10
    s3.fs.pipe_file(f"{s3.key}/{object_name(payload_damaged)}", bytes(flipped))
    s3.fs.pipe_file(f"{s3.key}/{object_name(header_damaged)}", b"\xff" * 8 + header_damaged[8:])
    for cache in ("worker", "empty"):  # the depositor's index, and one built from the objects as they are now
        caches(cache)
        result = runner.invoke(app, ["store", "verify", "--store", s3.url])
        assert result.exit_code == 1, result.output
        assert f"artifact {artifact_id_of(payload_damaged)[:16]}: hash check failed" in result.output
        damaged_header = (f"object {artifact_id_of(header_damaged)}{SUFFIX}: not indexed: format:" if cache == "empty"
                          else f"artifact {artifact_id_of(header_damaged)[:16]}: hash check failed")
        assert damaged_header in result.output.replace("\n", "")
        assert artifact_id_of(intact)[:16] not in result.output and "2 artifact(s) in" in result.output


def test_manifest_artifacts_are_checked_against_the_objects_of_a_url_store(s3, caches, tmp_path, monkeypatch):
    from graftbench.results.manifest import _check_artifacts

    held, damaged, absent = artifact("mod-1"), artifact("paths-1"), artifact("digits-1")
    store = open_store(s3.url)
    store.put(held)
    store.put(damaged)
    flipped = bytearray(damaged)
    flipped[-3] ^= 0x10
    s3.fs.pipe_file(f"{s3.key}/{object_name(damaged)}", bytes(flipped))
    ids = [artifact_id_of(data) for data in (held, damaged, absent)]
    manifest = {"artifacts": [{"id": i, "sha256": i} for i in ids],
                "samples": [{"problem_id": f"p{n}", "artifact_id": i} for n, i in enumerate(ids)]}
    caches("verifier")  # another machine: its own cache, the objects read from the store
    mismatches, note, unchecked = _check_artifacts(manifest, s3.url)
    assert mismatches == [f"artifact {ids[1][:16]}: payload SHA-256 differs from the manifest"]
    assert note == f"2 artifact payloads checked against {s3.url}, 1 not checked (absent from the store)"
    assert unchecked == "3 artifact payloads: 1 not checked (absent from the store)"  # verify-manifest: exit 4
    mismatches, _, unchecked = _check_artifacts(manifest, s3.url, require=True)
    assert unchecked is None  # required: absence is a mismatch, not "not checked"
    assert mismatches[1] == f"artifact {ids[2][:16]}: absent from store {s3.url}"
    unreadable = ObjectStore._get_object

    def read_fails_for_the_first(self, artifact_id):
        if artifact_id == ids[0]:
            raise ArtifactError(artifact_id, "read", "cannot read: connection reset")
        return unreadable(self, artifact_id)

    monkeypatch.setattr(ObjectStore, "_get_object", read_fails_for_the_first)
    mismatches, note, _ = _check_artifacts(manifest, s3.url, require=True)
    assert note == (f"1 artifact payloads checked against {s3.url}, 1 not checked (absent from the store), "
                    "1 not checked (cannot be read)")
    assert mismatches[0].startswith(f"artifact {ids[0][:16]}: cannot be read from store {s3.url}: artifact")
    monkeypatch.undo()
    nowhere = s3.url.replace("/store", "/no-store")
    mismatches, note, unchecked = _check_artifacts(manifest, nowhere)
    assert mismatches == [] and note.startswith(f"3 artifact payloads not checked (store {nowhere} cannot be opened")
    assert unchecked == note


def test_reindex_rebuilds_the_index_from_the_objects_alone(s3, tmp_path, caches):
    folder = open_store(tmp_path / "folder")
    for data in (artifact(name) for name in TEXTS):
        folder.put(data)
        open_store(s3.url).put(data)
    caches("empty")  # another machine: no index, no copies
    result = runner.invoke(app, ["store", "reindex", "--store", s3.url])
    assert result.exit_code == 0, result.output
    assert f"reindexed {s3.url}: {len(TEXTS)} artifact(s) indexed, 0 file(s) skipped" in result.output
    without_digest = [{**row, "xxh3_128": None} for row in folder.rows()]
    assert open_store(s3.url, readonly=True).rows() == without_digest  # the digest comes with the first checked read
    caches("opened")  # a worker that only opens the store indexes it the same way
    assert open_store(s3.url).rows() == without_digest
    listing = runner.invoke(app, ["store", "ls", "--store", s3.url])
    assert listing.exit_code == 0 and all(aid[:16] in listing.output for aid in folder.ids())


def test_a_worker_sees_deposits_made_after_its_index_was_built(s3, caches):
    first, second = artifact("mod-1"), artifact("paths-1")
    open_store(s3.url).put(first)
    caches("reader")
    assert open_store(s3.url).ids() == [artifact_id_of(first)]
    caches("worker")
    open_store(s3.url).put(second)
    caches("reader")
    assert open_store(s3.url).ids() == sorted(map(artifact_id_of, (first, second)))


def test_a_missing_url_store_is_refused_and_read_only_commands_create_nothing(s3):
    for opened in (lambda: require_store(s3.url), lambda: open_store(s3.url, create=False),
                   lambda: open_store(s3.url, readonly=True)):
        with pytest.raises(StoreError) as info:
            opened()
        assert info.value.missing and s3.url in str(info.value)
    result = runner.invoke(app, ["store", "verify", "--store", s3.url])
    assert result.exit_code != 0 and "no store at" in result.output
    assert s3.fs.find(s3.key) == []
    open_store(s3.url)  # a writer creates it: its marker
    require_store(s3.url)


# ------------------------------------------------------------------------------------------ reads


def test_the_read_through_cache_reads_each_object_once(s3, caches):
    datas = [artifact(name) for name in TEXTS]
    depositor_store = open_store(s3.url)
    for data in datas:
        depositor_store.put(data)
    ids = [artifact_id_of(data) for data in datas]
    for artifact_id in ids:
        depositor_store.read(artifact_id)
    assert [s3.server.requests.whole_gets(s3.key, aid) for aid in ids] == [0] * len(ids)  # the depositor's copies
    caches("reader")
    for _ in range(2):  # two opens of the store, three reads each
        store = open_store(s3.url, readonly=True)
        for artifact_id in ids:
            for _ in range(3):
                assert store.read(artifact_id).token_ids.tolist() == list(range(5))
    assert [s3.server.requests.whole_gets(s3.key, aid) for aid in ids] == [1] * len(ids)
    assert all(row["xxh3_128"] for row in store.rows())  # recorded from the checked bytes


def test_a_corrupted_cached_copy_is_refused_and_fetched_again(s3, caches):
    data = artifact("mod-1")
    open_store(s3.url).put(data)
    caches("reader")
    store, artifact_id = open_store(s3.url), artifact_id_of(data)
    store.read(artifact_id)
    copy = store.path(artifact_id)
    damaged = bytearray(copy.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    copy.write_bytes(bytes(damaged))
    assert store.read(artifact_id).id == artifact_id
    assert copy.read_bytes() == data and s3.server.requests.whole_gets(s3.key, artifact_id) == 2


def test_a_damaged_object_is_refused_on_read_and_never_cached(s3, caches):
    data = artifact("mod-1")
    open_store(s3.url).put(data)
    s3.fs.pipe_file(f"{s3.key}/{object_name(data)}", data[:-1] + bytes([data[-1] ^ 1]))
    caches("reader")
    store = open_store(s3.url)
    with pytest.raises(ArtifactError) as info:
        store.read(artifact_id_of(data))
    assert info.value.check == "hash" and not store.path(artifact_id_of(data)).exists()


@pytest.mark.parametrize("kind", ["s3", "file", "memory"])
def test_routing_against_a_url_store_equals_routing_against_a_folder(kind, request, tmp_path):
    url = {"s3": lambda: request.getfixturevalue("s3").url, "file": lambda: f"file://{tmp_path}/url-store",
           "memory": lambda: f"memory://graftbench-{uuid.uuid4().hex[:8]}"}[kind]()
    folder, remote = open_store(tmp_path / "folder"), open_store(url)
    for name in TEXTS:
        folder.put(artifact(name))
        remote.put(artifact(name))
    reader = open_store(url, readonly=True)
    for query in QUERIES:
        expected = route(folder, FINGERPRINT, f"key-{query}", query, 0.6)
        assert route(reader, FINGERPRINT, f"key-{query}", query, 0.6) == expected
        assert reader.candidates(FINGERPRINT, query) == folder.candidates(FINGERPRINT, query)
        assert route_other_family(reader, FINGERPRINT, query, "mod") == route_other_family(folder, FINGERPRINT,
                                                                                           query, "mod")
    kinds = [route(reader, FINGERPRINT, f"key-{q}", q, 0.6).kind for q in QUERIES]
    assert kinds == ["exact", "similar", "similar", "none"]
    assert all(reader.read(aid).header == folder.read(aid).header for aid in folder.ids())


def test_the_gate_off_grafts_the_top_ranked_deposit_even_without_a_shared_band(tmp_path):
    store = Store(tmp_path / "store")
    ids = {name: store.put(artifact(name)) for name in TEXTS}
    unrelated = QUERIES[-1]
    assert store.candidates(FINGERPRINT, unrelated) == []
    assert route(store, FINGERPRINT, "key-q", unrelated, 0.0) == Route("none", None, 0.0)
    library = {aid: TEXTS[name] for name, aid in ids.items()}
    for query in QUERIES:
        top_id = rank_candidates(query, list(library.items()))[0][0]
        assert route_top_ranked(store, FINGERPRINT, query) == Route("similar", top_id, gate_ratio(query,
                                                                                                 library[top_id]))
    assert route_top_ranked(store, "d" * 64, unrelated) == Route("none", None, 0.0)  # nothing under that config


# ------------------------------------------------------------------------------------------ file:// and memory://


def test_a_file_url_store_killed_before_its_link_leaves_no_object(tmp_path):
    url, data = f"file://{tmp_path}/url-store", artifact("mod-1")
    open_store(url)
    proc = depositor(url, data, tmp_path, "killed", env={"GRAFTBENCH_FAULT": "deposit-before-rename"})
    proc.stdin.write("go\n")
    proc.stdin.flush()
    proc.wait(120)
    assert proc.returncode == -signal.SIGKILL
    names = sorted(p.name for p in (tmp_path / "url-store" / "artifacts").iterdir())
    assert len(names) == 1 and names[0].startswith(".tmp-")  # a complete temporary file, never the object
    assert open_store(url, readonly=True).temporaries() == names and open_store(url, readonly=True).ids() == []
    result = runner.invoke(app, ["store", "clean", "--store", url])
    assert result.exit_code == 0 and "1 temporary file(s) removed" in result.output
    assert open_store(url).put_reporting(data)[1] is True
    assert (tmp_path / "url-store" / object_name(data)).read_bytes() == data


def test_a_damaged_local_index_is_only_a_cache_and_is_built_again(tmp_path):
    url = f"file://{tmp_path}/url-store"
    store = open_store(url)
    ids = sorted(store.put(artifact(name)) for name in TEXTS)
    store.index_path.write_bytes(b"not a database " * 100)
    assert open_store(url, readonly=True).ids() == ids


def test_file_and_memory_url_stores_through_the_commands(tmp_path):
    for url in (f"file://{tmp_path}/cli-store", f"memory://graftbench-{uuid.uuid4().hex[:8]}"):
        store = open_store(url)
        ids = sorted(store.put(artifact(name)) for name in TEXTS)
        for args, expected in ((["store", "ls"], ids[0][:16]), (["store", "verify"], "every artifact"),
                               (["store", "reindex"], f"{len(TEXTS)} artifact(s) indexed")):
            result = runner.invoke(app, [*args, "--store", url])
            assert result.exit_code == 0 and expected in result.output, result.output
        assert open_store(url).put_reporting(artifact("mod-1"))[1] is False
        assert [store.read(aid).id for aid in ids] == ids


# ------------------------------------------------------------------------------------------ the real graft


EVAL_CODE = "import sys\nfrom graftbench.cli.app import app\nsys.argv[0] = 'graftbench'\napp()\n"


@pytest.mark.slow
def test_a_third_process_grafts_from_the_s3_store_byte_exact(session, aime2024, s3, tmp_path):
    """Deposits from this process; a fresh process with an empty store cache routes, fetches each artifact once,
    grafts it with the real model and certifies the graft against a fresh recompute (``--certify``)."""
    from graftbench.eval.deposit import deposit_items, items_from_problems

    from tests.conftest import AIME2024

    report = deposit_items(session, open_store(s3.url), items_from_problems(aime2024[:2]))
    ids = [aid for _, aid, _, _ in report.deposited]
    assert len(ids) == 2
    env = {**os.environ, CACHE_ENV: str(tmp_path / "third-machine")}
    env.pop("GRAFTBENCH_FAULT", None)
    args = ["eval", "--graft", "--certify", "--store", s3.url, "--problems", str(AIME2024), "--limit", "2",
            "--max-new-tokens", "4", "--dtype", session.config.dtype, "--chunk-size", str(session.config.chunk_size),
            "--runs-dir", str(tmp_path / "runs"), "--run", "third"]
    done = subprocess.run([sys.executable, "-c", EVAL_CODE, *args], capture_output=True, text=True, env=env,
                          cwd=IMPORT_ROOT, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    samples = [json.loads(line) for line in (tmp_path / "runs" / "third" / "samples.jsonl").read_text().splitlines()]
    assert [(s["route"], s["artifact_id"], s["fallback"]) for s in samples] == [("exact", aid, None) for aid in ids]
    assert [s3.server.requests.whole_gets(s3.key, aid) for aid in ids] == [1, 1]
    manifest = json.loads((tmp_path / "runs" / "third" / "manifest.json").read_text())
    assert manifest["store"] == s3.url
