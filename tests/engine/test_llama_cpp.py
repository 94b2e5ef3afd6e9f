"""The llama.cpp engine (graftbench/engine/llama_cpp/engine.py) and its certificate (graftbench/engine/llama_cpp/exactness.py through graftbench/eval/exactness.py).

The model tests run smollm2-135m on llama.cpp as built on this machine, with short AIME 2024 texts, one thread and
a small chunk size (several batches per segment), and compare hashes measured here: nothing recorded on another
CPU is expected.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.engine.pin import PinnedConfig
from graftbench.eval.replay_committed import (CPU_FEATURE_FIELDS, DIFFERS_ACROSS, DIFFERS_UNPROVEN, EQUAL,
                                              EQUAL_ACROSS, INSTRUCTION_SET_FEATURES, NOT_COMPARABLE, judge,
                                              replay_once, system_info_terms, why_not_runnable)
from graftbench.problems.prompts import PromptLayout
from graftbench.results.fingerprint import pin_fingerprint
from graftbench.results.exact_manifest import read_replay_log, verified_cpus, verify_exactness_manifest
from graftbench.results.layout import REPLAY_LOG
from graftbench.util import isa

from tests.conftest import AIME2024, REFERENCE_MANIFESTS, ROOT
from tests.prereqs import llama_missing, need
from tests.replay_lanes import BUNDLED_MODELS

CHUNK = 32
SOLUTION_CHARS = 300  # characters of each worked solution kept in the short problem set


def _short_problems(path, count=4, problem_chars=None):
    """The first ``count`` AIME 2024 problems with their solutions cut to ``SOLUTION_CHARS`` characters (and their
    statements to ``problem_chars`` when given), written to ``path`` (a JSON lines file) so that each pair's artifact
    is a few hundred tokens (fewer with ``problem_chars``, which shortens the queries too)."""
    rows = [json.loads(line) for line in AIME2024.read_text().splitlines()[:count]]
    path.write_text("".join(json.dumps({**row, "problem": row["problem"][:problem_chars],
                                        "solution": row["solution"][:SOLUTION_CHARS]}) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def llama():
    """smollm2-135m on llama.cpp: f16 KV cache, flash attention off, one thread, chunks of ``CHUNK`` tokens."""
    need("llama.cpp", llama_missing())
    from graftbench.engine.llama_cpp.session import open_llama_session

    return open_llama_session("smollm2-135m", chunk_size=CHUNK, threads=1, n_ctx=1024)


@pytest.fixture(scope="module")
def texts(llama):
    """Two short (artifact, query) id lists from AIME 2024 text, tokenized by graftbench's tokenizer."""
    rows = [json.loads(line) for line in AIME2024.read_text().splitlines()[:3]]
    tokenizer = llama.tokenizer
    pairs = []
    for first, second in ((rows[0], rows[1]), (rows[1], rows[2])):
        artifact = tokenizer(f"Problem: {first['problem']}\nSolution: {first['solution']}").input_ids[:100]
        query = tokenizer(f"Problem: {second['problem']}\nFinal answer:", add_special_tokens=False).input_ids[:20]
        pairs.append((artifact, query))
    return pairs


@pytest.mark.model
def test_a_graft_through_llama_cpp_gives_the_fresh_prefills_logits_byte_for_byte(llama, texts):
    from graftbench.engine.llama_cpp.exactness import deposit_state, fresh_logits, graft_logits

    hashes = []
    for artifact, query in texts:
        state = deposit_state(llama, artifact)
        assert state.positions == (0, len(artifact)) and state.token_ids == artifact
        grafted = graft_logits(llama, state, query)
        fresh = fresh_logits(llama, artifact, query)
        assert grafted.shape == (len(query), llama.engine.n_vocab) and grafted.dtype.name == "float32"
        assert llama.engine.logits_sha256(grafted) == llama.engine.logits_sha256(fresh)
        hashes.append(llama.engine.logits_sha256(grafted))
    assert hashes[0] != hashes[1]  # the two pairs' logits are not one constant


@pytest.mark.model
def test_a_restore_into_a_closed_context_cleared_gives_the_fresh_prefills_logits(llama, texts):
    from graftbench.engine.llama_cpp.exactness import deposit_state, fresh_logits

    engine = llama.engine
    for artifact, query in texts:
        held = engine.cleared_cache()  # whatever an earlier test left as the spare, held open
        used = engine.new_cache()
        engine.prefill(used, [*query, *artifact])  # other tokens first, so the cleared context held something
        kept = used.ctx
        used.close()
        cleared = engine.cleared_cache()
        assert cleared.ctx is kept and cleared.n_past == 0  # the spare, not a new context
        restored = engine.restore(deposit_state(llama, artifact), cleared)
        grafted = engine.prefill(restored, query, all_logits=True)
        assert engine.logits_sha256(grafted) == engine.logits_sha256(fresh_logits(llama, artifact, query))
        restored.close()
        held.close()
    other = engine.new_cache(CHUNK // 2)  # another chunk size is never kept as the spare
    other.close()
    assert engine.cleared_cache().chunk_size == CHUNK


@pytest.mark.model
def test_a_restore_into_a_cache_that_holds_tokens_is_refused(llama, texts):
    from graftbench.engine.llama_cpp.exactness import deposit_state

    artifact, _ = texts[0]
    state = deposit_state(llama, artifact)
    cache = llama.engine.new_cache()
    try:
        llama.engine.prefill(cache, artifact[:5])
        with pytest.raises(ValueError, match="holds 5 tokens"):
            llama.engine.restore(state, cache)
        with pytest.raises(ValueError, match="whole sequences"):
            llama.engine.capture(cache, 3)
    finally:
        cache.close()


@pytest.mark.model
def test_another_batch_size_is_reported_as_measured_and_is_another_pin(llama, texts, tmp_path):
    """check-exact's first pair cut to 100 artifact tokens and 24 query tokens: both batch sizes still split the
    artifact into several batches and a last partial one, and a pair's controls cost a few times less than on the
    whole pair (312 and 148 tokens)."""
    from graftbench.eval.exactness import Pair, build_pairs
    from graftbench.engine.llama_cpp.session import open_llama_session
    from graftbench.engine.llama_cpp.exactness import fresh_logits, window_of
    from graftbench.eval.exactness import check_pair
    from graftbench.problems.loading import load_problems

    problems = load_problems(str(_short_problems(tmp_path / "short.jsonl")))
    whole = build_pairs(llama, problems, 1, window=window_of(llama))[0]
    pair = Pair(whole.id, whole.kind, whole.problems, whole.artifact[:100], whole.query[:24])
    record = check_pair(llama, pair, with_controls=True)
    other = CHUNK // 2
    measured = (llama.engine.logits_sha256(fresh_logits(llama, pair.artifact, pair.query))
                == llama.engine.logits_sha256(fresh_logits(llama, pair.artifact, pair.query, other)))
    assert record["controls"][f"chunk-{other}"]["equal"] is measured
    assert record["equal"] and not record["controls"]["shift-8"]["equal"]
    halved = open_llama_session("smollm2-135m", chunk_size=other, threads=1, n_ctx=1024)
    assert halved.config.fingerprint != llama.config.fingerprint
    assert {"n_batch", "n_ubatch"} <= {k for k in llama.config.engine if llama.config.engine[k] != halved.config.engine[k]}


@pytest.mark.model
@pytest.mark.slow
def test_a_llama_cpp_certificate_replays_in_a_second_process(llama, tmp_path):
    """On problems whose statements are cut to 200 characters too: that a certificate replays in another process
    does not depend on the pairs' length, and both processes compute both pairs (artifact + query tokens 223 + 59
    and 174 + 55, not 312 + 148 and 174 + 102)."""
    from graftbench.eval.exactness import run_check_exact
    from graftbench.problems.loading import load_problems

    source = str(_short_problems(tmp_path / "short.jsonl", problem_chars=200))
    manifest = run_check_exact(llama, load_problems(source), source, 2, with_controls=False, control_pairs=0)
    assert manifest["totals"]["pairs"] == 2 and manifest["totals"]["exact_pairs"] == 2
    assert verify_exactness_manifest(manifest) == []
    path = tmp_path / "exact-llama.json"
    path.write_text(json.dumps(manifest))
    done = subprocess.run([sys.executable, "-m", "graftbench.cli.app", "check-exact", "--expect", str(path),
                           "--problems", source], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 compared, 2 equal" in done.stdout
    ranged = subprocess.run([sys.executable, "-m", "graftbench.cli.app", "check-exact", "--expect", str(path),
                             "--problems", source, "--pairs", "1:"], capture_output=True, text=True, timeout=600,
                            cwd=ROOT)
    assert ranged.returncode == 0, ranged.stdout + ranged.stderr
    assert "1 compared, 1 equal" in ranged.stdout  # a fresh process that computes pair 1 alone


@pytest.mark.model
def test_a_range_of_a_llama_cpp_certificate_replays_those_pairs_only(llama, tmp_path):
    """``check-exact --pairs START:END`` on the llama.cpp engine: the pairs outside the range are not looked at, a
    changed hash inside it is found (two pairs of short problems, as above)."""
    from graftbench.eval.exactness import replay, run_check_exact
    from graftbench.problems.loading import load_problems

    problems = load_problems(str(_short_problems(tmp_path / "short.jsonl", problem_chars=200)))
    manifest = run_check_exact(llama, problems, "short", 2, with_controls=False, control_pairs=0)
    tampered = copy.deepcopy(manifest)
    tampered["pairs"][0]["graft_logits_sha256"] = "0" * 64
    result = replay(llama, tampered, problems, first=1)
    assert (result.compared, result.equal, result.passed) == (1, 1, True)
    tampered["pairs"][1]["state_sha256"] = "0" * 64
    result = replay(llama, tampered, problems, first=1)
    assert not result.passed and result.first_difference.startswith("pair-001: ")


def _committed_llama_certificates() -> list[str]:
    """The committed llama.cpp certificates of the bundled models, by path under the results root (the optional
    Qwen models' replay with ``make replay-exact`` where ``make models`` installed them)."""
    found = []
    for path in sorted((ROOT / "manifests").glob("*/exact-*-llama-*.json")):
        config = json.loads(path.read_text())["config"]
        if config["model"] in BUNDLED_MODELS and config["engine"]["engine"] == "llama.cpp":
            found.append(path.relative_to(ROOT).as_posix())
    return found


COMMITTED_LLAMA = _committed_llama_certificates()


# Each committed llama.cpp certificate of the reference machine and its byte-exact pairs of 50: every model and KV
# cache type certified, except Gemma 3's sliding-window layers (docs/llama-cpp.md names the cause)
LLAMA_CERTIFICATES = {"smollm2-135m-llama-f16": 50, "smollm2-135m-llama-q8_0": 50,
                      "qwen2.5-coder-0.5b-llama-f16": 50, "qwen2.5-coder-0.5b-llama-q8_0": 50,
                      "qwen2.5-coder-1.5b-llama-f16": 50, "qwen2.5-coder-1.5b-llama-q8_0": 50,
                      "gemma3-270m-llama-f16": 44}


def test_the_committed_llama_cpp_certificates_are_50_pairs_with_controls_and_verify():
    found = {p.stem.removeprefix("exact-"): p for p in REFERENCE_MANIFESTS.glob("exact-*-llama-*.json")
             if not p.stem.endswith("-portable")}  # the portable build's: tests/engine/test_portable_build.py
    assert set(found) == set(LLAMA_CERTIFICATES)
    for name, exact in LLAMA_CERTIFICATES.items():
        manifest = json.loads(found[name].read_text())
        totals, engine = manifest["totals"], manifest["config"]["engine"]
        assert (totals["pairs"], totals["exact_pairs"]) == (50, exact), name
        assert verify_exactness_manifest(manifest) == [], name
        assert engine["type_k"] == engine["type_v"] == name.rsplit("-", 1)[1], name
        assert totals["controls"]["chunk-128"]["pairs"] == 5, name
        assert all(totals["controls"][f"shift-{k}"]["exact_pairs"] == 0 for k in (8, 128, 1024)), name
        assert len({r["tokens_sha256"] for r in manifest["pairs"]}) == 50, name


# The pin fields that name a llama.cpp build (the CPU features it was built for and detected, the bindings'
# version, which vendors one llama.cpp commit): a replay not comparable in these alone is another build's.
BUILD_FIELDS = frozenset({"cpu_capability", "engine.system_info", "engine.llama_cpp_python",
                          "libraries.llama-cpp-python"})
# The portable build's own identity: its libraries' SHA-256 and the compiler that built them (the version and CMake
# options are the same on every machine, from the Makefile)
PORTABLE_BUILD_FIELDS = frozenset({"engine.build_library_sha256", "engine.build_compiler"})


@pytest.mark.model
@pytest.mark.parametrize("name", COMMITTED_LLAMA)
def test_a_committed_llama_cpp_certificate_replays_here_or_is_declared_another_build(name, tmp_path):
    """A committed certificate's first pair recomputed in a second process under its own engine pin, judged from
    the replay record it logged (:func:`graftbench.eval.replay_committed.judge`).

    - Equal: the pass, on the build the certificate records.
    - Not comparable because this machine's llama.cpp is another build (the pin differs in :data:`BUILD_FIELDS`
      alone, ``system_info`` named): nothing was compared, so this is neither a pass nor a failure but a skip that
      names the differing fields and both builds. A certificate is per build (docs/llama-cpp.md), so another build
      is a declared pin difference, not a missing prerequisite (``need`` is for those: the bindings absent).
    - Not comparable because this machine's portable build is not the recorded one (:data:`PORTABLE_BUILD_FIELDS`
      alone): built by another compiler, a skip naming both; by the same compiler from the same options yet other
      bytes, an expected failure naming both hashes (the build did not reproduce on this machine: a finding for
      docs/portable-pin.md, declared, never a pass).
    - A completed comparison that found a difference: a failure on a kind of CPU the certificate is known to
      reproduce on, an expected failure naming the difference elsewhere.
    - A crash, no record, or a pin that differs in any other field: a failure."""
    expected = json.loads((ROOT / name).read_text())
    need("llama.cpp", why_not_runnable(expected))
    done, record = replay_once(ROOT, ROOT / name, 1, tmp_path / "replay", timeout_s=1800)
    output = done.stdout + done.stderr
    outcome = judge(name, expected, record, done.returncode, output, 1, read_replay_log(ROOT / REPLAY_LOG),
                    isa.environment())
    if outcome.verdict == NOT_COMPARABLE and set(record["pin_differences"]) <= BUILD_FIELDS:
        assert "not comparable" in output and "engine.system_info" in record["pin_differences"], output
        from graftbench.engine.llama_cpp.engine import system_info

        pytest.skip(f"{name} not comparable on this llama.cpp build: the pin differs in "
                    f"{', '.join(record['pin_differences'])} (recorded system_info "
                    f"{expected['config']['engine']['system_info']!r}, this build's {system_info()!r})")
    if outcome.verdict == NOT_COMPARABLE and set(record["pin_differences"]) <= PORTABLE_BUILD_FIELDS:
        _declare_another_portable_build(name, expected["config"]["engine"], record["pin_differences"], output)
    if outcome.verdict == DIFFERS_UNPROVEN:
        pytest.xfail(outcome.detail)
    assert outcome.verdict == EQUAL, f"{outcome.verdict}: {outcome.detail}\n{output}"
    assert "1 compared, 1 equal" in output


def _declare_another_portable_build(name: str, recorded: dict, differing: list[str], output: str) -> None:
    """Skip (another compiler) or expect to fail (the same compiler and options, other bytes) a replay of the
    portable certificate ``name`` that this machine's portable build could not compare, naming both builds."""
    from graftbench.engine.llama_cpp.portable_build import identity

    assert differing and "not comparable" in output, output
    here = identity()
    both = (f"recorded {recorded.get('build_compiler')!r}, libraries {str(recorded.get('build_library_sha256'))[:12]}; "
            f"this machine's {here['compiler']!r}, libraries {here['library_sha256'][:12]}")
    if "engine.build_compiler" in differing:
        pytest.skip(f"{name} not comparable: this machine's portable llama.cpp build is another compiler's ({both})")
    pytest.xfail(f"{name} not comparable: the portable llama.cpp build did not reproduce its libraries on this machine "
                 f"from the same compiler and options ({both})")


@pytest.mark.model
@pytest.mark.slow
def test_across_cpu_kinds_compares_a_certificate_of_other_cpu_features_and_proves_no_kind(tmp_path):
    """``check-exact --expect --across-cpu-kinds`` on a committed certificate's first pair, in a second process,
    judged from its record. Which branch runs depends on this machine's llama.cpp build, and each is checked:

    - the recorded build: the option changes nothing (an ordinary replay, equal, its record without
      ``across_cpu_kinds``);
    - a build that differs in detected CPU features alone: the pair is compared, the record names the differing
      fields and this build's features against the recorded ones, the verdict is a comparison on another kind of
      CPU (equal or not), and the record verifies no CPU;
    - another llama.cpp (a version or build switch): still not comparable, a named skip as in the replay above."""
    from graftbench.engine.llama_cpp.engine import system_info

    name = "manifests/amd-epyc-avx512/exact-smollm2-135m-llama-f16.json"
    expected = json.loads((ROOT / name).read_text())
    need("llama.cpp", why_not_runnable(expected))
    done, record = replay_once(ROOT, ROOT / name, 1, tmp_path / "replay", timeout_s=1800, across_cpu_kinds=True)
    output = done.stdout + done.stderr
    outcome = judge(name, expected, record, done.returncode, output, 1, read_replay_log(ROOT / REPLAY_LOG),
                    isa.environment())
    recorded, here = (system_info_terms(info) for info in (expected["config"]["engine"]["system_info"], system_info()))
    if outcome.verdict == NOT_COMPARABLE:
        beyond = set(record["pin_differences"]) - set(CPU_FEATURE_FIELDS)
        switches = {k for k in recorded.keys() | here.keys() if recorded.get(k) != here.get(k)} - INSTRUCTION_SET_FEATURES
        assert "across_cpu_kinds" not in record and (beyond or switches), output
        pytest.skip(f"{name}: this llama.cpp differs from the recorded one in more than CPU features (the pin differs "
                    f"in {', '.join(record['pin_differences'])}): nothing compared")
    if recorded == here:  # the recorded build: the option changes nothing
        assert "across_cpu_kinds" not in record and "another kind of CPU" not in output, output
        if outcome.verdict == DIFFERS_UNPROVEN:
            pytest.xfail(outcome.detail)
        assert outcome.verdict == EQUAL, f"{outcome.verdict}: {outcome.detail}\n{output}"
    else:  # a build that differs in detected CPU features alone
        _assert_compared_across_cpu_kinds(expected, record, outcome, output, recorded, here)


def _assert_compared_across_cpu_kinds(expected, record, outcome, output, recorded, here):
    """A completed comparison on another kind of CPU: one pair compared, only CPU-feature fields differing, the
    features named, and no kind of CPU proven by it."""
    assert outcome.verdict in (EQUAL_ACROSS, DIFFERS_ACROSS), f"{outcome.verdict}: {outcome.detail}\n{output}"
    assert record["compared"] == 1 and set(record["pin_differences"]) <= set(CPU_FEATURE_FIELDS)
    assert record["across_cpu_kinds"] == {
        "recorded_only": sorted(f"{k} = {v}" for k, v in recorded.items() if here.get(k) != v),
        "replayed_only": sorted(f"{k} = {v}" for k, v in here.items() if recorded.get(k) != v)}
    assert verified_cpus(expected, [record]) == verified_cpus(expected, [])  # it proves no kind of CPU
    if outcome.verdict == EQUAL_ACROSS:
        assert "1 compared, 1 equal on another kind of CPU (not a replay on the recorded kind)" in output


@pytest.mark.model
def test_a_replay_under_another_kv_cache_type_is_not_comparable(llama, tmp_path):
    from graftbench.engine.llama_cpp.session import open_llama_session
    from graftbench.eval.exactness import replay, run_check_exact
    from graftbench.problems.loading import load_problems

    source = str(_short_problems(tmp_path / "short.jsonl", count=2))
    problems = load_problems(source)
    manifest = run_check_exact(llama, problems, source, 1, with_controls=False, control_pairs=0)
    quantized = open_llama_session("smollm2-135m", chunk_size=CHUNK, threads=1, n_ctx=1024, kv_type="q8_0",
                                   flash_attn=True)
    result = replay(quantized, manifest, problems)
    assert result.compared == 0 and not result.passed
    assert {"engine.type_k", "engine.type_v", "engine.flash_attn", "cache_class"} <= set(result.pin_differences)


@pytest.mark.model
def test_llama_cpp_engine_fields_make_another_pin(llama, session):
    config = llama.config
    assert config.engine["engine"] == "llama.cpp" and config.engine["system_info"].startswith("CPU :")
    assert config.weights_sha256 == session.config.weights_sha256  # the same GGUF file
    assert config.fingerprint != session.config.fingerprint
    for name, value in (("type_k", "q8_0"), ("system_info", "CPU : AVX2 = 1"), ("llama_cpp_python", "0.3.35"),
                        ("flash_attn", True), ("n_ubatch", CHUNK * 2)):
        assert replace(config, engine={**config.engine, name: value}).fingerprint != config.fingerprint, name
    assert "engine" not in session.config.to_dict()


def test_a_pin_without_an_engine_field_keeps_the_committed_torch_fingerprints():
    torch_expectations = [p for p in sorted(REFERENCE_MANIFESTS.glob("exact-*.json")) if "-llama-" not in p.name]
    assert len(torch_expectations) >= 9
    for path in torch_expectations:
        manifest = json.loads(path.read_text())
        config = manifest["config"]
        assert "engine" not in config, path.name
        rebuilt = PinnedConfig(**{**config, "layout": PromptLayout(**config["layout"])})
        assert rebuilt.fingerprint == pin_fingerprint(config) == manifest["config_fingerprint"], path.name
        assert verify_exactness_manifest(manifest) == [], path.name


@pytest.mark.parametrize("kv_type, flash_attn, message", [
    ("q5_1", False, "not one of f16, q8_0, q4_0"),
    ("q8_0", False, "needs flash attention on"),
])
def test_a_bad_kv_cache_option_is_refused_before_the_model_loads(kv_type, flash_attn, message, tmp_path):
    from graftbench.engine.llama_cpp.engine import LlamaCppEngine

    with pytest.raises(ValueError, match=message):
        LlamaCppEngine(str(tmp_path / "absent.gguf"), kv_type=kv_type, flash_attn=flash_attn)


def test_an_unknown_engine_is_refused_naming_the_option():
    result = CliRunner().invoke(app, ["check-exact", "--engine", "vllm", "--problems", str(AIME2024)])
    assert result.exit_code == 2
    assert "'vllm' is not one of torch, llama.cpp" in result.output


def _query_after_artifact(llama, config, data, artifact, query):
    """``restore_or_prefill`` of the artifact ``data`` under ``config``, then the query: ``(refusal, the query's
    logits SHA-256)``; the cache must hold the artifact's tokens either way."""
    from graftbench.store.ids import artifact_id_of
    from graftbench.engine.llama_cpp.codec import restore_or_prefill

    cache, refusal = restore_or_prefill(llama.engine, config, artifact_id_of(data), data, artifact)
    try:
        assert cache.token_ids == artifact
        return refusal, llama.engine.logits_sha256(llama.engine.prefill(cache, query, all_logits=True))
    finally:
        cache.close()


@pytest.mark.model
def test_a_llama_state_artifact_round_trips_and_its_graft_equals_the_fresh_prefill(llama, texts):
    from graftbench.engine.llama_cpp.exactness import deposit_state, fresh_logits
    from graftbench.engine.llama_cpp.codec import encode_llama_artifact

    artifact, query = texts[0]
    state = deposit_state(llama, artifact)
    data = encode_llama_artifact(llama.config, state, {"source": "test"})
    assert encode_llama_artifact(llama.config, state, {"source": "test"}) == data
    refusal, logits_sha256 = _query_after_artifact(llama, llama.config, data, artifact, query)
    assert refusal is None
    assert logits_sha256 == llama.engine.logits_sha256(fresh_logits(llama, artifact, query))


@pytest.mark.model
def test_a_llama_state_artifact_that_is_corrupt_or_of_another_pin_is_refused_and_prefilled(llama, texts):
    from graftbench.engine.llama_cpp.exactness import deposit_state, fresh_logits
    from graftbench.store.codec import ArtifactError
    from graftbench.store.ids import artifact_id_of
    from graftbench.engine.llama_cpp.codec import decode_llama_artifact, encode_llama_artifact

    artifact, query = texts[1]
    data = encode_llama_artifact(llama.config, deposit_state(llama, artifact))
    artifact_id = artifact_id_of(data)
    flipped = bytearray(data)
    flipped[-1] ^= 1
    checks = {}
    for name, (key, blob, config) in {
        "flipped under its id": (artifact_id, bytes(flipped), llama.config),
        "flipped, id recomputed": (artifact_id_of(bytes(flipped)), bytes(flipped), llama.config),
        "q8_0 pin": (artifact_id, data, replace(llama.config, engine={**llama.config.engine, "type_k": "q8_0",
                                                                       "type_v": "q8_0"})),
    }.items():
        with pytest.raises(ArtifactError) as refused:
            decode_llama_artifact(key, blob, config)
        checks[name] = refused.value.check
    assert checks == {"flipped under its id": "hash", "flipped, id recomputed": "payload", "q8_0 pin": "config"}
    other = replace(llama.config, engine={**llama.config.engine, "llama_cpp_python": "0.3.35"})
    refusal, logits_sha256 = _query_after_artifact(llama, other, data, artifact, query)
    assert refusal is not None and refusal.check == "config"
    assert logits_sha256 == llama.engine.logits_sha256(fresh_logits(llama, artifact, query))


@pytest.mark.model
def test_greedy_and_seeded_decoding_after_a_graft_give_the_fresh_prefills_tokens(llama, texts):
    from graftbench.engine.llama_cpp.decode import decode, eos_ids_of
    from graftbench.engine.torch.sampling import SamplingSettings
    from graftbench.engine.llama_cpp.exactness import deposit_state

    artifact, query = texts[0]
    state, engine, eos = deposit_state(llama, artifact), llama.engine, eos_ids_of(llama.engine, llama.tokenizer)
    runs = {}
    for how, settings in (("greedy", None), ("sampled", SamplingSettings(temperature=1.0, top_p=0.95, seed=7))):
        for start in ("graft", "fresh"):
            cache = engine.restore(state) if start == "graft" else engine.new_cache()
            try:
                if start == "fresh":
                    engine.prefill(cache, artifact)
                first = engine.prefill(cache, query)
                runs[how, start] = decode(engine, llama.tokenizer, cache, first, 8, eos, settings=settings, seed=11)
            finally:
                cache.close()
        assert runs[how, "graft"].token_ids == runs[how, "fresh"].token_ids, how
    for result in runs.values():
        assert (len(result.token_ids), result.finish_reason) == (8, "budget") or result.finish_reason == "eos"
