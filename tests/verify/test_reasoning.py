"""Reasoning models: outputs with ``<think> ... </think>`` (no model that runs here thinks, so these are written
outputs of one). From verifier 4 on the answer is read only after the reasoning, an output cut inside its reasoning
has no answer, thinking tokens are counted apart, and every committed manifest verifies unchanged under the version
it records.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from graftbench.problems.prompts import THINK_TAGS, PromptLayout, reasoning_delimiters
from graftbench.results.manifest import build_manifest, compute_totals, recorded_reasoning, verify_manifest
from graftbench.results.rescore import rescore_manifest
from graftbench.results.samples import Sample
from graftbench.settings import EvalSettings
from graftbench.util.hashing import sha256_text
from graftbench.verify.answers import VERIFIER_VERSION, Verdict, answer_span, verify_answer
from graftbench.verify.normalization import RULES_ADDED
from graftbench.verify.reasoning import split_reasoning, thinking_tokens
from tests.results.test_manifest_versions import _fingerprinted, _reseal, _written

# Written as Qwen3 and DeepSeek-R1 write them: the reasoning, the closing tag, then the answer.
AFTER = ("<think>\nLet me try small cases. If x = 3 then \\boxed{12}? No, recheck: 4 * 6 = 24.\n</think>\n\n"
         "The product is $24$, so the final answer is \\boxed{24}.")
ONLY_INSIDE = ("<think>\nThe answer should be \\boxed{24}, the final answer is 24.\n</think>\n\n"
               "I could not finish the solution.")
CUT = "<think>\nWe need the product. Trying 4 * 6: that gives \\boxed{24}. Let me double-check by another route, "
# DeepSeek-R1's template opens the block in the prompt: the output holds only the closing tag.
OPENED_IN_PROMPT = "First, 4 * 6 = 24. Maybe \\boxed{20}?\n</think>\nFinal answer: 24"
THINK = THINK_TAGS


def test_the_answer_is_read_after_the_reasoning():
    assert verify_answer(AFTER, "24", reasoning=THINK) == Verdict("24", True)
    start, end = answer_span(AFTER, reasoning=THINK)
    assert AFTER[start:end] == "\\boxed{24}" and start > AFTER.index("</think>")


def test_an_answer_only_inside_the_reasoning_is_no_answer():
    assert verify_answer(ONLY_INSIDE, "24", reasoning=THINK) == Verdict(None, False)
    assert answer_span(ONLY_INSIDE, reasoning=THINK) is None
    # Verifier 3 read it: a committed verdict keeps its version's reading.
    assert verify_answer(ONLY_INSIDE, "24", version=3, reasoning=THINK) == Verdict("24", True)


def test_an_output_cut_inside_its_reasoning_has_no_answer():
    assert verify_answer(CUT, "24", reasoning=THINK) == Verdict(None, False)
    assert split_reasoning(CUT, THINK).cut
    assert verify_answer(CUT, "24", version=3, reasoning=THINK) == Verdict("24", True)  # the old false positive


def test_a_block_opened_in_the_prompt_ends_at_its_closing_tag():
    assert verify_answer(OPENED_IN_PROMPT, "24", reasoning=THINK) == Verdict("24", True)
    # Cut before the closing tag, with the opening tag in the prompt's cue: no answer.
    cut = OPENED_IN_PROMPT.split("</think>")[0]
    assert verify_answer(cut, "20", cue="<think>\n", reasoning=THINK) == Verdict(None, False)
    assert verify_answer(cut, "20", cue="<think>\n", reasoning=None) == Verdict("20", True)


def test_a_layout_without_delimiters_reads_the_whole_output_as_before():
    for text in (AFTER, ONLY_INSIDE, CUT, "plain \\boxed{7}"):
        assert verify_answer(text, "24") == verify_answer(text, "24", version=3)


def test_other_delimiters_are_the_layouts_to_name():
    magistral = reasoning_delimiters("mistralai/Magistral-Small-2509")
    text = "[THINK]maybe \\boxed{1}[/THINK]Final answer: 2"
    assert verify_answer(text, "2", reasoning=magistral) == Verdict("2", True)
    assert verify_answer(text, "2", reasoning=THINK) == Verdict("2", True)  # no <think>: read whole, last marker
    assert verify_answer("[THINK]maybe \\boxed{1}", "1", reasoning=magistral) == Verdict(None, False)


@pytest.mark.parametrize("bad", [("<think>",), ("", "</think>"), "<think>", (1, 2)])
def test_malformed_delimiters_are_refused(bad):
    with pytest.raises(ValueError, match="reasoning delimiters"):
        verify_answer(AFTER, "24", reasoning=bad)
    with pytest.raises(ValueError, match="reasoning delimiters"):
        PromptLayout(reasoning=bad if not isinstance(bad, str) else (bad,))


def test_thinking_tokens_are_counted_to_the_closing_tag():
    ids = list(range(len(AFTER)))  # one token per character
    decode = lambda prefix: "".join(AFTER[i] for i in prefix)  # noqa: E731
    assert thinking_tokens(ids, decode, "", THINK) == AFTER.index("</think>") + len("</think>")
    cut_ids = list(range(len(CUT)))
    assert thinking_tokens(cut_ids, lambda p: "".join(CUT[i] for i in p), "", THINK) == len(CUT)
    plain = "no reasoning here \\boxed{3}"
    assert thinking_tokens(list(range(len(plain))), lambda p: "".join(plain[i] for i in p), "", THINK) == 0
    assert thinking_tokens(ids, decode, "", None) is None


def test_layouts_name_their_models_delimiters_and_other_pins_stay():
    assert reasoning_delimiters("Qwen/Qwen3-0.6B") == THINK
    assert reasoning_delimiters("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B") == THINK
    for alias in ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert reasoning_delimiters(alias) == ()
    assert PromptLayout().reasoning_pair is None
    assert PromptLayout(reasoning=["<think>", "</think>"]).reasoning == THINK  # read back from JSON


def test_committed_pins_are_unchanged_by_the_new_layout_field():
    from graftbench.engine.pin import PinnedConfig
    from tests.conftest import REFERENCE_MANIFESTS
    from graftbench.results.manifest import load_manifest

    manifest = load_manifest(REFERENCE_MANIFESTS / "aime2024-qwen2.5-coder-0.5b-recurring.json")
    config = manifest["config"]
    rebuilt = PinnedConfig(**{**config, "layout": PromptLayout(**config["layout"])})
    assert rebuilt.to_dict() == config and rebuilt.fingerprint == manifest["config_fingerprint"]
    thinking = replace(rebuilt, layout=replace(rebuilt.layout, reasoning=THINK))
    assert thinking.to_dict()["layout"]["reasoning"] == list(THINK)
    assert thinking.fingerprint != rebuilt.fingerprint  # a thinking layout is another pin


def _thinking_sample(problem_id: str, output: str, key: str, thinking: int) -> dict:
    verdict = verify_answer(output, key, reasoning=THINK)
    return {"problem_id": problem_id, "problem_sha256": sha256_text(problem_id), "key": key, "mode": "baseline",
            "route": None, "similarity": None, "fallback": None, "cue": "", "prefill_tokens": 10,
            "prefill_tokens_saved": 0, "artifact_id": None, "artifact_tokens": 0, "logits_sha256": "0" * 64,
            "output": output, "output_sha256": sha256_text(output), "extracted": verdict.extracted,
            "correct": verdict.correct, "finish_reason": "eos", "decode_tokens": thinking + 9, "ttft_s": 0.1,
            "wall_s": 0.5, "energy_j": 1.0, "certificate_sha256": None, "certify_s": None, "certified": None,
            "sample_index": 0, "seed": None, "layout": None, "example_id": None, "example_answer": None,
            "copied": None, "thinking_tokens": thinking}


def _thinking_manifest() -> dict:
    samples = [_thinking_sample("after", AFTER, "24", 30), _thinking_sample("inside", ONLY_INSIDE, "24", 20),
               _thinking_sample("cut", CUT, "24", 40)]
    config = {"model": "qwen3-written", "layout": {**vars(PromptLayout()), "reasoning": list(THINK)}}
    manifest = build_manifest(run="think", command="solve", config=config, config_fingerprint="",
                              settings=EvalSettings().to_dict(), problem_set={"source": "hand", "sha256": "0" * 64,
                                                                             "n": 3},
                              problems=[{"id": s["problem_id"], "problem_sha256": s["problem_sha256"], "key": "24"}
                                        for s in samples], samples=samples, energy={"method": "none"}, store=None)
    return _fingerprinted(manifest)


def test_a_thinking_run_records_verdicts_after_the_reasoning_and_verifies(tmp_path):
    manifest = _thinking_manifest()
    assert manifest["settings"]["verifier_version"] == VERIFIER_VERSION == 5
    assert [(s["extracted"], s["correct"]) for s in manifest["samples"]] == [("24", True), (None, False),
                                                                            (None, False)]
    assert manifest["totals"]["thinking_tokens"] == 90 and recorded_reasoning(manifest) == THINK
    mismatches, _ = verify_manifest(_written(manifest, tmp_path))
    assert mismatches == []
    # A verdict taken from inside the reasoning, re-sealed: verify-manifest names it.
    forged = copy.deepcopy(manifest)
    forged["samples"][1].update(extracted="24", correct=True)
    mismatches, _ = verify_manifest(_written(_reseal(forged), tmp_path, "forged.json"))
    assert "sample inside#0: extracted recorded '24', re-extracted None" in mismatches
    assert rescore_manifest(manifest).verdicts_changed == 0


def test_totals_and_samples_of_a_model_that_does_not_think_are_as_before():
    sample = _thinking_sample("x", AFTER, "24", 3)
    del sample["thinking_tokens"]
    assert "thinking_tokens" not in compute_totals([sample])
    record = Sample.from_json(sample)
    assert record.thinking_tokens is None and "thinking_tokens" not in record.to_json()
    kept = Sample.from_json({**sample, "thinking_tokens": 3})
    assert kept.to_json()["thinking_tokens"] == 3


def test_verifier_4_lists_its_rule():
    assert len(RULES_ADDED[4]) == 1 and "reasoning" in RULES_ADDED[4][0]


def test_the_report_counts_thinking_tokens_apart(tmp_path):
    from graftbench.report.compare import Report, RunEntry, markdown
    from graftbench.results.metrics import summarize

    manifest = _thinking_manifest()
    run = RunEntry("think", tmp_path / "m.json", manifest, summarize(manifest["samples"], manifest["problems"]))
    assert run.thinking_tokens == 90
    assert "think: 90 of its 117 decode tokens were reasoning" in markdown(Report([run]))


def test_eval_counts_a_decodes_thinking_tokens_with_the_sessions_tokenizer():
    from types import SimpleNamespace

    from graftbench.eval.evaluate import _thinking
    from graftbench.results.samples import Decoded

    text = AFTER
    tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "".join(text[i] for i in ids if i >= 0))
    session = SimpleNamespace(eos_ids={-1}, tokenizer=tokenizer)
    decoded = Decoded(token_ids=list(range(len(text))) + [-1], text=text, finish_reason="eos", first_token_s=0.1,
                      decode_s=1.0)
    assert _thinking(session, decoded, "", THINK) == text.index("</think>") + len("</think>")
    assert _thinking(session, decoded, "", None) is None
