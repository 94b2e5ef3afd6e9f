"""Held-out transfer: the query layout per route, the grafted example and the copy control on every grafted
sample, and the other-family control."""

from __future__ import annotations

import pytest

from graftbench.store.router import Route
from graftbench.problems.builtin import builtin_problems
from graftbench.eval.deposit import deposit_items, items_from_problems
from graftbench.results.samples import Decoded
from graftbench.problems.types import Problem
from graftbench.eval.evaluate import _sample
from graftbench.settings import EvalSettings
from graftbench.store.folder import Store
from graftbench.eval.eval_run import run_eval


def _shared(key: str, example_answer: str | None, cue: str = "Final answer:") -> dict:
    return dict(problem_id="mod-1", problem_sha256="0" * 64, key=key, mode="graft", route="similar", similarity=0.7,
                fallback=None, cue=cue, prefill_tokens=9, prefill_tokens_saved=90, artifact_id="a" * 64,
                artifact_tokens=90, logits_sha256="0" * 64, wall_s=1.0, energy_j=1.0, certificate_sha256=None,
                certify_s=None, certified=None, layout="answer", example_id="mod-0", example_answer=example_answer)


def _decoded(text: str) -> Decoded:
    return Decoded(token_ids=[1, 2], text=text, finish_reason="stop", first_token_s=0.1, decode_s=0.1)


@pytest.mark.parametrize("text, key, example, copied, correct", [
    (" 999\n", "42", "999", True, False),  # the example's (wrong) answer followed: copied, incorrect
    (" 42\n", "42", "999", False, True),
    (" 42\n", "42", "42", True, True),  # an example with the same answer: a copy cannot be told from a solve
    (" no idea\n", "42", "999", False, False),
])
def test_copied_compares_the_extracted_answer_with_the_examples(text, key, example, copied, correct):
    route = Route("similar", "a" * 64, 0.7)
    sample = _sample(_shared(key, example), _decoded(text), 0, None, route, EvalSettings(graft=True))
    assert (sample.copied, sample.correct) == (copied, correct)


def test_an_exact_route_records_its_example_but_no_copy():
    route = Route("exact", "a" * 64, 1.0)
    sample = _sample(_shared("42", "42"), _decoded(" 42\n"), 0, None, route, EvalSettings(graft=True))
    assert (sample.example_answer, sample.copied, sample.correct) == ("42", None, True)


@pytest.mark.parametrize("layout, route, expected", [("auto", "exact", "answer"), ("auto", "similar", "solve"),
                                                     ("auto", "other-family", "solve"), ("answer", "similar", "answer"),
                                                     ("solve", "exact", "solve")])
def test_query_layout_per_route(layout, route, expected):
    assert EvalSettings(layout=layout).query_layout(route) == expected


@pytest.fixture(scope="module")
def library(session, tmp_path_factory):
    """References of the first problem of two families deposited; the second of each is held out."""
    problems = [p for p in builtin_problems(n_per_family=2) if p.family in ("mod", "paths")]
    root = tmp_path_factory.mktemp("transfer")
    store = Store(root / "store")
    deposited = [p for p in problems if p.id.endswith("-0")]
    report = deposit_items(session, store, items_from_problems(deposited))
    assert len(report.deposited) == 2
    return root, problems


def test_held_out_problems_are_solved_in_the_solve_layout_after_their_example(session, library):
    root, problems = library
    settings = EvalSettings(max_new_tokens=24, graft=True, min_similarity=0.3)
    result = run_eval(session, problems, "builtin", "t", settings, runs_root=root, store_root=root / "store")
    by_id = {s.problem_id: s for s in result.samples}
    for family in ("mod", "paths"):
        recurring, held_out = by_id[f"{family}-0"], by_id[f"{family}-1"]
        assert (recurring.route, recurring.layout, recurring.cue, recurring.copied) == ("exact", "answer",
                                                                                     "Final answer:", None)
        assert recurring.example_id == f"{family}-0" and recurring.example_answer == recurring.key
        assert (held_out.route, held_out.layout, held_out.cue) == ("similar", "solve", "")
        assert held_out.example_id == f"{family}-0" and held_out.example_answer == recurring.key
        assert held_out.copied is (held_out.extracted is not None and held_out.extracted == recurring.key)
    controls = result.manifest["metrics"]["copy"]
    held = [by_id["mod-1"], by_id["paths-1"]]
    assert (controls["grafted_samples"], controls["copied_recorded"]) == (4, 2)
    assert controls["copied"] == sum(s.copied for s in held)
    assert controls["copy_baseline_problems"] == 2
    assert controls["copy_baseline"] == sum(s.example_answer == s.key for s in held) / 2


def test_the_other_family_control_grafts_an_example_of_another_family(session, library):
    root, problems = library
    settings = EvalSettings(max_new_tokens=8, graft=True, graft_from="other-family")
    result = run_eval(session, [p for p in problems if p.id.endswith("-1")], "builtin", "o", settings,
                      runs_root=root, store_root=root / "store")
    assert [(s.problem_id, s.route, s.example_id, s.layout) for s in result.samples] == [
        ("mod-1", "other-family", "paths-0", "solve"), ("paths-1", "other-family", "mod-0", "solve")]


def test_the_gate_off_grafts_every_problem_even_one_sharing_no_words_with_the_library(session, library):
    root, _ = library
    unrelated = Problem(id="other-0", problem="Name the capital city of a country in Europe.", answer="7")
    arms = {graft_from: run_eval(session, [unrelated], "builtin", f"g-{graft_from}",
                                 EvalSettings(max_new_tokens=4, graft=True, min_similarity=0.0, graft_from=graft_from),
                                 runs_root=root, store_root=root / "store").samples[0]
            for graft_from in ("nearest", "top-ranked")}
    assert (arms["nearest"].route, arms["nearest"].example_id) == ("none", None)
    assert arms["top-ranked"].route == "similar" and arms["top-ranked"].example_id in ("mod-0", "paths-0")
    assert arms["top-ranked"].layout == "solve" and arms["top-ranked"].artifact_tokens > 0


def test_the_example_as_prompt_arm_gives_the_grafts_first_logits_and_tokens(session, library):
    # The graft is exactly one-shot prompting with the example: prefilling the artifact's own token ids as prompt
    # text with the pinned chunk schedule gives byte-identical first logits, hence the same greedy tokens.
    root, problems = library
    arms = {example_as: run_eval(session, problems, "builtin", f"as-{example_as}",
                                 EvalSettings(max_new_tokens=6, graft=True, min_similarity=0.3, example_as=example_as),
                                 runs_root=root, store_root=root / "store")
            for example_as in ("graft", "prompt")}
    graft, prompt = ({s.problem_id: s for s in arms[a].samples} for a in ("graft", "prompt"))
    assert sorted(graft) == sorted(prompt) == sorted(p.id for p in problems)
    for pid, grafted in graft.items():
        prompted = prompt[pid]
        assert prompted.logits_sha256 == grafted.logits_sha256, pid
        assert prompted.output_sha256 == grafted.output_sha256, pid
        assert (prompted.artifact_id, prompted.example_id, prompted.route) == \
            (grafted.artifact_id, grafted.example_id, grafted.route)
        assert (grafted.prefill_tokens_saved, prompted.prefill_tokens_saved) == (grafted.artifact_tokens, 0)
        assert prompted.prefill_tokens == grafted.prefill_tokens + grafted.artifact_tokens
    assert arms["prompt"].manifest["settings"]["example_as"] == "prompt"
    assert "example_as" not in arms["graft"].manifest["settings"]


def test_an_artifacts_token_ids_are_read_without_its_kv_and_a_bad_span_is_refused(library, tmp_path):
    from graftbench.store.codec import ArtifactError

    root, _ = library
    store = Store(root / "store")
    artifact_id = store.ids()[0]
    assert store.token_ids(artifact_id) == store.read(artifact_id).token_ids.tolist()
    copy = Store(tmp_path / "copy")
    data = bytearray(store.path(artifact_id).read_bytes())
    at = data.index(b'"token_ids":{"dtype":"I64","shape":[') + len(b'"token_ids":{"dtype":"')
    data[at:at + 3] = b"I32"
    copy.path(artifact_id).parent.mkdir(parents=True, exist_ok=True)
    copy.path(artifact_id).write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="token_ids is not int64"):
        copy.token_ids(artifact_id)
