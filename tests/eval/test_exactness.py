"""check-exact: byte-exact pairs, controls with teeth, the chunk schedule, and the pre-registered replay."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from graftbench.engine.torch import forward
from graftbench.eval import exactness
from graftbench.results import layout
from graftbench.util import isa
from graftbench.results.exact_manifest import pin_differences, read_replay_log, verify_exactness_manifest
from graftbench.eval.exactness import build_pairs, replay, run_check_exact
from graftbench.eval.replay_committed import DIFFERS_UNPROVEN, EQUAL, judge

from tests.replay_lanes import (BUNDLED_MODELS, COMMITTED, EXPECTATION_FOLDERS, REPLAY_PAIRS, Replayed, cannot_run,
                           start_session_replays)
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_manifest(session, aime2024):
    return run_check_exact(session, aime2024, "aime2024", samples=5, with_controls=True, control_pairs=2)


def test_pairs_cover_short_long_and_cross_window_on_real_text(session, aime2024):
    pairs = build_pairs(session, aime2024, 10)
    kinds = [p.kind for p in pairs]
    assert kinds.count("long") == 2 and kinds.count("cross-window") == 2 and kinds.count("short") == 6
    for pair in pairs:
        if pair.kind == "long":
            assert len(pair.artifact) >= exactness.LONG_MIN and len(pair.problems) >= 2
        if pair.kind == "cross-window":
            assert len(pair.artifact) < 512 < len(pair.artifact) + len(pair.query)


def test_every_pair_is_byte_exact_at_every_query_position(small_manifest):
    totals = small_manifest["totals"]
    assert totals["pairs"] == totals["exact_pairs"] == 5
    for record in small_manifest["pairs"]:
        assert record["graft_logits_sha256"] == record["fresh_logits_sha256"]
        assert record["kl_max"] == 0.0 and record["max_abs_delta"] == 0.0 and record["argmax_agreement"] == 1.0
    assert verify_exactness_manifest(small_manifest) == []


def test_controls_have_teeth(small_manifest):
    controls = small_manifest["totals"]["controls"]
    assert set(controls) == {"monolithic", "chunk-32", "shift-8", "shift-128", "shift-1024", "key-bit-flip"}
    for name in ("monolithic", "shift-8", "shift-128", "shift-1024"):
        assert controls[name]["exact_pairs"] == 0 and controls[name]["max_abs_delta"] > 0, name
        assert controls[name]["max_abs_delta"] < 1e-2, name  # small float differences, not a broken graft


def test_an_interrupted_check_resumes_from_its_records(session, aime2024, small_manifest):
    reused, measured = [], []
    resumed = run_check_exact(session, aime2024, "aime2024", samples=5, with_controls=True, control_pairs=2,
                              done=small_manifest["pairs"][:3], on_pair=measured.append, on_reused=reused.append)
    assert [r["id"] for r in reused] == ["pair-000", "pair-001", "pair-002"]
    assert [r["id"] for r in measured] == ["pair-003", "pair-004"]
    assert resumed["pairs"] == small_manifest["pairs"]  # the same records as the uninterrupted run
    assert verify_exactness_manifest(resumed) == []


def test_an_expectation_extends_to_more_pairs_measuring_only_the_new_ones(session, aime2024, small_manifest):
    start, records = exactness.extension_base(session, small_manifest, aime2024, samples=7)
    assert start.config.fingerprint == small_manifest["config_fingerprint"] and records == small_manifest["pairs"]
    measured = []
    extended = run_check_exact(start, aime2024, "aime2024", samples=7, with_controls=True, control_pairs=2,
                               done=records, on_pair=measured.append)
    assert [r["id"] for r in measured] == ["pair-005", "pair-006"]
    assert extended["pairs"][:5] == small_manifest["pairs"] and extended["totals"]["exact_pairs"] == 7
    assert extended["config_fingerprint"] == small_manifest["config_fingerprint"]
    assert verify_exactness_manifest(extended) == []


def test_an_expectation_of_another_pin_set_or_seal_is_not_extended(session, aime2024, small_manifest):
    with pytest.raises(ValueError, match="differing: threads"):
        other_pin = {**small_manifest, "config": {**small_manifest["config"], "threads": 64}}
        exactness.extension_base(session, {**other_pin, "manifest_sha256": _seal(other_pin)}, aime2024, samples=7)
    with pytest.raises(ValueError, match="differing: problem_set.sha256"):
        exactness.extension_base(session, small_manifest, aime2024[1:], samples=7)
    with pytest.raises(ValueError, match="4 pairs asked for, fewer than the expectation's 5"):
        exactness.extension_base(session, small_manifest, aime2024, samples=4)
    tampered = copy.deepcopy(small_manifest)
    tampered["pairs"][0]["graft_logits_sha256"] = "0" * 64
    with pytest.raises(ValueError, match="not a sound expectation: .*pair pair-000"):
        exactness.extension_base(session, tampered, aime2024, samples=7)


def _seal(manifest: dict) -> str:
    from graftbench.util.hashing import sha256_json

    return sha256_json({k: v for k, v in manifest.items() if k != "manifest_sha256"})


def test_a_record_of_other_tokens_or_controls_is_measured_again(session, aime2024, small_manifest):
    pair = build_pairs(session, aime2024, 5)[0]
    record = small_manifest["pairs"][0]  # measured with controls
    assert exactness.reusable(record, pair, with_controls=True)
    assert not exactness.reusable(record, pair, with_controls=False)
    assert not exactness.reusable({**record, "tokens_sha256": "0" * 64}, pair, with_controls=True)
    assert not exactness.reusable(None, pair, with_controls=True)


def test_rotate_cache_handles_a_model_whose_config_lists_layer_types_but_has_one_rope_base():
    from types import SimpleNamespace

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=64)
    model = Qwen2ForCausalLM(config)
    assert config.layer_types == ["full_attention", "full_attention"]  # listed, though Qwen2's RoPE has one base
    keys = torch.randn(1, 2, 5, 8)
    cache = SimpleNamespace(layers=[SimpleNamespace(keys=keys.clone()) for _ in range(2)])
    from graftbench.engine.torch.exactness import rotate_cache

    rotate_cache(SimpleNamespace(model=model), cache, 0)
    assert all(torch.allclose(layer.keys, keys, atol=1e-6) for layer in cache.layers)  # shift 0: unchanged
    rotate_cache(SimpleNamespace(model=model), cache, 8)
    for layer in cache.layers:
        assert not torch.allclose(layer.keys, keys)
        assert torch.allclose(layer.keys.norm(dim=-1), keys.norm(dim=-1), atol=1e-5)  # a rotation keeps norms


def test_chunk_boundaries_restart_at_each_segment(session, monkeypatch):
    sizes = []
    real = forward.forward

    def spy(model, cache, ids, all_logits=False, offset=0):
        sizes.append(len(ids))
        return real(model, cache, ids, all_logits=all_logits, offset=offset)

    monkeypatch.setattr(forward, "forward", spy)
    cache = forward.new_cache(session.model)
    forward.prefill(session.model, cache, list(range(100, 250)), 64)  # artifact: 150 tokens
    forward.prefill(session.model, cache, list(range(300, 370)), 64)  # query: 70 tokens, from its own start
    assert sizes == [64, 64, 22, 64, 6]


def test_replay_passes_then_fails_on_a_changed_hash(session, aime2024, small_manifest):
    result = replay(session, small_manifest, aime2024, limit=2)
    assert (result.compared, result.equal, result.passed) == (2, 2, True)
    tampered = copy.deepcopy(small_manifest)
    record = tampered["pairs"][1]
    record["graft_logits_sha256"] = ("0" if record["graft_logits_sha256"][0] != "0" else "1") + record["graft_logits_sha256"][1:]
    result = replay(session, tampered, aime2024, limit=3)
    assert not result.passed and result.first_difference.startswith("pair-001: graft logits")
    assert (result.compared, result.equal) == (2, 1)


def test_replay_under_another_pin_is_not_comparable(session, aime2024, small_manifest):
    other = copy.deepcopy(small_manifest)
    other["config"]["threads"] += 1
    other["config"]["libraries"]["torch"] = "0.0"
    result = replay(session, other, aime2024, limit=1)
    assert not result.passed and result.compared == 0
    assert result.pin_differences == ["libraries.torch", "threads"]
    assert pin_differences(small_manifest["config"], {**small_manifest["config"], "model": "alias"}) == []
    assert pin_differences(small_manifest["config"], {**small_manifest["config"], "layout": {"query": "x"}}) == []
    # "Another" CPU is built from this one's capability: a value this machine cannot have, whatever CPU it is.
    other_capability = sorted({"DEFAULT", "AVX2", "AVX512"} - {small_manifest["config"]["cpu_capability"]})[0]
    ported = {**small_manifest["config"], "isa": "other", "cpu_capability": other_capability}
    assert pin_differences(small_manifest["config"], ported) == ["cpu_capability", "isa"]


REPLAY_LOG = ROOT / layout.REPLAY_LOG


@pytest.mark.parametrize("folder", EXPECTATION_FOLDERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_bundled_model_and_dtype_has_a_committed_expectation_under_the_portable_pin(folder):
    configs = {p: json.loads(p.read_text())["config"] for p in sorted(folder.glob("exact-*.json"))}
    manifests = [json.loads(p.read_text()) for p, config in configs.items()
                 if config["model"] in BUNDLED_MODELS and "engine" not in config]  # torch's; llama.cpp's apart
    pins = {(m["config"]["model"], m["config"]["dtype"], m["config"].get("isa")): m for m in manifests}
    assert len(pins) == len(manifests)
    every = {(model, dtype, "avx2") for model in BUNDLED_MODELS for dtype in ("float32", "bfloat16")}
    # --isa portable's expectations (make record-exact-portable): float32 of each bundled model, and smollm2-135m in
    # bfloat16; recorded over sessions, each one whole
    portable = {(model, "float32", "portable") for model in BUNDLED_MODELS} | {("smollm2-135m", "bfloat16", "portable")}
    if folder == REFERENCE_MANIFESTS:
        assert every <= set(pins) <= every | portable
    else:  # another kind of CPU's folder fills over sessions (hours a recording); each expectation in it is whole
        assert manifests and set(pins) <= every | portable
    for manifest in manifests:
        assert verify_exactness_manifest(manifest) == []
        assert manifest["totals"]["pairs"] == manifest["totals"]["exact_pairs"] == 50
        assert len({r["tokens_sha256"] for r in manifest["pairs"]}) == 50
        assert manifest["config"]["cpu_capability"] == "AVX2"
        assert isa.same_cpu_kind(manifest["environment"], manifests[0]["environment"])  # one kind of CPU a folder


def test_each_folder_of_expectations_is_another_kind_of_cpu():
    kinds = [json.loads((folder / "exact-smollm2-135m.json").read_text())["environment"]
             for folder in EXPECTATION_FOLDERS]
    assert kinds[0]["cpu_model"] == "AMD EPYC"
    assert not any(isa.same_cpu_kind(a, b) for i, a in enumerate(kinds) for b in kinds[i + 1:])


# The optional models' torch expectations: pairs and control pairs each must have, by (model, dtype).
QWEN_EXPECTATIONS = {("qwen2.5-coder-0.5b", "float32"): (50, 10), ("qwen2.5-coder-0.5b", "bfloat16"): (50, 5),
                     ("qwen2.5-coder-1.5b", "float32"): (50, 3), ("qwen2.5-coder-1.5b", "bfloat16"): (50, 3)}


def test_committed_qwen_expectations_are_whole_exact_and_portable():
    committed = [json.loads(p.read_text()) for p in sorted(REFERENCE_MANIFESTS.glob("exact-qwen*.json"))
                 if "-llama-" not in p.name]  # the llama.cpp certificates: tests/engine/test_llama_cpp.py
    assert {(m["config"]["model"], m["config"]["dtype"]) for m in committed} == set(QWEN_EXPECTATIONS)
    for manifest in committed:
        pin = manifest["config"]
        pairs, control_pairs = QWEN_EXPECTATIONS[(pin["model"], pin["dtype"])]
        assert verify_exactness_manifest(manifest) == []
        assert manifest["totals"]["pairs"] == manifest["totals"]["exact_pairs"] == pairs
        assert len({r["tokens_sha256"] for r in manifest["pairs"]}) == pairs
        assert sum("controls" in r for r in manifest["pairs"]) == control_pairs
        assert (pin["isa"], pin["threads"], pin["cpu_capability"]) == ("avx2", 1, "AVX2")


def test_fifty_pairs_are_distinct_and_the_first_thirty_keep_their_tokens(session, aime2024):
    pairs = build_pairs(session, aime2024, 50)
    assert len({p.tokens_sha256 for p in pairs}) == 50
    assert [p.kind for p in pairs].count("long") == 10 and [p.kind for p in pairs].count("cross-window") == 10
    assert [p.tokens_sha256 for p in pairs[:30]] == [p.tokens_sha256 for p in build_pairs(session, aime2024, 30)]


def test_pairs_come_from_check_exacts_own_layout_not_evals(session, aime2024):
    from dataclasses import replace

    from graftbench.engine.torch.session import TorchSession

    changed = TorchSession(session.loaded, replace(session.config, layout=replace(session.config.layout, deposit="X {problem}",
                                                                             query="Y {problem}")), session.eos_ids)
    assert [p.tokens_sha256 for p in build_pairs(changed, aime2024, 6)] == \
        [p.tokens_sha256 for p in build_pairs(session, aime2024, 6)]
    other = exactness.PairLayout(deposit="Q: {problem}\nA: {answer}\n{solution}\n", query="Q: {problem}\nA:")
    assert build_pairs(session, aime2024, 1, other)[0].tokens_sha256 != build_pairs(session, aime2024, 1)[0].tokens_sha256


AMD = {"cpu_model": "AMD EPYC", "cpu_capability_native": "AVX512"}  # as recorded before the kernel flags
XEON = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_capability_native": "AVX512",
        "cpu_kernel_flags": ["amx_bf16", "amx_tile", "avx512_bf16"]}


def test_verified_cpus_grow_only_with_equal_replays_of_the_same_expectation():
    from graftbench.results.exact_manifest import verified_cpus

    expected = {"manifest_sha256": "m", "environment": AMD}
    good = {"expectation_sha256": "m", "pin_differences": [], "compared": 5, "equal": 5, "replayed_on": XEON}
    assert verified_cpus(expected, []) == [AMD]
    assert verified_cpus(expected, [good]) == [AMD, XEON]
    assert verified_cpus(expected, [{**good, "equal": 4}]) == [AMD]
    assert verified_cpus(expected, [{**good, "expectation_sha256": "other"}]) == [AMD]
    assert verified_cpus(expected, [{**good, "pin_differences": ["threads"]}]) == [AMD]


def test_an_expectation_is_trusted_only_on_the_kind_of_cpu_it_reproduced_on():
    """The replay test is strict only where the expectation is known to reproduce. One capability is not one kind
    of CPU: an AMD EPYC and an Intel Xeon, both AVX512, computed other bytes under the same pin."""
    from graftbench.results.exact_manifest import known_to_reproduce

    expected = {"manifest_sha256": "m", "environment": AMD}
    failed = {"expectation_sha256": "m", "pin_differences": [], "compared": 1, "equal": 0, "replayed_on": XEON}
    assert known_to_reproduce(expected, [], {**AMD, "cpu_kernel_flags": ["avx512_bf16"]})  # older record: no flags
    assert not known_to_reproduce(expected, [failed], XEON)
    assert not known_to_reproduce(expected, [], {**AMD, "cpu_capability_native": "AVX2"})
    assert known_to_reproduce(expected, [{**failed, "compared": 5, "equal": 5}], XEON)
    xeon_expected = {"manifest_sha256": "x", "environment": XEON}
    assert known_to_reproduce(xeon_expected, [], dict(XEON))
    assert not known_to_reproduce(xeon_expected, [], {**XEON, "cpu_kernel_flags": ["avx512_bf16"]})  # no AMX
    assert not known_to_reproduce({"environment": {}}, [], XEON)


def test_cpu_kind_is_read_from_cpuinfo_flags():
    flags = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "amx_bf16", "sse2"}
    assert isa.kernel_flags(flags) == ["amx_bf16"]
    assert isa.describe_cpu(XEON) == "Intel(R) Xeon(R) Processor (AVX512; amx_bf16 amx_tile avx512_bf16)"
    assert isa.describe_cpu(AMD) == "AMD EPYC (AVX512)"
    assert isa.describe_cpu({**AMD, "cpu_kernel_flags": []}) == "AMD EPYC (AVX512; no kernel flags)"


@pytest.fixture(scope="module")
def replays() -> dict[str, Replayed]:
    """Every runnable committed expectation replayed once in a fresh process, started in the background when the
    session began (:mod:`tests.replay_lanes`; these tests run last), here waited for."""
    return start_session_replays().results()


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("name", COMMITTED)
def test_committed_expectation_replays_on_this_machine(name, replays):
    """The cross-machine check: 5 pairs of each committed expectation recomputed here under its own pin, hash for
    hash, judged from the replay record the replay logged (:func:`graftbench.eval.replay_committed.judge`), not
    from its exit status alone. Strict on every kind of CPU the expectation is known to reproduce on (where it was
    recorded, and each kind with an equal replay in manifests/replays.jsonl). On another kind, a completed comparison
    that found a difference is a finding to log (``make replay-exact``), reported as an expected failure naming the
    difference and both CPUs. A replay that crashed, logged no record, or was not comparable (the pins are set by
    ``make``, so a pin difference here is a broken install) fails on every CPU."""
    expected = json.loads((ROOT / layout.MANIFESTS / name).read_text())
    reason = cannot_run(name, expected)
    if reason is not None:
        pytest.skip(reason)
    done = replays[name]
    outcome = judge(name, expected, done.record, done.process.returncode, done.output, REPLAY_PAIRS,
                    read_replay_log(REPLAY_LOG), isa.environment())
    if outcome.verdict == DIFFERS_UNPROVEN:
        pytest.xfail(f"{name} (--isa {expected['config'].get('isa', 'native')}): {outcome.detail} (log it with "
                     "`make replay-exact`)")
    assert outcome.verdict == EQUAL, f"{outcome.verdict}: {outcome.detail}\n{done.output}"
    assert f"{REPLAY_PAIRS} compared, {REPLAY_PAIRS} equal" in done.output


def test_replays_build_artifacts_under_the_layout_the_expectation_recorded(session):
    from graftbench.eval.exactness import as_recorded

    committed = json.loads((REFERENCE_MANIFESTS / "exact-smollm2-135m.json").read_text())["config"]["layout"]
    recorded = {**committed, "query": "Q: {problem}\nA:"}  # an expectation recorded under an earlier eval layout
    replayed = as_recorded(session, recorded)
    assert replayed.config.to_dict()["layout"] == recorded
    assert replayed.config.to_dict()["layout"] != session.config.to_dict()["layout"]
    assert {k: v for k, v in replayed.config.to_dict().items() if k != "layout"} == \
        {k: v for k, v in session.config.to_dict().items() if k != "layout"}
