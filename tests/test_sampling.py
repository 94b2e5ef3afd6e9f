"""Sampled decoding: per-sample seeds, the nucleus, N samples decoded as one batch, and a resume that draws the same
tokens as an uninterrupted run."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from graftbench.problems.builtin import builtin_problems
from graftbench.results.runs import RunDir
from graftbench.engine.sampling import SamplingSettings, next_token, sample_seed
from graftbench.settings import EvalSettings
from graftbench.eval.workflows import run_eval

SAMPLED = EvalSettings(max_new_tokens=12, samples=3, temperature=0.7, top_p=0.95, seed=0)


def test_sample_seeds_depend_on_run_seed_problem_and_index_only():
    seeds = {sample_seed(s, p, i) for s in (0, 1) for p in ("mod-0", "mod-1") for i in range(4)}
    assert len(seeds) == 16 and all(0 <= s < 2**53 for s in seeds)
    assert sample_seed(0, "mod-0", 2) == sample_seed(0, "mod-0", 2)
    assert sample_seed(0, "mod-0", 2) == int.from_bytes(
        __import__("hashlib").sha256(b"0:mod-0:2").digest()[:8], "big") >> 11


@given(st.integers(0, 2**62), st.floats(0.05, 0.7))
def test_a_nucleus_smaller_than_the_top_token_always_draws_it(seed, top_p):
    logits = torch.tensor([0.0, 4.0, 1.0, 2.9])  # token 1 holds 71% of the mass at T=1
    assert torch.softmax(logits, -1)[1] > 0.7
    draw = next_token(logits, SamplingSettings(temperature=1.0, top_p=top_p), torch.Generator().manual_seed(seed))
    assert draw == 1


def test_draws_follow_the_tempered_distribution_and_repeat_with_the_seed():
    logits = torch.tensor([0.0, 1.0, 2.0])
    settings = SamplingSettings(temperature=1.0, top_p=1.0)
    gen = torch.Generator().manual_seed(7)
    draws = [next_token(logits, settings, gen) for _ in range(4000)]
    expected = torch.softmax(logits, -1)
    observed = torch.tensor([draws.count(i) / len(draws) for i in range(3)])
    assert torch.allclose(observed, expected, atol=0.03), (observed, expected)
    again = torch.Generator().manual_seed(7)
    assert [next_token(logits, settings, again) for _ in range(4000)] == draws
    cold = [next_token(logits, SamplingSettings(temperature=0.1, top_p=1.0), gen) for _ in range(200)]
    assert cold.count(2) >= 195  # at T=0.1 the top token holds e^10 times the next one's mass


def test_several_greedy_samples_are_refused():
    with pytest.raises(ValueError, match="3 greedy samples of a problem would be identical"):
        EvalSettings(samples=3)


@pytest.mark.parametrize("field, value, message", [("layout", "chat", "layout 'chat' is not one of auto, answer, solve"),
                                                   ("graft_from", "any", "graft_from 'any' is not one of nearest")])
def test_unknown_layouts_and_graft_sources_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        EvalSettings(**{field: value})


def test_sampled_samples_are_recorded_per_index_with_their_seeds(session, tmp_path):
    problems = builtin_problems(n_per_family=1)[:2]
    result = run_eval(session, problems, "builtin", "s", SAMPLED, runs_root=tmp_path)
    assert [(s.problem_id, s.sample_index) for s in result.samples] == [(p.id, i) for p in problems for i in range(3)]
    assert [s.seed for s in result.samples] == [sample_seed(0, p.id, i) for p in problems for i in range(3)]
    outputs = [s.output for s in result.samples]
    assert len(set(outputs)) > 2  # draws differ between samples (12 tokens at T = 0.7)
    assert all(s.decode_tokens <= 12 and s.layout is None for s in result.samples)
    metrics = result.manifest["metrics"]
    assert metrics["samples"] == 6 and metrics["samples_per_problem"] == {"min": 3, "max": 3}


def test_a_resumed_sampled_run_draws_the_same_tokens(session, tmp_path):
    problems = builtin_problems(n_per_family=1)[:2]
    whole = run_eval(session, problems, "builtin", "whole", SAMPLED, runs_root=tmp_path)
    seen = []

    class Interrupt(Exception):
        pass

    def stop_after_four(sample):  # inside the second problem's batch: two of its samples are missing
        seen.append(sample)
        if len(seen) == 4:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_eval(session, problems, "builtin", "cut", SAMPLED, runs_root=tmp_path, on_sample=stop_after_four)
    assert len(RunDir(tmp_path, "cut").read_samples()) == 4
    resumed = run_eval(session, problems, "builtin", "cut", SAMPLED, runs_root=tmp_path)
    key = [(s.problem_id, s.sample_index, s.seed, s.output_sha256, s.decode_tokens) for s in whole.samples]
    assert [(s.problem_id, s.sample_index, s.seed, s.output_sha256, s.decode_tokens) for s in resumed.samples] == key


@pytest.mark.parametrize("scale, top_p", [(8.0, 0.95), (0.05, 0.95), (0.05, 0.5), (3.0, 0.3)])
def test_the_nucleus_is_the_sorted_prefix_reaching_top_p(scale, top_p):
    """The top-k search with widening finds the same tokens as a full sort, also when the distribution is so flat
    that the nucleus holds thousands of tokens (scale 0.05 over 50,000)."""
    from graftbench.engine.sampling import NUCLEUS_CANDIDATES, nucleus

    logits = torch.randn(50_000, generator=torch.Generator().manual_seed(int(scale * 100))) * scale
    settings = SamplingSettings(temperature=0.7, top_p=top_p)
    probs = torch.softmax(logits / 0.7, dim=-1)
    sorted_probs, order = torch.sort(probs, descending=True)
    expected = int(((torch.cumsum(sorted_probs, dim=-1) - sorted_probs) < top_p).sum())
    ids, kept = nucleus(logits, settings)
    assert len(ids) == expected and set(ids.tolist()) == set(order[:expected].tolist())
    torch.testing.assert_close(kept, probs[ids])
    if scale < 1:
        assert expected > NUCLEUS_CANDIDATES  # the widening path ran
