"""The artifact reader on hostile input, without a model: every malformed file is refused with ArtifactError."""

from __future__ import annotations

import hashlib
import json
import multiprocessing

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graftbench.store.codec import ArtifactError, decode_artifact, encode_artifact, payload_sha256
from graftbench.store.reader import parse_header
from graftbench.store.folder import Store

LAYERS = 3
HEADS, DIM, TOKENS = 2, 4, 5


def _valid() -> tuple[bytes, dict]:
    generator = torch.Generator().manual_seed(0)
    layers = [(torch.randn(1, HEADS, TOKENS, DIM, generator=generator),
               torch.randn(1, HEADS, TOKENS, DIM, generator=generator)) for _ in range(LAYERS)]
    header = {
        "config_fingerprint": "c" * 64, "positions": [0, TOKENS], "dtype": "float32", "kv_heads": HEADS,
        "head_dim": DIM, "layers": [{"kind": "full", "seen": TOKENS, "kept": TOKENS}] * LAYERS, "parent": None,
    }
    return encode_artifact(header, torch.arange(TOKENS), layers), header


VALID, HEADER = _valid()


def _decode(data: bytes):
    return decode_artifact(hashlib.sha256(data).hexdigest(), data)


def test_valid_artifact_decodes():
    artifact = _decode(VALID)
    assert artifact.token_ids.tolist() == list(range(TOKENS))
    assert len(artifact.layers) == LAYERS and artifact.layers[0][0].shape == (1, HEADS, TOKENS, DIM)


def _rebuilt(edit) -> bytes:
    """Re-encode the valid artifact with an edited header or tensors (so the id hash matches the new bytes)."""
    artifact = _decode(VALID)
    header = {k: v for k, v in artifact.header.items() if k not in ("format", "payload_sha256")}
    layers = [list(pair) for pair in artifact.layers]
    token_ids = edit(header, layers, artifact.token_ids)
    return encode_artifact(header, token_ids if isinstance(token_ids, torch.Tensor) else artifact.token_ids, [tuple(p) for p in layers])


@pytest.mark.parametrize("edit, check", [
    (lambda h, l, t: l[1].__setitem__(0, l[1][0][:, :, :3]), "tensors"),        # wrong shape
    (lambda h, l, t: l[0].__setitem__(1, l[0][1].to(torch.bfloat16)), "tensors"),  # wrong dtype
    (lambda h, l, t: h.update(positions=[0, 9]), "tensors"),                     # header claims other positions
    (lambda h, l, t: h.update(dtype="bfloat16"), "tensors"),                     # header claims another dtype
    (lambda h, l, t: h.pop("kv_heads"), "header"),
    (lambda h, l, t: l.pop(), "tensors"),                                        # a layer's tensors missing
    (lambda h, l, t: t.to(torch.int32), "tensors"),
])
def test_inconsistent_artifacts_are_refused(edit, check):
    with pytest.raises(ArtifactError) as info:
        _decode(_rebuilt(edit))
    assert info.value.check == check


def test_payload_swapped_under_a_kept_header_is_refused():
    data = bytearray(VALID)
    _, size = parse_header(VALID)
    body = data[8 + size:]
    data[8 + size:] = body[len(body) // 2:] + body[: len(body) // 2]  # swap halves, header untouched
    with pytest.raises(ArtifactError) as info:
        _decode(bytes(data))
    assert info.value.check == "payload"


@pytest.mark.parametrize("data, check", [
    (b"", "format"), (VALID[:100], "format"), (VALID[:-1], "format"),
    ((1 << 40).to_bytes(8, "little") + b"{}", "format"),
    (len(b"not json").to_bytes(8, "little") + b"not json", "header"),
])
def test_truncated_oversized_and_non_json_headers_are_refused(data, check):
    with pytest.raises(ArtifactError) as info:
        _decode(data)
    assert info.value.check == check


def test_wrong_id_is_a_hash_failure():
    with pytest.raises(ArtifactError, match="hash check failed"):
        decode_artifact("0" * 64, VALID)


@pytest.mark.parametrize("artifact_id", ["../" + "a" * 61, "/etc/passwd", "a" * 63 + "\x00", "A" * 64, "a" * 65, ""])
def test_ids_that_could_leave_the_store_are_refused(tmp_path, artifact_id):
    store = Store(tmp_path)
    with pytest.raises(ArtifactError) as info:
        store.read(artifact_id)
    assert info.value.check == "id"


def test_store_put_is_atomic_and_deduplicated(tmp_path):
    store = Store(tmp_path)
    first = store.put(VALID)
    assert store.put(VALID) == first
    assert store.ids() == [first] and store.verify() == []
    assert sorted(p.name for p in store.artifacts.iterdir()) == [f"{first}.safetensors"]


def _put_many(root: str, n: int) -> None:
    store = Store(root)
    for i in range(n):
        data, header = _valid()
        store.put(data)
        store.put(encode_artifact({**header, "answer": str(i)}, torch.arange(TOKENS), _decode(data).layers))


def test_two_processes_depositing_at_once_leave_a_consistent_store(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_put_many, args=(str(tmp_path), 8)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    store = Store(tmp_path)
    assert len(store.ids()) == 9 and store.verify() == []
    assert not list(store.artifacts.glob(".tmp-*"))


def _mutations():
    flip = st.tuples(st.just("flip"), st.integers(0, len(VALID) * 8 - 1))
    cut = st.tuples(st.just("cut"), st.integers(0, len(VALID) - 1))
    header_field = st.sampled_from(["positions", "dtype", "kv_heads", "head_dim", "layers", "format", "payload_sha256"])
    value = st.one_of(st.none(), st.integers(-5, 10**6), st.text(max_size=8), st.lists(st.integers(-3, 9), max_size=3))
    edit = st.tuples(st.just("edit"), st.tuples(header_field, value))
    swap = st.tuples(st.just("swap"), st.tuples(st.integers(0, LAYERS - 1), st.integers(0, LAYERS - 1)))
    return st.one_of(flip, cut, edit, swap)


def _mutate(kind, arg) -> tuple[bytes, bool]:
    """Returns (bytes, whether the bytes are re-encoded so that the id hash matches)."""
    if kind == "flip":
        data = bytearray(VALID)
        data[arg // 8] ^= 1 << (arg % 8)
        return bytes(data), False
    if kind == "cut":
        return VALID[:arg], False
    if kind == "edit":
        name, value = arg
        header = json.loads(parse_header(VALID)[0]["__metadata__"]["graftbench"])
        header[name] = value
        meta_json = json.dumps(header)
        return _with_header(meta_json), True
    i, j = arg
    return _rebuilt(lambda h, l, t: l.__setitem__(i, (l[j][1].clone(), l[i][0].clone()))), True


def _with_header(header_json: str) -> bytes:
    outer, size = parse_header(VALID)
    outer["__metadata__"]["graftbench"] = header_json
    raw = json.dumps(outer).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw + VALID[8 + size:]


VALID_ID = hashlib.sha256(VALID).hexdigest()


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutations())
def test_mutated_artifacts_only_ever_raise_artifact_error(mutation):
    """Read under its original id (as the store does) a mutated file is always refused; read under its own
    hash (a renamed file) it is refused or, if it decodes, internally consistent (refused later by config)."""
    data, _ = _mutate(*mutation)
    if data != VALID:
        with pytest.raises(ArtifactError):
            decode_artifact(VALID_ID, data)
    try:
        artifact = _decode(data)
    except ArtifactError:
        return
    header = artifact.header
    assert payload_sha256(artifact.token_ids, artifact.layers) == header["payload_sha256"]
    assert artifact.token_ids.shape == (header["positions"][1] - header["positions"][0],)
    for spec, (keys, values) in zip(header["layers"], artifact.layers):
        assert keys.shape == values.shape == (1, header["kv_heads"], spec["kept"], header["head_dim"])
