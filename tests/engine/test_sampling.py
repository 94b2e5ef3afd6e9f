"""Sampled decoding: per-sample seeds, the nucleus, N samples decoded as one batch, and a resume that draws the same
tokens as an uninterrupted run."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from graftbench.problems.builtin import builtin_problems
from graftbench.results.runs import RunDir
from graftbench.engine.torch.sampling import SamplingSettings, next_token
from graftbench.util.seeds import sample_seed
from graftbench.settings import EvalSettings
from graftbench.eval.eval_run import run_eval

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
    from graftbench.engine.torch.sampling import NUCLEUS_CANDIDATES, nucleus

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


class OffHostLogits:
    """Logits that report a device other than the CPU (no GPU here): the few calls the draw makes on a device
    tensor, recorded. ``to`` gives the values back on the CPU in the dtype they were computed in, as a copy from a
    CUDA device does."""

    def __init__(self, values: torch.Tensor, device: str = "cuda:0"):
        self.values, self.device, self.dtype, self.moves = values, torch.device(device), values.dtype, []

    def detach(self):
        return self

    def to(self, *args, **kwargs):
        self.moves.append((args, kwargs))
        target = torch.device(kwargs.get("device", args[0] if args else self.device))
        assert target.type == "cpu", f"the draw moved the logits to {target}, not to the host"
        return self.values.clone()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_draw_reads_cpu_float32_logits_whatever_device_computed_them(monkeypatch, dtype):
    from graftbench.engine.torch import sampling

    values = (torch.randn(5_000, generator=torch.Generator().manual_seed(3)) * 4).to(dtype)
    seen = []
    real_nucleus = sampling.nucleus
    monkeypatch.setattr(sampling, "nucleus", lambda logits, s: seen.append(sampling.host_float32(logits))
                        or real_nucleus(logits, s))
    settings = SamplingSettings(temperature=0.7, top_p=0.95)
    device = OffHostLogits(values)
    off_host = [next_token(device, settings, torch.Generator().manual_seed(s)) for s in range(50)]
    assert device.moves and all(args == () and kwargs == {"device": "cpu"} for args, kwargs in device.moves)
    assert all(t.device.type == "cpu" and t.dtype == torch.float32 for t in seen)
    assert all(torch.equal(t, values.float()) for t in seen)  # widened exactly, nothing computed on the device
    on_host = [next_token(values, settings, torch.Generator().manual_seed(s)) for s in range(50)]
    assert off_host == on_host and len(set(on_host)) > 5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_the_cpu_the_host_copy_is_the_float32_the_draw_read_before(dtype):
    """Committed sampled runs keep their tokens: a CPU row read through host_float32 is bit for bit the
    ``logits.float()`` the draw read before it moved to the host (float32: the same tensor, no copy)."""
    from graftbench.engine.torch.sampling import host_float32

    logits = (torch.randn(4, 1_000, generator=torch.Generator().manual_seed(5)) * 3).to(dtype)
    read = host_float32(logits)
    assert read.dtype == torch.float32 and torch.equal(read, logits.float())
    assert torch.equal(read.view(torch.int32), logits.float().view(torch.int32))
    if dtype == torch.float32:
        assert read.data_ptr() == logits.data_ptr()


def _fake_decode(monkeypatch, off_host: bool, n: int = 4, vocab: int = 300, budget: int = 10):
    """sample_decode's batch on a stand-in model whose logits depend only on each row's last token, returned on the
    CPU or as logits of another device (:class:`OffHostLogits`); the tokens of each sample."""
    from types import SimpleNamespace

    from graftbench.engine.torch import sampling

    def logits_after(tokens: list[int]) -> torch.Tensor:
        rows = [torch.randn(vocab, generator=torch.Generator().manual_seed(t)).to(torch.bfloat16) * 3
                for t in tokens]
        return torch.stack(rows)

    def forward_batch(model, cache, last_tokens):
        values = logits_after(last_tokens)
        return OffHostLogits(values) if off_host else values

    cache = SimpleNamespace(get_seq_length=lambda: 0, batch_repeat_interleave=lambda k: None,
                            batch_select_indices=lambda index: None,
                            layers=[SimpleNamespace(keys=torch.zeros(1))])
    monkeypatch.setattr(sampling, "forward_batch", forward_batch)
    monkeypatch.setattr(sampling, "reserve", lambda cache, tokens: None)
    tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: " ".join(map(str, ids)))
    first = logits_after([1])
    decoded = sampling.sample_decode(None, tokenizer, cache, OffHostLogits(first) if off_host else first, budget,
                                     {0}, SamplingSettings(temperature=0.9, top_p=0.9, seed=0),
                                     [sample_seed(0, "p", i) for i in range(n)])
    return [d.token_ids for d in decoded]


def test_a_sampled_batch_draws_the_same_tokens_whichever_device_computed_its_logits(monkeypatch):
    on_host = _fake_decode(monkeypatch, off_host=False)
    off_host = _fake_decode(monkeypatch, off_host=True)
    assert off_host == on_host
    assert len({tuple(t) for t in on_host}) > 1 and all(len(t) > 1 for t in on_host)
