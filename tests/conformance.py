"""The engine conformance checks: what every engine must do for graftbench's exactness contract to hold on it,
each a function of one loaded session (:class:`graftbench.engine.base.EngineSession`) that raises
``AssertionError`` saying what failed. ``tests/contract/test_engine_conformance.py`` runs them on every registered engine;
they are the checklist of a new engine (docs/engines.md).

1. :func:`check_pin_fields`: the pin names the model, weights, tokenizer, dtype, device, threads, chunk schedule and
   layout, its fingerprint is stable, and an engine other than torch names itself in the pin's ``engine``.
2. :func:`check_restore_equals_recompute`: an artifact deposited through the store and grafted back, then the query,
   gives the bytes of a fresh recompute (the logits at the query's last position), and the engine's exactness
   checks agree at every query position.
3. :func:`check_foreign_and_corrupt_refused`: an artifact of another pin, another engine's artifact, and a damaged
   file are refused with :class:`graftbench.store.codec.ArtifactError`, never grafted.
4. :func:`check_decode_budget`: a decode stops at its budget (tokens), greedy and sampled.
5. :func:`check_seeded_sampling`: the same seeds draw the same tokens, other seeds other tokens.
6. :func:`check_claimed_controls`: each control the engine claims to differ moves the logits' bytes, and the graft
   itself does not.
"""

from __future__ import annotations

import json
import re
import struct
import time
from pathlib import Path

from graftbench.engine.base import EXACTNESS_CONTROLS, SamplingSettings, capabilities_of
from graftbench.store.codec import ArtifactError
from graftbench.store.folder import Store

DEPOSIT_TEXT = ("Problem: What is the sum of the first five positive odd numbers?\nFinal answer: 25\n"
                "Solution: The first five positive odd numbers are 1, 3, 5, 7 and 9. Adding them in order gives "
                "1 + 3 = 4, 4 + 5 = 9, 9 + 7 = 16 and 16 + 9 = 25, the square of five.\nFinal answer: 25\n\n")
QUERY_TEXT = "Problem: What is the sum of the first six positive odd numbers?\nFinal answer:"
PIN_FIELDS = ("model", "weights_sha256", "tokenizer_sha256", "dtype", "device", "threads", "chunk_size", "layout")
BUDGET = 4  # tokens decoded by the budget and sampling checks
SEEDS = [11, 12, 13, 11]  # the first and last draw alike; 11, 12 and 13 not all alike


def _texts(session) -> tuple[list[int], list[int]]:
    """The deposit's token ids (with start tokens) and the query's (without), by the session's tokenizer."""
    tokenizer = session.tokenizer
    return (list(tokenizer(DEPOSIT_TEXT).input_ids),
            list(tokenizer(QUERY_TEXT, add_special_tokens=False).input_ids))


def _sha(session, logits) -> str:
    return session.logits_sha256(logits)


def check_pin_fields(session) -> None:
    """The pin's fields are present and typed, its fingerprint 64 hex digits and the same when asked again, and an
    engine other than torch names itself in the pin's ``engine`` dict (so no two engines share a fingerprint)."""
    pin = session.config.to_dict()
    missing = [name for name in PIN_FIELDS if pin.get(name) in (None, "")]
    assert not missing, f"{session.engine_name}: the pin lacks {missing}"
    assert re.fullmatch(r"[0-9a-f]{64}", pin["weights_sha256"]), "weights_sha256 is not a SHA-256"
    assert re.fullmatch(r"[0-9a-f]{64}", pin["tokenizer_sha256"]), "tokenizer_sha256 is not a SHA-256"
    assert isinstance(pin["chunk_size"], int) and pin["chunk_size"] > 0
    assert isinstance(pin["threads"], int) and pin["threads"] > 0
    fingerprint = session.config.fingerprint
    assert re.fullmatch(r"[0-9a-f]{64}", fingerprint) and session.config.fingerprint == fingerprint
    json.dumps(pin, allow_nan=False)  # JSON-ready: a manifest records it
    if session.engine_name != "torch":
        assert pin.get("engine", {}).get("engine") == session.engine_name, \
            f"{session.engine_name}: the pin's engine dict does not name the engine ({pin.get('engine')!r})"


def _deposit(session, store: Store, ids: list[int]) -> str:
    """Build the artifact of ``ids`` and put it in ``store`` (with this session's pin as its writer record)."""
    data = session.build_artifact(ids, {"problem_id": "conformance", "problem_key": "conformance"})
    return store.put(data, session.config.to_dict())


def check_restore_equals_recompute(session, store_root: Path) -> None:
    """An artifact deposited in a store and grafted back holds the deposit at its positions: the query after it
    gives the logits bytes of a fresh recompute of deposit and query (the certificate ``eval --certify`` checks),
    twice over (a graft is not consumed); the engine's exactness checks give equal bytes at every query position."""
    deposit, query = _texts(session)
    store = Store(store_root)
    artifact_id = _deposit(session, store, deposit)
    header = store.header(artifact_id)
    assert header.get("config_fingerprint") == session.config.fingerprint
    assert header.get("positions") == [0, len(deposit)], header.get("positions")
    reference = _sha(session, session.recompute([deposit], query))
    for _ in range(2):
        grafted = session.graft(store, artifact_id, room=len(query) + BUDGET)
        assert [len(s) for s in grafted.segments] == [len(deposit)] and grafted.segments[0] == deposit
        got = _sha(session, session.prefill_after(grafted.cache, query))
        assert got == reference, f"{session.engine_name}: graft {got[:16]} != recompute {reference[:16]}"
    checks = session.exactness()
    deposited = checks.deposit(deposit)
    graft_all, fresh_all = checks.graft_logits(deposited, query), checks.fresh_logits(deposit, query)
    assert tuple(graft_all.shape)[0] == len(query), f"{tuple(graft_all.shape)} is not one row per query token"
    assert _sha(session, graft_all) == _sha(session, fresh_all), \
        f"{session.engine_name}: the exactness check's graft differs from its fresh prefill"


def _reheadered(data: bytes, **changes) -> bytes:
    """Artifact bytes (a safetensors file) with the graftbench header's fields ``changes`` replaced, the tensors
    as they were: another pin's artifact, as far as its header says."""
    length = struct.unpack_from("<Q", data)[0]
    table = json.loads(data[8:8 + length])
    header = json.loads(table["__metadata__"]["graftbench"])
    table["__metadata__"]["graftbench"] = json.dumps({**header, **changes}, sort_keys=True, separators=(",", ":"))
    raw = json.dumps(table, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data[8 + length:]


def check_foreign_and_corrupt_refused(session, store_root: Path, foreign_artifacts: dict[str, bytes]) -> None:
    """Every artifact that is not this pin's own, sound deposit is refused by :meth:`graft` with an
    :class:`ArtifactError`: the session's own artifact relabelled with another pin's fingerprint, each of
    ``foreign_artifacts`` (name to bytes: another engine's or another model's artifact), the session's artifact with
    one byte of its payload flipped on disk, and with its file cut short."""
    deposit, query = _texts(session)
    store = Store(store_root)
    own = session.build_artifact(deposit, {"problem_id": "conformance", "problem_key": "conformance"})
    candidates = {"another pin's fingerprint": _reheadered(own, config_fingerprint="0" * 64), **foreign_artifacts}
    for name, data in candidates.items():
        artifact_id = store.put(data, None)
        _assert_refused(session, store, artifact_id, len(query), ("config", "format", "header", "tensors", "payload",
                                                                  "parent"), f"{name} ({artifact_id[:16]})")
    for damage in ("flipped", "truncated"):
        artifact_id = store.put(own, session.config.to_dict())
        path = store.path(artifact_id)
        data = bytearray(path.read_bytes())
        if damage == "flipped":
            data[-3] ^= 0x40
        path.write_bytes(bytes(data) if damage == "flipped" else bytes(data[:-5]))
        _assert_refused(session, store, artifact_id, len(query), ("hash", "size", "payload", "read", "tensors",
                                                                  "format"), f"its artifact with its file {damage}")
        path.unlink()


def _assert_refused(session, store, artifact_id: str, room: int, checks: tuple[str, ...], what: str) -> None:
    """Grafting ``artifact_id`` raises an ``ArtifactError`` whose failed check is one of ``checks``."""
    try:
        session.graft(store, artifact_id, room=room)
    except ArtifactError as refusal:
        assert refusal.check in checks, refusal
    else:
        raise AssertionError(f"{session.engine_name} grafted {what}")


def check_decode_budget(session) -> None:
    """A decode returns at most ``budget`` tokens, exactly that many when it stopped for the budget, greedy and for
    each sampled seed."""
    prompt = session.solve_prompt_ids("What is 6 times 7?")
    for seeds, budget in ((None, 1), (None, BUDGET), (SEEDS[:2], BUDGET)):
        cache, logits = session.prefill_prompt(prompt)
        sampling = SamplingSettings(1.0, 1.0, 0) if seeds else None
        decoded = session.decode(cache, logits, budget, sampling, seeds, None, time.perf_counter())
        assert len(decoded) == (len(seeds) if seeds else 1)
        for d in decoded:
            assert 1 <= len(d.token_ids) <= budget, f"{len(d.token_ids)} tokens for a budget of {budget}"
            assert d.finish_reason in ("budget", "eos", "stop"), d.finish_reason
            assert d.finish_reason != "budget" or len(d.token_ids) == budget, \
                f"stopped for the budget after {len(d.token_ids)} of {budget} tokens"


def check_seeded_sampling(session) -> None:
    """Sampled decodes of one prompt are reproducible: seeds ``[a, b, c, a]`` give the first and last sample the same
    tokens, every sample the same again when decoded a second time, and ``a``, ``b``, ``c`` not all the same tokens
    (temperature 1, the whole distribution)."""
    prompt = session.solve_prompt_ids("What is 6 times 7?")
    runs = []
    for _ in range(2):
        cache, logits = session.prefill_prompt(prompt)
        decoded = session.decode(cache, logits, BUDGET, SamplingSettings(1.0, 1.0, 0), SEEDS, None,
                                 time.perf_counter())
        runs.append([list(d.token_ids) for d in decoded])
    assert runs[0] == runs[1], f"{session.engine_name}: the same seeds drew other tokens: {runs}"
    assert runs[0][0] == runs[0][3], f"{session.engine_name}: one seed drew two ways in one batch: {runs[0]}"
    assert len({tuple(ids) for ids in runs[0][:3]}) > 1, \
        f"{session.engine_name}: three seeds drew the same {BUDGET} tokens: {runs[0]}"


def check_claimed_controls(session) -> list[str]:
    """Each control the engine claims to differ (``control_settings()["must_differ"]``) moves the query's logits
    bytes against its reference, while the graft itself does not; every claimed control is run. An engine without
    the exactness-controls capability claims none. Returns the controls checked."""
    checks = session.exactness()
    claimed = list(checks.control_settings().get("must_differ", []))
    if EXACTNESS_CONTROLS not in capabilities_of(session):
        assert not claimed, f"{session.engine_name} claims controls {claimed} without the capability"
        return []
    assert claimed, f"{session.engine_name} declares exactness controls but claims none to differ"
    deposit, query = _texts(session)
    deposited = checks.deposit(deposit)
    fresh = checks.fresh_logits(deposit, query)
    assert _sha(session, checks.graft_logits(deposited, query)) == _sha(session, fresh), \
        f"{session.engine_name}: the graft the controls are measured against differs from the fresh prefill"
    seen = {}
    for name, reference, other in checks.controls(deposit, query, fresh, deposited):
        seen[name] = _sha(session, reference) != _sha(session, other)
    unrun = sorted(set(claimed) - set(seen))
    assert not unrun, f"{session.engine_name} claims {unrun} but its controls did not run them"
    exact = [name for name in claimed if not seen[name]]
    assert not exact, f"{session.engine_name}: the controls {exact} it claims to differ gave the graft's bytes"
    return claimed
