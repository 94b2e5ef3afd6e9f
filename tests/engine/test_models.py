"""Model resolution and the de-quantized weights cache: cold and warm loads give byte-identical logits."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from graftbench.engine.torch import forward
from graftbench.engine import models
from graftbench.engine.models import ModelError, dequantized_dir, resolve_model
from graftbench.engine.torch import loading
from graftbench.engine.torch.loading import cast_dir, load_model


def _logits_hash(loaded) -> str:
    ids = loaded.tokenizer("Problem: Find $2+2$.\nFinal answer:").input_ids
    return forward.logits_sha256(forward.forward(loaded.model, forward.new_cache(loaded.model), ids, all_logits=True))


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


def _float32_cache_only(session, tmp_path, monkeypatch):
    """Point the cache at ``tmp_path`` holding the session's de-quantized float32 checkpoint (hard links, no
    de-quantization) and no cast copy; returns the checkpoint's folder there."""
    source = dequantized_dir(session.loaded.weights_sha256)
    monkeypatch.setenv("GRAFTBENCH_CACHE", str(tmp_path))
    target = dequantized_dir(session.loaded.weights_sha256)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("bfloat16"), copy_function=_link_or_copy)
    return target


def _link_or_copy(source, target):
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def test_a_bfloat16_load_keeps_its_cast_copy_and_the_next_load_gives_the_same_tensors(session, tmp_path, monkeypatch):
    from safetensors import safe_open

    _float32_cache_only(session, tmp_path, monkeypatch)
    cast = load_model("smollm2-135m", dtype="bfloat16")  # casts the float32 checkpoint
    copy = cast_dir(dequantized_dir(cast.weights_sha256), "bfloat16") / "model.safetensors"
    assert copy.is_file() and not list(copy.parent.parent.glob(".staging-*"))
    with safe_open(str(copy), "pt") as checkpoint:
        assert {checkpoint.get_slice(name).get_dtype() for name in checkpoint.keys()} == {"BF16"}
    mapped = load_model("smollm2-135m", dtype="bfloat16")  # from the copy
    ours, theirs = cast.model.state_dict(), mapped.model.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(ours[k].dtype == theirs[k].dtype and torch.equal(ours[k], theirs[k]) for k in ours)
    assert mapped.model.lm_head.weight.data_ptr() == mapped.model.get_input_embeddings().weight.data_ptr()
    assert _logits_hash(cast) == _logits_hash(mapped)
    assert (cast.weights_sha256, cast.tokenizer_sha256) == (mapped.weights_sha256, mapped.tokenizer_sha256)


def test_a_cast_copy_that_cannot_be_written_only_warns(session, tmp_path, monkeypatch):
    folder = _float32_cache_only(session, tmp_path, monkeypatch)
    def disk_full(model, folder):
        raise OSError("disk full")

    monkeypatch.setattr(loading, "_save_checkpoint", disk_full)
    with pytest.warns(UserWarning, match="disk full"):
        loaded = load_model("smollm2-135m", dtype="bfloat16")
    assert loaded.model.dtype == torch.bfloat16
    assert folder.is_relative_to(tmp_path) and not cast_dir(folder, "bfloat16").exists()


def test_local_folder_and_gguf_path_resolve(tmp_path, session):
    resolved = resolve_model("smollm2-135m")
    assert resolved.kind == "gguf" and resolved.path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert resolve_model(resolved.path).kind == "gguf"
    folder = dequantized_dir(session.loaded.weights_sha256)
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


def test_hub_id_offline_gives_one_whole_line_saying_how_to_run_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match=r"is a hub id, .* not hold it .*\(HF_HUB_OFFLINE is set\); to run offline, "
                                         r"pass a local model folder or .gguf file instead") as caught:
        load_model("graftbench-test/no-such-model")
    assert "\n" not in str(caught.value) and str(caught.value).endswith("where there is network)")


@pytest.mark.model
@pytest.mark.parametrize("alias", ["smollm2-135m", "gemma3-270m"])
def test_cached_checkpoint_holds_the_tied_embedding_once_and_loads_with_no_key_missing(alias):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    folder = dequantized_dir(load_model(alias).weights_sha256)
    with safe_open(str(folder / "model.safetensors"), "pt") as checkpoint:
        names = set(checkpoint.keys())
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert info["missing_keys"] == set() and not info["unexpected_keys"]  # so nothing was filled with random values
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


@pytest.mark.model
@pytest.mark.parametrize("alias", ["smollm2-135m", "gemma3-270m"])
def test_cached_tokenizer_matches_the_model_class_tokenizer(alias, aime2024):
    from transformers import AutoTokenizer

    from graftbench.engine.models import tokenizer_sha256

    loaded = load_model(alias)
    fast, reference = loaded.tokenizer, AutoTokenizer.from_pretrained(dequantized_dir(loaded.weights_sha256))
    assert tokenizer_sha256(reference) == loaded.tokenizer_sha256
    texts = [problem.problem for problem in aime2024] + ["  héllo\t<bos>x<eos> 日本語 🙂", ""]
    for text in texts:
        for special in (True, False):
            ids = fast(text, add_special_tokens=special).input_ids
            assert ids == reference(text, add_special_tokens=special).input_ids
            assert fast.decode(ids) == reference.decode(ids)
    for attribute in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "all_special_ids",
                      "added_tokens_decoder", "chat_template"):
        assert getattr(fast, attribute) == getattr(reference, attribute), attribute


@pytest.mark.model
def test_cached_tokenizer_falls_back_to_its_class_when_the_recorded_sha256_differs_or_is_missing(tmp_path):
    from graftbench.engine.models import TOKENIZER_PIN, _load_cached_tokenizer

    loaded = load_model("gemma3-270m")
    source = dequantized_dir(loaded.weights_sha256)
    assert (source / TOKENIZER_PIN).read_text() == loaded.tokenizer_sha256
    assert type(loaded.tokenizer).__name__ == "TokenizersBackend"  # the fast path was taken
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((source / name).read_bytes())
    for pin in ("0" * 64, None):
        if pin is not None:
            (tmp_path / TOKENIZER_PIN).write_text(pin)
        else:
            (tmp_path / TOKENIZER_PIN).unlink()
        tokenizer, digest = _load_cached_tokenizer(tmp_path)
        assert type(tokenizer).__name__ == "GemmaTokenizer" and digest == loaded.tokenizer_sha256


def _tokenizer_copy(source, target):
    from graftbench.engine.tokenizer_check import FILES

    for name in FILES:
        if (source / name).is_file():
            (target / name).write_bytes((source / name).read_bytes())


@pytest.mark.model
def test_a_passed_tokenizer_check_is_recorded_and_reused_until_a_file_or_library_changes(tmp_path, monkeypatch):
    import json

    from graftbench.engine.tokenizer_check import RECORD

    loaded = load_model("smollm2-135m")
    _tokenizer_copy(dequantized_dir(loaded.weights_sha256), tmp_path)
    serialized = []
    real = models.tokenizer_sha256
    monkeypatch.setattr(models, "tokenizer_sha256", lambda tok: serialized.append(1) or real(tok))

    def load() -> str:
        tokenizer, digest = models._load_cached_tokenizer(tmp_path)
        assert type(tokenizer).__name__ == "TokenizersBackend"
        return digest

    assert load() == loaded.tokenizer_sha256 and len(serialized) == 1  # first load: full check, recorded
    record = json.loads((tmp_path / RECORD).read_text())
    assert record["digest"] == loaded.tokenizer_sha256 and set(record["files"]) >= {"tokenizer.json"}
    assert load() == loaded.tokenizer_sha256 and len(serialized) == 1  # taken from the record
    record["libraries"]["tokenizers"] = "0.0.0"
    (tmp_path / RECORD).write_text(json.dumps(record))
    assert load() == loaded.tokenizer_sha256 and len(serialized) == 2  # another library version: checked again
    (tmp_path / "tokenizer.json").write_text(json.dumps(json.loads((tmp_path / "tokenizer.json").read_text())))
    assert load() == loaded.tokenizer_sha256 and len(serialized) == 3  # other bytes, same tokenizer: checked again
    assert load() == loaded.tokenizer_sha256 and len(serialized) == 3
    (tmp_path / RECORD).write_text("{not json")
    assert load() == loaded.tokenizer_sha256 and len(serialized) == 4


@pytest.mark.model
def test_a_recorded_check_never_vouches_for_a_tokenizer_whose_pin_changed(tmp_path):
    from graftbench.engine.tokenizer_check import RECORD

    loaded = load_model("smollm2-135m")
    _tokenizer_copy(dequantized_dir(loaded.weights_sha256), tmp_path)
    models._load_cached_tokenizer(tmp_path)
    assert (tmp_path / RECORD).is_file()
    (tmp_path / models.TOKENIZER_PIN).write_text("0" * 64)
    _, digest = models._load_cached_tokenizer(tmp_path)
    assert digest == loaded.tokenizer_sha256  # not the recorded pin: the pin file is part of what was recorded


@pytest.mark.model
def test_a_tokenizer_folder_that_cannot_be_written_keeps_no_record_and_still_loads(tmp_path, monkeypatch):
    from graftbench.engine import tokenizer_check
    from graftbench.util.durable import StorageError

    def full_disk(path, data):
        raise StorageError(28, f"no space left writing {path}")

    loaded = load_model("smollm2-135m")
    _tokenizer_copy(dequantized_dir(loaded.weights_sha256), tmp_path)
    monkeypatch.setattr(tokenizer_check, "write_file_atomic", full_disk)
    _, digest = models._load_cached_tokenizer(tmp_path)
    assert digest == loaded.tokenizer_sha256 and not (tmp_path / tokenizer_check.RECORD).exists()
