"""Model resolution and the de-quantized weights cache: cold and warm loads give byte-identical logits."""

from __future__ import annotations

import pytest
import torch

from graftbench import engine
from graftbench.models import ModelError, load_model, resolve_model


def _logits_hash(loaded) -> str:
    ids = loaded.tokenizer("Problem: Find $2+2$.\nFinal answer:").input_ids
    return engine.logits_sha256(engine.forward(loaded.model, engine.new_cache(loaded.model), ids, all_logits=True))


def test_cold_and_warm_loads_give_byte_identical_logits(session, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAFTBENCH_CACHE", str(tmp_path))
    cold = load_model("smollm2-135m")
    warm = load_model("smollm2-135m")
    assert (cold.from_cache, warm.from_cache) == (False, True)
    assert cold.weights_sha256 == warm.weights_sha256 == session.loaded.weights_sha256
    assert cold.tokenizer_sha256 == warm.tokenizer_sha256 == session.loaded.tokenizer_sha256
    rotary = warm.model.model.rotary_emb.inv_freq  # a non-persistent buffer: must not be left uninitialised
    assert torch.equal(rotary, cold.model.model.rotary_emb.inv_freq)
    assert _logits_hash(cold) == _logits_hash(warm) == _logits_hash(session.loaded)


def test_local_folder_and_gguf_path_resolve(tmp_path, session):
    resolved = resolve_model("smollm2-135m")
    assert resolved.kind == "gguf" and resolved.path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert resolve_model(resolved.path).kind == "gguf"
    from graftbench.models import cache_root

    folder = cache_root() / "weights" / session.loaded.weights_sha256
    assert resolve_model(str(folder)).kind == "folder"
    by_folder = load_model(str(folder))
    assert _logits_hash(by_folder) == _logits_hash(session.loaded)
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct").kind == "hub"


@pytest.mark.parametrize("spec, message", [
    ("missing.gguf", "GGUF file 'missing.gguf' does not exist"),
    ("no-such-alias", "is not an alias"),
])
def test_bad_model_specs_are_named(spec, message):
    with pytest.raises(ModelError, match=message):
        resolve_model(spec)


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(ModelError, match="has no config.json"):
        resolve_model(str(tmp_path))


def test_unknown_dtype_is_refused():
    with pytest.raises(ModelError, match="dtype 'float8'"):
        load_model("smollm2-135m", dtype="float8")


def test_hub_id_offline_gives_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="without network access pass a local folder or a .gguf file"):
        load_model("graftbench-test/no-such-model")
