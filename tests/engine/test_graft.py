"""The graft on the real default model and real AIME text: exactness, refusal, teeth of the certificate."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from graftbench.engine.torch import forward, graft
from graftbench.store import router
from graftbench.store.codec import ArtifactError
from graftbench.store.folder import Store


def _deposit(session, store, problem, answer=None, solution=None):
    ids = session.deposit_ids(problem.problem, answer or problem.answer, solution or problem.solution)
    data, _ = graft.build_artifact(session.model, session.config, ids, {"problem_key": problem.id})
    return store.put(data), ids


@pytest.fixture()
def store(tmp_path):
    return Store(tmp_path / "store")


@pytest.fixture(scope="module")
def deposits(session, aime2024):
    """``_deposit``'s artifact bytes and deposit ids of AIME 2024's first three problems with their whole solutions,
    by problem id, each built once for the module: the tests that need one put these bytes into their own store
    (:func:`_put`) instead of prefilling the same solution again (a build is deterministic under the pin, so the
    bytes are those the test would build)."""
    built = {}
    for problem in aime2024[:3]:
        ids = session.deposit_ids(problem.problem, problem.answer, problem.solution)
        data, _ = graft.build_artifact(session.model, session.config, ids, {"problem_key": problem.id})
        built[problem.id] = (data, ids)
    return built


def _put(store, deposits, problem):
    """The module's artifact of ``problem`` (:func:`deposits`) put into ``store``: (its id, its deposit ids)."""
    data, ids = deposits[problem.id]
    return store.put(data), ids


def test_graft_is_byte_exact_against_fresh_chunked_recompute(session, store, aime2024, deposits):
    for problem in aime2024[:3]:
        artifact_id, ids = _put(store, deposits, problem)
        query = session.query_ids(problem.problem)
        cache, _ = graft.restore_chain(session.model, session.config, store, artifact_id)
        grafted = forward.prefill(session.model, cache, query, session.config.chunk_size, all_logits=True)
        fresh_cache = forward.new_cache(session.model)
        forward.prefill(session.model, fresh_cache, ids, session.config.chunk_size)
        fresh = forward.prefill(session.model, fresh_cache, query, session.config.chunk_size, all_logits=True)
        assert grafted.shape == (len(query), session.model.config.vocab_size)
        assert forward.logits_sha256(grafted) == forward.logits_sha256(fresh)


def test_monolithic_forward_is_not_byte_exact(session, aime2024):
    """Negative control: one forward over artifact + query has other matmul shapes, so the bytes differ."""
    problem = aime2024[0]
    ids = session.deposit_ids(problem.problem, problem.answer, problem.solution)
    query = session.query_ids(problem.problem)
    chunked = graft.fresh_recompute(session.model, session.config, [ids], query)
    mono = forward.forward(session.model, forward.new_cache(session.model), ids + query)
    delta = (chunked - mono).abs().max().item()
    assert 0 < delta < 1e-3
    assert torch.argmax(chunked) == torch.argmax(mono)


def test_store_round_trip_is_bit_exact(session, store, aime2024, deposits):
    problem = aime2024[1]
    ids = session.deposit_ids(problem.problem, problem.answer, problem.solution)
    cache = forward.new_cache(session.model)
    forward.prefill(session.model, cache, ids, session.config.chunk_size)
    artifact_id, _ = _put(store, deposits, problem)
    artifact = store.read(artifact_id)
    assert artifact.token_ids.tolist() == ids
    for layer, (keys, values) in zip(cache.layers, artifact.layers):
        assert torch.equal(layer.keys.view(torch.int32), keys.view(torch.int32))
        assert torch.equal(layer.values.view(torch.int32), values.view(torch.int32))


def test_same_deposit_twice_gives_one_copy(session, store, aime2024):
    problem, solution = aime2024[2], aime2024[2].solution[:400]  # its opening: storing once needs no long prefill
    first, _ = _deposit(session, store, problem, solution=solution)
    second, _ = _deposit(session, store, problem, solution=solution)
    assert first == second
    assert store.ids() == [first]
    assert len(list(store.artifacts.glob("*.safetensors"))) == 1
    assert not list(store.artifacts.glob(".tmp-*"))


def test_artifact_of_another_model_is_refused(session, store, aime2024):
    other = dataclasses.replace(session.config, weights_sha256="0" * 64)
    problem = aime2024[0]
    ids = session.deposit_ids(problem.problem, problem.answer, problem.solution)[:40]
    data, _ = graft.build_artifact(session.model, other, ids, {})
    artifact_id = store.put(data)
    with pytest.raises(ArtifactError, match="config check failed: config_fingerprint") as info:
        graft.restore_chain(session.model, session.config, store, artifact_id)
    assert info.value.check == "config" and info.value.artifact_id == artifact_id


def test_flipped_bit_is_refused(session, store, aime2024, deposits):
    artifact_id, _ = _put(store, deposits, aime2024[0])
    path = store.path(artifact_id)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="hash check failed") as info:
        store.read(artifact_id)
    assert info.value.artifact_id == artifact_id


def test_changed_cache_value_changes_graft_hash_but_not_fresh(session, store, aime2024, deposits):
    """--certify cannot pass by sharing state: the recompute ignores the grafted cache entirely."""
    problem = aime2024[0]
    artifact_id, ids = _put(store, deposits, problem)
    query = session.query_ids(problem.problem)
    cache, _ = graft.restore_chain(session.model, session.config, store, artifact_id)
    clean = forward.logits_sha256(forward.prefill(session.model, cache, query, session.config.chunk_size))

    cache, _ = graft.restore_chain(session.model, session.config, store, artifact_id)
    cache.layers[5].keys[0, 1, 10, 7] += 0.5
    tampered = forward.logits_sha256(forward.prefill(session.model, cache, query, session.config.chunk_size))
    fresh = forward.logits_sha256(graft.fresh_recompute(session.model, session.config, [ids], query))
    assert tampered != clean
    assert fresh == clean


def _graft_answer(session, store, artifact_id, problem, max_new_tokens=8):
    cache, _ = graft.restore_chain(session.model, session.config, store, artifact_id)
    logits = forward.prefill(session.model, cache, session.query_ids(problem.problem), session.config.chunk_size)
    return forward.greedy_decode(session.model, session.tokenizer, cache, logits, max_new_tokens, session.eos_ids,
                                stop="\n")


def test_grafted_model_repeats_a_wrong_deposited_answer(session, store, aime2024, deposits):
    """The answer comes from the graft, not from the key: an artifact stating 777 makes the model say 777."""
    problem = aime2024[0]
    solution = problem.solution.replace("204", "777")
    artifact_id, _ = _deposit(session, store, problem, answer="777", solution=solution)
    decoded = _graft_answer(session, store, artifact_id, problem)
    assert decoded.text.strip() == "777"
    honest_id, _ = _put(store, deposits, problem)
    assert _graft_answer(session, store, honest_id, problem).text.strip() == "204"


def test_chained_artifact_grafts_exact_and_missing_parent_is_refused(session, tmp_path, aime2024):
    store = Store(tmp_path / "chain")
    first, second = aime2024[0], aime2024[1]
    ids_a = session.deposit_ids(first.problem, first.answer, first.solution)
    data, _ = graft.build_artifact(session.model, session.config, ids_a, {})
    parent_id = store.put(data)
    ids_b = session.tokenizer(f"Problem: {second.problem}\nFinal answer: {second.answer}\n\n",
                              add_special_tokens=False).input_ids
    data, _ = graft.build_artifact(session.model, session.config, ids_b, {}, parent=store.read(parent_id))
    child_id = store.put(data)
    assert store.read(child_id).header["positions"] == [len(ids_a), len(ids_a) + len(ids_b)]

    query = session.query_ids(second.problem)
    cache, chain = graft.restore_chain(session.model, session.config, store, child_id)
    assert [link.id for link in chain] == [parent_id, child_id]
    grafted = forward.prefill(session.model, cache, query, session.config.chunk_size)
    fresh = graft.fresh_recompute(session.model, session.config, [ids_a, ids_b], query)
    assert forward.logits_sha256(grafted) == forward.logits_sha256(fresh)

    store.path(parent_id).unlink()
    with pytest.raises(ArtifactError, match="parent check failed"):
        graft.restore_chain(session.model, session.config, store, child_id)


def test_router_exact_similar_and_gated(session, store):
    from graftbench.problems.types import Problem, normalize_problem_text, problem_key

    seen = Problem("a", "Find the remainder when $7^{222}$ is divided by $1000$.", "49", "7^222 ... Final answer: 49")
    artifact_id, _ = _deposit(session, store, seen)
    # _deposit keys by id; index it by the normalized text as deposit() does
    data, _ = graft.build_artifact(
        session.model, session.config, session.deposit_ids(seen.problem, seen.answer, seen.solution),
        {"problem_key": problem_key(seen), "problem_text": normalize_problem_text(seen.problem)},
    )
    indexed = store.put(data)
    fp = session.config.fingerprint

    def route(p, gate=0.6):
        return router.route(store, fp, problem_key(p), normalize_problem_text(p.problem), gate)

    assert route(Problem("b", "Find the remainder when  $7^{222}$ is divided by $1000$. ", "49")).kind == "exact"
    near = route(Problem("c", "Find the remainder when $7^{223}$ is divided by $1000$.", "43"))
    assert near.kind == "similar" and near.artifact_id == indexed and near.similarity > 0.9
    far = route(Problem("d", "How many subsets of a 10-element set have exactly three elements?", "120"))
    assert far.kind == "none" and far.artifact_id is None
    assert route(Problem("c", "Find the remainder when $7^{223}$ is divided by $1000$.", "43"), gate=0.999).kind == "none"
    assert artifact_id != indexed


def test_a_forward_runs_at_its_pins_thread_count_whatever_the_process_set_since(session, aime2024):
    """A matmul's reduction split follows torch's intra-op thread count (on this suite's CPUs 2024-I-2's artifact
    differs at 1 and 2 threads), so every forward of a session's model runs at the count its pin recorded, even after
    another session or a command in the same process set another."""
    problem = aime2024[1]
    ids = session.deposit_ids(problem.problem, problem.answer, problem.solution)
    pinned = session.config.threads
    other = 1 if pinned > 1 else 2
    before = graft.build_artifact(session.model, session.config, ids, {})[0]
    torch.set_num_threads(other)
    try:
        after = graft.build_artifact(session.model, session.config, ids, {})[0]
        assert torch.get_num_threads() == pinned
    finally:
        torch.set_num_threads(pinned)
    assert after == before
