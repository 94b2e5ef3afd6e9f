"""Random-weights models: the bundled configs at their published dimensions, the seeded draw and its SHA-256,
the label wherever the model is named, and the refusal to score one."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from graftbench.results.model_names import model_name
from graftbench.engine.torch import random_weights as rw
from graftbench.cli.app import app

runner = CliRunner()


def test_the_bundled_configs_are_the_paper_scales_and_one_reduced_test_config():
    assert rw.bundled_names() == ["gemma3-12b", "gemma3-1b", "gemma3-27b", "gemma3-reduced", "qwen2.5-7b"]
    assert [name for name in rw.bundled_names() if rw.load_config_dict(name).get("_reduced")] == ["gemma3-reduced"]
    for name in rw.bundled_names():
        assert rw.load_config_dict(name)["_source"], name


@pytest.mark.parametrize("name, layers, hidden, heads, kv_heads, head_dim, window, local_base, global_rope", [
    ("gemma3-1b", 26, 1152, 4, 1, 256, 512, 10000, {"rope_type": "default", "rope_theta": 1000000}),
    ("gemma3-12b", 48, 3840, 16, 8, 256, 1024, 10000.0,
     {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}),
    ("gemma3-27b", 62, 5376, 32, 16, 128, 1024, 10000.0,
     {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}),
])
def test_gemma3_configs_have_the_published_dimensions_window_and_two_rope_bases(
        name, layers, hidden, heads, kv_heads, head_dim, window, local_base, global_rope):
    config = rw.model_config(rw.load_config_dict(name))
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
            config.head_dim, config.sliding_window) == (layers, hidden, heads, kv_heads, head_dim, window)
    assert config.rope_parameters["sliding_attention"] == {"rope_type": "default", "rope_theta": local_base}
    assert config.rope_parameters["full_attention"] == global_rope
    assert config.layer_types[:6] == ["sliding_attention"] * 5 + ["full_attention"]


def test_parameter_counts_at_full_dimensions_on_the_meta_device():
    # Gemma 3 1B's and Qwen2.5 7B's checkpoints hold 999,885,952 and 7,615,616,512 parameters
    counts = {name: rw.parameter_count(rw.load_config_dict(name))
              for name in ("gemma3-1b", "gemma3-12b", "gemma3-27b", "qwen2.5-7b")}
    assert counts == {"gemma3-1b": 999_885_952, "gemma3-12b": 11_766_034_176, "gemma3-27b": 27_009_346_304,
                      "qwen2.5-7b": 7_615_616_512}


def test_qwen25_7b_config_has_its_published_dimensions():
    config = rw.model_config(rw.load_config_dict("qwen2.5-7b"))
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.num_attention_heads,
            config.num_key_value_heads, config.vocab_size, config.tie_word_embeddings) == (
        28, 3584, 18944, 28, 4, 152064, False)
    assert config.rope_parameters["rope_theta"] == 1000000.0 and config.use_sliding_window is False


def test_specs_parse_with_a_default_seed_and_bad_ones_name_the_bundled_configs():
    assert rw.parse_spec("random:gemma3-12b") == rw.RandomSpec("gemma3-12b", 0)
    assert rw.parse_spec("random:qwen2.5-7b@7") == rw.RandomSpec("qwen2.5-7b", 7)
    for bad in ("random:gemma3-9b", "random:gemma3-1b@-1", "random:", "gemma3-1b"):
        with pytest.raises(rw.RandomModelError, match="gemma3-12b, gemma3-1b, gemma3-27b"):
            rw.parse_spec(bad)


def _build(seed: int, dtype=torch.float32):
    return rw.build(rw.load_config_dict("gemma3-reduced"), seed, dtype)


def test_the_same_seed_gives_the_same_sha256_and_another_seed_another():
    (first, sha), (again, sha_again), (_, other) = _build(0), _build(0), _build(1)
    assert sha == sha_again != other and len(sha) == 64
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))


def test_the_draw_does_not_depend_on_the_number_of_threads(monkeypatch):
    _, sha = _build(5)
    monkeypatch.setattr(rw.os, "cpu_count", lambda: 1)
    assert _build(5)[1] == sha


def test_weights_follow_the_rule_drawn_at_the_initializer_range_norms_as_built():
    model, _ = _build(3)
    embed = model.model.embed_tokens.weight.detach()
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, drawn once
    assert abs(float(embed.std()) - 0.02) < 0.0005 and abs(float(embed.mean())) < 0.0005
    assert float(model.model.layers[0].input_layernorm.weight.detach().abs().max()) == 0.0  # Gemma 3: scale 1 + w
    for name in ("model.embed_tokens.weight", "model.layers.7.mlp.down_proj.weight"):
        generator = torch.Generator().manual_seed(rw.tensor_seed(3, name))
        expected = torch.empty(model.state_dict()[name].shape).normal_(0.0, 0.02, generator=generator)
        assert torch.equal(model.state_dict()[name], expected), name
    assert rw.tensor_seed(3, "model.embed_tokens.weight") != rw.tensor_seed(4, "model.embed_tokens.weight")


def test_the_fingerprint_covers_the_config_not_only_the_tensors():
    config = rw.load_config_dict("gemma3-reduced")
    model, sha = rw.build(config, 0, torch.float32)
    entries = sorted(rw._untied(model).items())
    assert rw.weights_sha256(config, entries) == sha
    assert rw.weights_sha256({**config, "rope_theta": 10000}, entries) != sha


def test_the_label_names_a_random_model_wherever_it_is_named():
    pin = {"model": "random:gemma3-12b", "random_weights": rw.pin_record(rw.RandomSpec("gemma3-12b", 0),
                                                                         rw.load_config_dict("gemma3-12b"))}
    assert model_name(pin) == "random:gemma3-12b (random weights: architecture only)"
    assert pin["random_weights"]["drawn_on"] == "cpu" and pin["random_weights"]["seed"] == 0
    assert model_name({"model": "gemma3-270m"}) == "gemma3-270m"
    reduced = rw.pin_record(rw.RandomSpec("gemma3-reduced", 0), rw.load_config_dict("gemma3-reduced"))
    assert reduced["label"] == "random weights: architecture only (reduced dimensions, not a published model)"


@pytest.mark.parametrize("command", ["solve", "eval", "deposit"])
def test_scoring_commands_refuse_a_random_weights_model(command, tmp_path):
    store = [] if command == "solve" else ["--store", str(tmp_path / "store")]
    result = runner.invoke(app, [command, "--model", "random:gemma3-1b", "--limit", "1", "--runs-dir", str(tmp_path),
                                 *store])
    assert result.exit_code == 2
    assert "has random weights: architecture only: no accuracy is reported for one" in " ".join(result.output.split())


def test_a_results_index_row_of_a_random_model_shows_the_label_and_no_accuracy(tmp_path):
    from graftbench.report.results_index import run_row

    manifest = {"command": "eval", "config": {"model": "random:gemma3-1b", "dtype": "bfloat16",
                                              "random_weights": {"label": rw.LABEL}},
                "totals": {"samples": 30, "correct": 3}, "settings": {}, "problem_set": {}}
    row = run_row(tmp_path, tmp_path / "m.json", manifest)
    assert row[2] == "random:gemma3-1b (random weights: architecture only)"
    assert row[7] == "not reported (random weights)"


@pytest.mark.slow
def test_gemma3_1b_at_full_dimensions_builds_and_prefills_in_bfloat16():
    from graftbench.engine.torch import forward as engine
    from graftbench.engine.torch.attention import ATTENTION

    model, sha = rw.build(rw.load_config_dict("gemma3-1b"), 0, torch.bfloat16, ATTENTION)
    assert sum(t.numel() for t in rw._untied(model).values()) == 999_885_952 and len(sha) == 64
    cache = engine.new_cache(model)
    logits = engine.prefill(model, cache, list(range(2, 40)), chunk_size=16)
    assert logits.shape == (1, 262144) and logits.dtype == torch.bfloat16
    assert bool(torch.isfinite(logits).all()) and cache.get_seq_length() == 38
