"""Verifier version 5: a hedged or listed answer ("42 or 43", "42, 43", "$42$ or $43$", a ``\\text{}`` holding
another number) is not one value, where version 4 took its first number and scored a hedge containing the key as
correct. Each row has its version-4 verdict beside it; the property tests generate hedges and one-value answers."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from graftbench.programs.mode import program_verdict
from graftbench.verify.answers import Verdict, extract_answer, verify_answer

# (response, key, v5 extracted, v5 correct, v4 extracted, v4 correct)
CASES = [
    ("Final answer: 42 or 43", "42", None, False, "42", True),
    ("The answer is 42 or 43.", "42", None, False, "42", True),
    ("Final answer: 42 and 43", "42", None, False, "42", True),
    ("Answer: 42, 43, 44", "42", None, False, "42", True),
    ("Answer: 42; 43", "42", None, False, "42", True),
    ("Final answer: 42 (or possibly 43)", "42", None, False, "42", True),
    ("Final answer: 42 or possibly 43", "42", None, False, "42", True),
    ("Final answer: 42 to 44", "42", None, False, "42", True),
    ("Final answer: -3 or 3", "-3", None, False, "-3", True),
    ("Final answer: **42** or **43**", "42", None, False, "42", True),
    ("Final answer: $42$ or $43$", "42", None, False, "42", True),
    (r"Answer: \(42\), \(43\)", "42", None, False, "42", True),
    (r"\boxed{42 \text{ (or 43)}}", "42", None, False, "42", True),
    # more spellings of a hedge: a comma or a dash before "or", italics, brackets, "alternatively", full-width
    # commas, a range with an en dash, a list ended by a period, thousands separators
    ("Final answer: 42, or 43", "42", None, False, "42", True),
    ("Final answer: 42, or maybe 43", "42", None, False, "42", True),
    ("Final answer: 42, and 43", "42", None, False, "42", True),
    ("Final answer: 42 \u2014 or 43", "42", None, False, "42", True),
    ("Final answer: 42 \u2013 43", "42", None, False, "42", True),
    ("Final answer: *42* or *43*", "42", None, False, "42", True),
    ("Final answer: 42 [or 43]", "42", None, False, "42", True),
    ("Final answer: 42 (alternatively 43)", "42", None, False, "42", True),
    ("Final answer: 42 and/or 43", "42", None, False, "42", True),
    ("Final answer: 42\u300143", "42", None, False, "42", True),
    ("Final answer: 42 to 43.", "42", None, False, "42", True),
    ("Final answer: 42 or 43 depending on the convention", "42", None, False, "42", True),
    ("The answer is 42 and 43 respectively.", "42", None, False, "42", True),
    ("Final answer: 1,000 or 1,001", "1000", None, False, "1000", True),
    ("Final answer: 42 or 42.0 or 43", "42", None, False, "42", True),
    # a box followed by another value offered in its place; version 4 took the last box
    (r"\boxed{43} or \boxed{42}", "42", None, False, "42", True),
    (r"$\boxed{42}$ or $\boxed{43}$", "43", None, False, "43", True),
    (r"\boxed{42} \quad (\text{or } 43)", "42", None, False, "42", True),
    (r"The answer is \boxed{42} (or possibly 43).", "42", None, False, "42", True),
    (r"The answer is 1/4, or 25%.", "1/4", "1/4", True, "1/4", True),
    (r"The answer is 42, or 101010 in base 2.", "42", "42", True, "42", True),
    (r"\boxed{42}, which is 6 times 7.", "42", "42", True, "42", True),
    (r"Thus $x = \boxed{42}$ and $y = 7$.", "42", "42", True, "42", True),
    (r"\boxed{42} (or 42.0)", "42", "42", True, "42", True),
    # one value, then prose, a unit, a modulus or the same value again: unchanged
    # a number in the prose after the answer is no second value: after a comma, "and", "to" or a dash only a
    # value that ends the clause is offered in the answer's place
    ("Final answer: 42, 1 more than 41", "42", "42", True, "42", True),
    ("The answer is 42; 6 times 7 is 42.", "42", "42", True, "42", True),
    ("The answer is 42 and 42 is divisible by 7.", "42", "42", True, "42", True),
    ("The answer is 3.14 to 2 decimal places", "3.14", "3.14", True, "3.14", True),
    ("Thus the answer is 42, 2 less than 44.", "42", "42", True, "42", True),
    ("Final answer: -42, 42 being its absolute value", "-42", "-42", True, "-42", True),
    ("The answer is 42 \u2014 6 times 7.", "42", "42", True, "42", True),
    ("The answer is 5th, 6th is wrong", "5", "5", True, "5", True),
    # a second spelling of the same value is one answer
    ("Final answer: 3/4 or 0.75", "0.75", "3/4", True, "3/4", True),
    ("The answer is 2.5 (or 5/2)", "5/2", "2.5", True, "2.5", True),
    ("The answer is 42 (or 42.0)", "42", "42", True, "42", True),
    ("Final answer: 42", "42", "42", True, "42", True),
    ("The answer is 42, which is the remainder.", "42", "42", True, "42", True),
    ("The answer is 42 and we are done.", "42", "42", True, "42", True),
    ("Final answer: 42 (mod 1000)", "42", "42", True, "42", True),
    ("Final answer: 42 cm", "42", "42", True, "42", True),
    ("Final answer: 1,000", "1000", "1000", True, "1000", True),
    ("Final answer: $42$, which is it", "42", "42", True, "42", True),
    ("The answer is 2.5, or 5/2", "5/2", "2.5", True, "2.5", True),
    (r"\boxed{15\text{ cm}^2}", "15", "15", True, "15", True),
    (r"\boxed{5^{\text{th}}}", "5", "5", True, "5", True),
    ("Final answer: 3:45 PM", "3:45", "3:45", True, "3:45", True),
    # a number set in text font is no hedge (a committed output of smollm2-135m)
    (r"So, the final answer is $\text{1001011001}_{2} \times 2 = 201011001$.", "201011001", "201011001", True,
     "201011001", True),
]


@pytest.mark.parametrize("text, key, extracted, correct, v4_extracted, v4_correct", CASES)
def test_hedged_answers_under_verifier_5_and_4(text, key, extracted, correct, v4_extracted, v4_correct):
    assert verify_answer(text, key, version=5) == Verdict(extracted, correct)
    assert verify_answer(text, key, version=4) == Verdict(v4_extracted, v4_correct)  # recorded verdicts unchanged


@pytest.mark.parametrize("stdout, v5_correct, v4_correct", [
    ("42, 43\n", False, True), ("42 or 43\n", False, True), ("42;43\n", False, True),
    ("42\n", True, True), ("searching...\n42\n", True, True), ("42 43\n", False, False),
    ("42, or 43\n", False, True), ("42 \u2013 43\n", False, True), ("42, 1 more than 41\n", True, True),
    ("42 (or 42.0)\n", True, True),
])
def test_a_programs_answer_line_is_read_the_same_way(stdout, v5_correct, v4_correct):
    assert program_verdict(stdout, None, "42", version=5).correct is v5_correct
    assert program_verdict(stdout, None, "42", version=4).correct is v4_correct


MARKERS = st.sampled_from(["Final answer: ", "The answer is ", "Answer: ", "The final answer is "])
NUMBERS = st.integers(min_value=0, max_value=999)


@given(MARKERS, NUMBERS, NUMBERS, st.sampled_from([" or ", ", ", "; ", " and ", " (or ", " to ", " or maybe ",
                                                   " \\lor "]),
       st.sampled_from(["{}", "${}$", "**{}**"]))
def test_a_number_with_another_offered_in_its_place_is_no_answer(marker, first, second, joint, spelling):
    assume(first != second)  # the same value twice is one answer (test_the_same_value_twice_is_one_answer)
    text = marker + spelling.format(first) + joint + spelling.format(second)
    assert extract_answer(text, 5) is None, text


@given(MARKERS, NUMBERS, st.sampled_from(["", ".", ", which is the answer.", " (mod 1000)", " cm", " and we are done.",
                                          ", as shown above."]),
       st.sampled_from(["{}", "${}$", "**{}**"]))
def test_one_number_then_prose_is_still_that_number(marker, number, after, spelling):
    text = marker + spelling.format(number) + after
    assert extract_answer(text, 5) == extract_answer(text, 4) == str(number), text


@given(MARKERS, NUMBERS, st.sampled_from([" or ", " (or ", ", or ", "; "]), st.sampled_from(["{}", "{}.0", "{}/1"]))
def test_the_same_value_twice_is_one_answer(marker, number, joint, second):
    text = marker + str(number) + joint + second.format(number)
    assert extract_answer(text, 5) == str(number), text


@given(MARKERS, NUMBERS, NUMBERS, st.sampled_from([", ", "; ", " and ", " to ", " \u2014 "]),
       st.sampled_from([" more than 41", " is its double", " times 7", " decimal places", " being wrong"]))
def test_a_number_in_the_prose_after_the_answer_is_no_second_value(marker, number, other, joint, prose):
    text = marker + str(number) + joint + str(other) + prose
    assert extract_answer(text, 5) == extract_answer(text, 4) == str(number), text


def test_every_committed_manifest_keeps_every_verdict_and_extraction_under_verifier_5():
    """Version 5 reads no committed output differently from version 4 (no committed model hedged its answer)."""
    import json

    from graftbench.results.manifest import load_manifest
    from graftbench.results.rescore import rescore_manifest

    from tests.conftest import ROOT

    rescored = 0
    for path in sorted((ROOT / "manifests").glob("*/*.json")):
        if "samples" not in json.loads(path.read_text(encoding="utf-8")):
            continue  # an exactness certificate: pairs, no answers
        manifest = load_manifest(path)
        under_4, under_5 = rescore_manifest(manifest, version=4), rescore_manifest(manifest, version=5)
        assert (under_5.correct, under_5.changes) == (under_4.correct, under_4.changes), path
        rescored += 1
    assert rescored >= 60, rescored
