"""Verifier rules of issue #11, one row each: response, key, the verdict under verifier 2 (kept by verifier 3, whose
own kinds are in verify/test_answer_kinds.py) and under verifier 1 (the rules every earlier manifest was scored under, which must not change).

The version-1 column was produced by the verifier as it was before version 2 existed (commit a53ef77), so a row
whose two columns differ is a rule that version 2 added.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graftbench.verify.extraction import is_placeholder
from graftbench.verify.normalization import RULES_ADDED, normalize
from graftbench.verify.answers import (VERIFIER_VERSION, VERIFIER_VERSIONS, Verdict, check_version, extract_answer,
                                       verify_answer)

# (response, key, v2 extracted, v2 correct, v1 extracted, v1 correct)
CASES = [
    # brace-less box
    (r"so our answer is $\boxed 2$.", "2", "2", True, None, False),
    (r"Hence $\boxed7$.", "7", "7", True, None, False),
    (r"The total is $\boxed 42$.", "42", None, False, None, False),
    (r"The total is $\boxed 42$.", "4", None, False, None, False),
    # thousands separator followed by a thin or negative space
    (r"\boxed{10,\!080}", "10080", "10080", True, "10, 080", False),
    (r"\boxed{1,\,000,\,000}", "1000000", "1000000", True, "1, 000, 000", False),
    (r"\boxed{3,\!5}", "35", "3, 5", False, "3, 5", False),
    # unit in \text/\mbox with an exponent
    (r"\boxed{15\text{ cm}^2}", "225", "15", False, "15 ^2", True),
    (r"\boxed{15\text{ cm}^2}", "15", "15", True, "15 ^2", False),
    (r"\boxed{8\mbox{ m}^{3}}", "512", "8", False, "8 ^{3}", True),
    (r"\boxed{8\mbox{ m}^{3}}", "8", "8", True, "8 ^{3}", False),
    (r"\boxed{15 \text{cm}^2}", "15", "15", True, "15 ^2", False),
    # empty or placeholder box after the real answer
    ('So the remainder is \\boxed{42}.\n\nSolve the following problem. Put the final answer in \\boxed{}.', "42", "42", True, "", False),
    (r"Thus \boxed{17}. Write your answer as \boxed{\ldots}", "17", "17", True, r"\ldots", False),
    (r"Thus \boxed{17}. Answer: \boxed{ ? }", "17", "17", True, "?", False),
    (r"Put the final answer in \boxed{}.", "0", None, False, "", False),
    # ellipsis in shown arithmetic
    ("Answer: 1 + 2 + ... + 10 = 55", "55", "55", True, "1 + 2 +", False),
    (r"Final answer: $2 + 4 + \dots + 20 = 110$", "110", "110", True, "110", True),
    (r"Answer: 1 + 2 + \cdots + 9 = 45.", "45", "45", True, "45", True),
    # equations: A = B
    (r"\boxed{2x + 3 = 7}", "7", None, False, "7", True),
    (r"\boxed{m+n=33}", "33", "33", True, "33", True),
    ("the final answer is $xy = 10$", "10", "10", True, None, False),
    (r"\boxed{3 \cdot 4 = 12}", "12", "12", True, "12", True),
    (r"\boxed{a_{10} = 55}", "55", "55", True, "55", True),
    (r"\boxed{f(3) = 7}", "7", "7", True, "7", True),
    (r"\boxed{3y - 2 = 10}", "10", None, False, "10", True),
    (r"\boxed{x^2 = 49}", "49", None, False, "49", True),
    (r"\boxed{x = 2 + 3 = 5}", "5", "5", True, "5", True),
    (r"\boxed{\theta = 30^\circ}", "30", "30", True, "30", True),
    (r"\boxed{2\theta = 60}", "60", None, False, "60", True),
    # quoted answer after a marker
    ('Final answer: "42"', "42", "42", True, None, False),
    ("The answer is '7'.", "7", "7", True, "'7'", True),
    ("Final answer: “42”", "42", "42", True, None, False),
    ("Answer: `12`", "12", "12", True, None, False),
    # percent sign
    (r"\boxed{25\%}", "25", "25", True, r"25\%", False),
    (r"\boxed{25}", r"25\%", "25", True, "25", False),
    ("Final answer: 40%", "40", "40", True, "40%", False),
    (r"\boxed{12.5\%}", "12.5", "12.5", True, r"12.5\%", False),
    # a sentence after the marker
    ("Final Answer: The largest $n$ is 34.", "34", "34", True, None, False),
    ("Final answer: The number of ways is 120.", "120", "120", True, None, False),
    (r"Final answer: the probability equals $\frac{1}{2}$.", "0.5", "1/2", True, None, False),
    ("Final answer: There are 15 such pairs.", "15", None, False, None, False),
    # several values in one box
    (r"\boxed{p=3, q=5}", "5", None, False, "5", True),
    (r"\boxed{x=1, y=2, z=3}", "3", None, False, "3", True),
    (r"\boxed{(p, q) = (3, 5)}", "5", "(3, 5)", False, "(3, 5)", False),
    # \mathrm{} is not always a unit
    (r"\boxed{3\mathrm{i}}", "3", "3i", False, "3", True),
    (r"\boxed{2\mathrm{e}}", "2", "2e", False, "2", True),
    (r"\boxed{5\,\mathrm{cm}}", "5", "5", True, "5", True),
    (r"\boxed{\mathrm{12}}", "12", "12", True, "12", True),
    # keys go through the same normalization
    (r"\boxed{900000000}", r"900,\!000,\!000", "900000000", True, "900000000", False),
    (r"\boxed{7}", r"\text{7}", "7", True, "7", True),
]


@pytest.mark.parametrize(("text", "key", "extracted", "correct"), [c[:4] for c in CASES])
def test_rule_under_verifier_2(text, key, extracted, correct):
    assert verify_answer(text, key, version=2) == Verdict(extracted, correct)


@pytest.mark.parametrize(("text", "key", "extracted", "correct"), [c[:4] for c in CASES])
def test_verifier_3_keeps_every_verifier_2_rule(text, key, extracted, correct):
    assert verify_answer(text, key, version=3) == Verdict(extracted, correct)


@pytest.mark.parametrize(("text", "key", "extracted", "correct"), [(*c[:2], *c[4:]) for c in CASES])
def test_verifier_1_is_unchanged(text, key, extracted, correct):
    assert verify_answer(text, key, version=1) == Verdict(extracted, correct)


def test_every_version_after_the_first_lists_its_rules():
    assert VERIFIER_VERSION == max(VERIFIER_VERSIONS) == 5
    assert sorted(RULES_ADDED) == list(VERIFIER_VERSIONS[1:])
    assert len(RULES_ADDED[2]) == 9


@pytest.mark.parametrize("version", [0, 6, "2", True, None])
def test_unknown_version_is_refused_by_name(version):
    with pytest.raises(ValueError, match=r"verifier version .* is not known to this graftbench \(it knows 1, 2, 3, 4, 5\)"):
        check_version(version)
    with pytest.raises(ValueError, match="not known"):
        verify_answer(r"\boxed{1}", "1", version=version)


@pytest.mark.parametrize(("content", "placeholder"), [
    ("", True), ("  ", True), ("?", True), ("...", True), (r"\ldots", True), (r"\dots", True), (r"\square", True),
    (r"\text{answer}", True), (r"\text{ your final answer }", True), (r"\quad", True),
    ("0", False), ("x", False), (r"\text{cm}", False), ("a?", False),
])
def test_placeholder_boxes(content, placeholder):
    assert is_placeholder(content) is placeholder


@given(st.integers(1, 99), st.integers(0, 99), st.sampled_from("xyzn"))
def test_equation_with_numerals_and_a_variable_on_the_left_has_no_answer(a, b, var):
    c = a + b
    assert extract_answer(rf"\boxed{{{a}{var} + {b} = {c}}}") is None
    assert extract_answer(rf"\boxed{{{a}{var} + {b} = {c}}}", version=1) == str(c)


@given(st.integers(0, 999), st.integers(0, 999))
def test_shown_arithmetic_and_named_quantities_give_the_right_side(a, b):
    assert extract_answer(rf"\boxed{{{a} + {b} = {a + b}}}") == str(a + b)
    assert extract_answer(rf"\boxed{{m + n = {a + b}}}") == str(a + b)
    assert extract_answer(rf"Final answer: $a_{{{a}}} = {b}$") == str(b)


@given(st.integers(1000, 10**9))
def test_thin_space_thousands_separators_round_trip(n):
    thin = f"{n:,}".replace(",", r",\!")
    assert verify_answer(rf"$\boxed{{{thin}}}$", str(n)) == Verdict(str(n), True)
    assert verify_answer(rf"$\boxed{{{n}}}$", thin).correct


@given(st.text(max_size=200))
def test_normalize_never_raises_and_is_idempotent(text):
    once = normalize(text, 2)
    assert once is None or normalize(once, 2) == once
