"""The preallocated KV cache: appends equal concatenation, adopted artifact tensors are never written, reserved
room is used without moving, batches repeat and shrink, and (with a model) the logits equal ``DynamicCache``'s."""

import hashlib
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from graftbench.engine.torch import forward, graft
from graftbench.store.codec import decode_artifact
from graftbench.engine.torch.kv_cache import GROWTH_STEP, PreallocatedLayer, new_cache, reserve


def _kv(batch: int, tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, tokens, 8, generator=g), torch.randn(batch, 3, tokens, 8, generator=g)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=12))
def test_appends_return_exactly_the_concatenation(sizes):
    layer, keys, values = PreallocatedLayer(), [], []
    for i, n in enumerate(sizes):
        k, v = _kv(1, n, i)
        keys.append(k), values.append(v)
        got_k, got_v = layer.update(k, v)
        assert torch.equal(got_k, torch.cat(keys, dim=-2)) and torch.equal(got_v, torch.cat(values, dim=-2))
    assert layer.get_seq_length() == sum(sizes) <= layer.capacity


def test_growth_is_by_a_quarter_or_a_step_so_appends_rarely_move():
    layer = PreallocatedLayer()
    moves, last = 0, None
    for i in range(2048):
        layer.update(*_kv(1, 1, i))
        if layer._key_buffer.data_ptr() != last:
            moves, last = moves + 1, layer._key_buffer.data_ptr()
    assert layer.capacity % GROWTH_STEP == 0
    assert moves == 7 and layer.capacity == 2304  # 256, 512, 768, 1,024, 1,280, 1,792, 2,304 positions


def test_reserved_room_is_written_in_place():
    layer = PreallocatedLayer()
    layer.update(*_kv(1, 10, 0))
    layer.reserve(500)
    pointer = layer._key_buffer.data_ptr()
    for i in range(490):
        layer.update(*_kv(1, 1, i + 1))
    assert layer._key_buffer.data_ptr() == pointer and layer.capacity == 500 and layer.get_seq_length() == 500
    layer.update(*_kv(1, 1, 999))
    assert layer._key_buffer.data_ptr() != pointer and layer.capacity == 768


def test_adopted_tensors_are_never_written():
    keys, values = _kv(1, 40, 1)
    kept_k, kept_v = keys.clone(), values.clone()
    layer = PreallocatedLayer()
    layer.adopt(keys, values)
    assert layer.capacity == 40 and layer.keys.data_ptr() == keys.data_ptr()  # no copy at restore
    layer.update(*_kv(1, 5, 2))
    assert torch.equal(keys, kept_k) and torch.equal(values, kept_v)
    assert torch.equal(layer.keys[:, :, :40], kept_k) and layer.get_seq_length() == 45


def test_batch_repeat_then_select_keeps_rows_and_room():
    layer = PreallocatedLayer()
    k, v = _kv(1, 20, 3)
    layer.update(k, v)
    layer.reserve(300)
    layer.batch_repeat_interleave(4)
    assert layer.keys.shape == (4, 3, 20, 8) and layer.capacity == 300
    step_k, step_v = _kv(4, 1, 4)
    layer.update(step_k, step_v)
    layer.batch_select_indices(torch.tensor([1, 3]))
    assert torch.equal(layer.keys[:, :, :20], k.expand(2, -1, -1, -1))
    assert torch.equal(layer.keys[:, :, 20:], step_k[[1, 3]])


def test_crop_and_reset():
    layer = PreallocatedLayer()
    layer.update(*_kv(1, 30, 5))
    layer.crop(-10)
    assert layer.get_seq_length() == 20 and layer.keys.shape[-2] == 20
    with pytest.raises(ValueError, match="negative"):
        layer.crop(3)
    layer.reset()
    assert layer.get_seq_length() == 0


@pytest.mark.model
def test_logits_equal_dynamic_cache_bit_for_bit(session):
    """The cache class changes where keys and values live, not the numbers: a two-segment chunked prefill and a
    greedy decode give the same logits as ``transformers``' ``DynamicCache``, byte for byte."""
    model = session.model
    ids = torch.randint(100, 5000, (700,), generator=torch.Generator().manual_seed(0)).tolist()

    def run(cache):
        first = forward.prefill(model, cache, ids[:600], 256, all_logits=True)
        logits = [first, forward.prefill(model, cache, ids[600:], 256, all_logits=True)]
        for _ in range(6):
            logits.append(forward.forward(model, cache, [int(logits[-1][-1].argmax())]))
        return torch.cat(logits)

    assert torch.equal(run(new_cache(model)), run(DynamicCache(config=model.config)))


@pytest.mark.model
def test_graft_then_decode_moves_the_artifact_once(session):
    """A restored cache adopts the artifact's tensors; reserving the decode budget moves them once, and decoding
    then writes in place."""
    model = session.model
    ids = torch.randint(100, 5000, (300,), generator=torch.Generator().manual_seed(1)).tolist()
    data, _ = graft.build_artifact(model, session.config, ids, {"text_sha256": "t"})
    artifact = decode_artifact(hashlib.sha256(data).hexdigest(), data)
    cache = graft.restore(model, session.config, artifact)
    layer = cache.layers[0]
    assert isinstance(layer, PreallocatedLayer)
    assert layer.keys.data_ptr() == artifact.layers[0][0].data_ptr() and layer.capacity == 300
    reserve(cache, 300 + 16)
    pointer = layer._key_buffer.data_ptr()
    decoded = forward.greedy_decode(model, session.tokenizer, cache, forward.forward(model, cache, ids[:1]), 8, set())
    assert len(decoded.token_ids) == 8 and layer._key_buffer.data_ptr() == pointer


def test_adopting_buffers_with_room_appends_in_place_and_refuses_foreign_buffers():
    buffer_k, buffer_v = _kv(1, 64, 7)
    layer = PreallocatedLayer()
    layer.adopt(buffer_k[:, :, :40], buffer_v[:, :, :40], buffer_k, buffer_v)
    assert layer.capacity == 64 and layer.get_seq_length() == 40
    step = _kv(1, 3, 8)
    layer.update(*step)
    assert layer._key_buffer.data_ptr() == buffer_k.data_ptr() and torch.equal(buffer_k[:, :, 40:43], step[0])
    with pytest.raises(ValueError, match="first positions"):
        PreallocatedLayer().adopt(buffer_k[:, :, 1:41], buffer_v[:, :, :40], buffer_k, buffer_v)


@pytest.mark.model
def test_a_read_with_room_is_grafted_without_a_move_and_only_once(session, tmp_path):
    """Store.read with room reads the keys and values into buffers with spare positions (same bytes, same digest);
    the first restore takes them and the query and decode append in place; a second restore of the same read
    artifact gets no room, so two caches never share spare positions."""
    from graftbench.store.folder import Store

    model = session.model
    ids = torch.randint(100, 5000, (200,), generator=torch.Generator().manual_seed(2)).tolist()
    data, _ = graft.build_artifact(model, session.config, ids, {"text_sha256": "t"})
    store = Store(tmp_path / "s")
    artifact_id = store.put(data)
    plain, roomy = store.read(artifact_id), store.read(artifact_id, room=50)
    assert plain.room is None and all(torch.equal(a, b) for pa, pb in zip(plain.layers, roomy.layers)
                                      for a, b in zip(pa, pb))
    kept = [k.clone() for k, _ in roomy.layers]
    cache = graft.restore(model, session.config, roomy)
    layer = cache.layers[0]
    assert layer.capacity == 250 and layer._key_buffer.data_ptr() == roomy.layers[0][0].data_ptr()
    forward.prefill(model, cache, ids[:10], 64)
    assert layer.capacity == 250 and layer._key_buffer.data_ptr() == roomy.layers[0][0].data_ptr()
    assert all(torch.equal(k, kept_k) for (k, _), kept_k in zip(roomy.layers, kept))
    again = graft.restore(model, session.config, roomy)
    assert again.layers[0].capacity == 200
    logits_roomy = forward.prefill(model, graft.restore(model, session.config, store.read(artifact_id, room=9)),
                                  ids[:10], 64)
    logits_plain = forward.prefill(model, graft.restore(model, session.config, plain), ids[:10], 64)
    assert torch.equal(logits_roomy, logits_plain)


class _OlderForward(torch.nn.Module):
    """A model whose forward takes the cache as ``past_key_values`` (transformers 5.x before the rename, e.g. 5.17)
    and, like transformers' models, swallows unknown keywords: it records what it got."""

    def __init__(self):
        super().__init__()
        self.got = {}

    def forward(self, input_ids=None, position_ids=None, past_key_values=None, use_cache=None, logits_to_keep=0,
                **kwargs):
        self.got = {"past_key_values": past_key_values, **kwargs}
        past_key_values.layers[0].update(torch.zeros(1, 1, input_ids.shape[1], 2), torch.zeros(1, 1, input_ids.shape[1], 2))
        return SimpleNamespace(logits=torch.zeros(input_ids.shape[0], input_ids.shape[1], 3))


def test_the_cache_goes_under_the_keyword_the_forward_takes(session):
    older = _OlderForward()
    cache = DynamicCache()
    cache.layers = [PreallocatedLayer()]
    forward.forward(older, cache, [1, 2, 3])
    assert older.got == {"past_key_values": cache} and cache.get_seq_length() == 3
    forward.forward_batch(older, cache, [4])
    assert older.got == {"past_key_values": cache} and cache.get_seq_length() == 4
    assert forward.cache_keyword(session.model) == "cache"  # the pinned transformers (constraints.txt)


def test_a_forward_that_takes_no_cache_is_refused():
    class NoCache(torch.nn.Module):
        def forward(self, input_ids=None, **kwargs):
            return None

    with pytest.raises(TypeError, match="NoCache.forward takes neither 'cache' nor 'past_key_values'"):
        forward.cache_keyword(NoCache())
