"""The conformance suite: the same checks (tests/conformance.py) on every registered engine — torch and llama.cpp
on smollm2-135m (llama.cpp a named skip where llama-cpp-python is not importable) and the stand-in engine of the
tests (tests/stand_in_engine.py), registered through the public path — and the stand-in's broken twin, which
restores a state one position off, failing them. Torch and llama.cpp are each handed the other's artifact of the same
model and text, besides the stand-in's, and must refuse it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graftbench.engine import registry
from graftbench.engine.base import EngineOptions

from tests import conformance, stand_in_engine
from tests.conftest import ROOT, SESSION_MODEL
from tests.prereqs import llama_missing, need

STAND_IN = f"{stand_in_engine.__name__}:ENGINE"
# How the suite opens the built-in engines' model; another engine names its own (its factory's
# ``conformance_options``). torch uses the session's loaded model (the ``session`` fixture).
BUILTIN_OPTIONS = {"llama.cpp": EngineOptions(model=SESSION_MODEL, chunk_size=32, threads=1, n_ctx=1024)}
MODEL_ENGINES = ("torch", "llama.cpp")  # engines whose checks load smollm2-135m
ENGINES = [pytest.param(name, marks=pytest.mark.model) if name in MODEL_ENGINES else name
           for name in dict.fromkeys([*registry.engine_names(), stand_in_engine.NAME])]


@pytest.fixture(scope="module")
def stand_in_registered():
    """The stand-in registered under its name for this module, by its ``module:attribute`` (the public path)."""
    registry.register(stand_in_engine.NAME, STAND_IN)
    yield registry.get(stand_in_engine.NAME)
    registry.unregister(stand_in_engine.NAME)


@pytest.fixture(scope="module", params=ENGINES)
def engine(request, stand_in_registered):
    """One registered engine's session on its conformance model, with the artifacts foreign to it."""
    name = request.param
    if name in MODEL_ENGINES:
        session = _builtin_session(request, name)
    else:
        factory = registry.get(name)
        options = getattr(factory, "conformance_options", None)
        assert options is not None, (f"engine {name!r} names no conformance_options (the EngineOptions the suite "
                                     "opens it with): give its factory one")
        session = factory.open(options)
    assert session.engine_name == name
    other = stand_in_engine.ENGINE.open(EngineOptions(model=f"{stand_in_engine.MODEL_PREFIX}@7", chunk_size=16))
    foreign = {"the stand-in's artifact of another model": _artifact_of(other)}
    if name in MODEL_ENGINES:  # the other built-in engine's artifact of the same model and problem text
        peer = next(engine for engine in MODEL_ENGINES if engine != name)
        foreign[f"{peer}'s artifact of {SESSION_MODEL}"] = _artifact_of(_builtin_session(request, peer))
    return session, foreign


def _builtin_session(request, name: str):
    """A session of the built-in engine ``name`` on the conformance model (torch: the loaded ``session``; llama.cpp:
    a named need where llama-cpp-python is not importable)."""
    if name == "torch":
        return request.getfixturevalue("session")
    need("llama.cpp", llama_missing())
    return registry.get(name).open(BUILTIN_OPTIONS[name])


def _artifact_of(session) -> bytes:
    """``session``'s artifact (bytes) of the conformance deposit text."""
    deposit, _ = conformance._texts(session)
    return session.build_artifact(deposit, {"problem_id": "other"})


def test_the_pin_names_the_model_weights_tokenizer_and_schedule_and_the_engine(engine):
    conformance.check_pin_fields(engine[0])


def test_a_grafted_artifact_gives_the_bytes_of_a_fresh_recompute(engine, tmp_path):
    conformance.check_restore_equals_recompute(engine[0], tmp_path / "store")


def test_a_foreign_or_corrupt_artifact_is_refused(engine, tmp_path):
    conformance.check_foreign_and_corrupt_refused(engine[0], tmp_path / "store", engine[1])


def test_a_decode_stops_at_its_budget(engine):
    conformance.check_decode_budget(engine[0])


def test_seeded_sampling_is_reproducible(engine):
    conformance.check_seeded_sampling(engine[0])


def test_each_control_the_engine_claims_moves_the_bytes(engine):
    claimed = conformance.check_claimed_controls(engine[0])
    assert "key-bit-flip" in claimed or not claimed  # an engine with controls claims the sensitivity control


def test_the_broken_twin_restoring_one_position_off_fails_conformance(tmp_path):
    twin = stand_in_engine.BROKEN_TWIN.open(stand_in_engine.ENGINE.conformance_options)
    conformance.check_pin_fields(twin)  # what does not restore still passes: the failures below are the restore's
    conformance.check_decode_budget(twin)
    with pytest.raises(AssertionError, match="graft .* != recompute"):
        conformance.check_restore_equals_recompute(twin, tmp_path / "store")
    with pytest.raises(AssertionError, match="differs from the fresh prefill"):
        conformance.check_claimed_controls(twin)


def test_the_stand_in_imports_neither_torch_nor_llama_cpp_and_opens_through_the_registry():
    script = (
        "import sys\n"
        "from graftbench.engine import registry\n"
        "from graftbench.engine.base import EngineOptions\n"
        f"registry.register('stand-in', {STAND_IN!r})\n"
        "session = registry.open_engine('stand-in', EngineOptions(model='stand-in-tiny', chunk_size=16))\n"
        "from tests import conformance\n"
        "conformance.check_pin_fields(session); conformance.check_claimed_controls(session)\n"
        "print(sorted(m for m in ('torch', 'llama_cpp', 'transformers') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_the_store_keeps_another_engines_state_format_and_each_engine_reads_only_its_own(tmp_path):
    from graftbench.store.codec import LLAMA_FORMAT, ArtifactError, is_state_format
    from graftbench.store.folder import Store
    from graftbench.store.llama_state import encode_state

    assert is_state_format(stand_in_engine.STATE_FORMAT) and is_state_format(LLAMA_FORMAT)
    assert not is_state_format("graftbench.artifact/1") and not is_state_format("graftbench.x-state/0")
    session = stand_in_engine.ENGINE.open(stand_in_engine.ENGINE.conformance_options)
    deposit, _ = conformance._texts(session)
    store = Store(tmp_path / "store")
    artifact_id = store.put(session.build_artifact(deposit, {"problem_id": "p"}), session.config.to_dict())
    assert store.audit(artifact_id)["format"] == stand_in_engine.STATE_FORMAT  # store verify checks it
    assert store.read_state(artifact_id, formats=(stand_in_engine.STATE_FORMAT,))[1] == deposit
    with pytest.raises(ArtifactError) as refused:
        store.read_state(artifact_id)  # as llama.cpp reads: its own format only
    assert refused.value.check == "format" and LLAMA_FORMAT in str(refused.value)
    with pytest.raises(ValueError, match="not a state format"):
        encode_state({}, [1], b"x", format="graftbench.artifact/1")
    with pytest.raises(ArtifactError, match="header check failed: format is not one of"):
        store.put(conformance._reheadered(encode_state({"config_fingerprint": "0" * 64}, [1], b"x"),
                                          format="somebody.else/1"), None)
