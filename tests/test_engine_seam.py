"""The engine seam (graftbench/engine/base.py): the torch engine through it computes the logits bytes the direct
calls compute, for a fresh prefill, a decode step and a graft."""

from __future__ import annotations

import torch

from graftbench.engine.torch import forward, graft
from graftbench.engine.base import Engine
from graftbench.engine.torch.kv_cache import reserve
from graftbench.engine.torch.engine import TorchEngine
from graftbench.store.codec import decode_artifact
from graftbench.store.ids import artifact_id_of

DEPOSIT = "Problem: What is 6 times 7?\nFinal answer: 42\nSolution: 6 times 7 is 42.\nFinal answer: 42\n\n"
QUERY = "Problem: What is 6 times 7?\nFinal answer:"


def test_the_torch_engine_is_the_seam_and_adds_no_pin_field(session):
    engine = TorchEngine(session)
    assert isinstance(engine, Engine)
    assert engine.name == "torch" and engine.pin_fields() == {}
    assert engine.tokenize(QUERY) == session.tokenizer(QUERY, add_special_tokens=False).input_ids


def test_a_fresh_prefill_and_a_decode_step_through_the_seam_hash_as_the_direct_path(session):
    engine, model, chunk = TorchEngine(session), session.model, session.config.chunk_size
    ids = engine.tokenize(DEPOSIT + QUERY)
    direct_cache = forward.new_cache(model)
    direct = forward.prefill(model, direct_cache, ids, chunk)
    seam_cache = engine.new_cache()
    seam = engine.prefill(seam_cache, ids, chunk)
    assert seam.shape == (model.config.vocab_size,)
    assert engine.logits_sha256(seam) == forward.logits_sha256(direct)
    token = int(torch.argmax(seam))
    reserve(direct_cache, direct_cache.get_seq_length() + 1)
    step_direct = forward.forward(model, direct_cache, [token])
    step_seam = engine.decode_step(seam_cache, token)
    assert engine.logits_sha256(step_seam) == forward.logits_sha256(step_direct)
    every = engine.prefill(engine.new_cache(), ids, chunk, all_logits=True)
    every_direct = forward.prefill(model, forward.new_cache(model), ids, chunk, all_logits=True)
    assert every.shape == (len(ids), model.config.vocab_size)
    assert engine.logits_sha256(every) == forward.logits_sha256(every_direct)


def test_a_graft_through_the_seam_hashes_as_the_direct_path(session):
    engine, model, config = TorchEngine(session), session.model, session.config
    deposit, query = session.tokenizer(DEPOSIT).input_ids, engine.tokenize(QUERY)
    data, header = graft.build_artifact(model, config, deposit, {})
    direct_cache = graft.restore(model, config, decode_artifact(artifact_id_of(data), data))
    direct = forward.prefill(model, direct_cache, query, config.chunk_size)
    seam_cache = engine.restore(decode_artifact(artifact_id_of(data), data))
    specs, tensors = engine.capture(seam_cache, 0)
    assert specs == header["layers"] and len(tensors) == len(specs)
    seam = engine.prefill(seam_cache, query, config.chunk_size)
    assert engine.logits_sha256(seam) == forward.logits_sha256(direct)
    fresh_cache = engine.new_cache()
    engine.prefill(fresh_cache, deposit, config.chunk_size)
    fresh = engine.prefill(fresh_cache, query, config.chunk_size)
    assert engine.logits_sha256(fresh) == forward.logits_sha256(graft.fresh_recompute(model, config, [deposit], query))
