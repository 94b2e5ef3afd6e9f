"""The kinds of answer spelling verifier 3 reads as rules: thousands separators with any spacing, ordinal suffixes in
any spelling, chains of equalities with a Unicode ellipsis, answer markers before math delimiters with spaces inside,
clock times and ratios, LaTeX commands with unbraced arguments.

Each kind has a table row per example with its verdict under verifier 3 and under verifier 2 (the rules committed
manifests were scored under, which must not change), and a property test that generates the kind's variants
(spacing, delimiters, spellings), so that a rule fitting only its example fails.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graftbench.verify.normalization import RULES_ADDED
from graftbench.verify.answers import Verdict, verify_answer

# (response, key, v3 extracted, v3 correct, v2 extracted, v2 correct)
CASES = [
    ('\\boxed{1,\\;000}', '1000', '1000', True, '1, 000', False),
    ('\\boxed{1,\\ 000}', '1000', '1000', True, '1, 000', False),
    ('\\boxed{2,\u2009024}', '2024', '2024', True, '2, 024', False),
    ('\\boxed{1\\thinspace 000}', '1000', '1000', True, '1\\thinspace 000', False),
    ('Final answer: 12,\\:345', '12345', '12345', True, '12, 345', False),
    ('\\boxed{1, 000}', '1000', '1, 000', False, '1, 000', False),
    ('\\boxed{5^{\\text{th}}}', '5', '5', True, '5^{ }', False),
    ('\\boxed{21^\\text{st}}', '21', '21', True, '21^', False),
    ('\\boxed{2\\textsuperscript{nd}}', '2', '2', True, '2\\textsuperscript{nd}', False),
    ('\\boxed{3^{\\rm rd}}', '3', '3', True, '3^{\\rm rd}', False),
    ('Final answer: 5th', '5', '5', True, None, False),
    ('Answer: 1 + 2 + … + 10 = 55', '55', '55', True, '1', False),
    ('Answer: 1 + 2 + … + 10 = 55', '1', '55', False, '1', True),
    ('Final answer: $2 + 4 + ⋯ + 20 = 110$', '110', '110', True, None, False),
    ('Answer $ 9 $', '9', '9', True, None, False),
    ('Answer \\( 9 \\)', '9', '9', True, None, False),
    ('Answer: \\[\n9\n\\]', '9', '9', True, None, False),
    ('Answer: $$ \\; 9 \\; $$', '9', '9', True, None, False),
    ('Final answer: 3:45 PM', '3', '3:45', False, '3', True),
    ('Final answer: 3:45 PM', '3:45', '3:45', True, '3', False),
    ('\\boxed{2 : 3}', '2:3', '2:3', True, '2 : 3', True),
    ('The answer is 10:30.', '10', '10:30', False, '10:30', False),
    ('\\boxed{\\sqrt 16}', '4', '\\sqrt{16}', True, '\\sqrt 16', False),
    ('\\boxed{\\sqrt 16}', '6', '\\sqrt{16}', False, '\\sqrt 16', False),
    ('\\boxed{3\\sqrt 2}', '3\\sqrt{2}', '3\\sqrt{2}', True, '3\\sqrt 2', False),
    ('\\boxed{\\frac34\\pi}', '\\frac{3\\pi}{4}', '\\frac{3}{4}\\pi', True, '\\frac34\\pi', False),
    ('\\boxed{\\frac{\\sqrt 3}2}', '\\frac{\\sqrt{3}}{2}', '\\frac{\\sqrt{3}}{2}', True, '\\frac{\\sqrt 3}2', False),
    ('\\boxed{\\binom 5 2}', '10', '\\binom{5}{2}', True, '\\binom 5 2', False),
]


@pytest.mark.parametrize(("text", "key", "extracted", "correct"), [c[:4] for c in CASES])
def test_kind_under_verifier_3(text, key, extracted, correct):
    assert verify_answer(text, key, version=3) == Verdict(extracted, correct)


@pytest.mark.parametrize(("text", "key", "extracted", "correct"), [(*c[:2], *c[4:]) for c in CASES])
def test_verifier_2_is_unchanged_on_the_same_kinds(text, key, extracted, correct):
    assert verify_answer(text, key, version=2) == Verdict(extracted, correct)


def test_verifier_3_lists_one_rule_per_kind():
    assert len(RULES_ADDED[3]) == 6


# Where an answer sits: a box, a phrase marker, a phrase marker with math delimiters.
CONTEXTS = [r"\boxed{%s}", r"$\boxed{%s}$", "Final answer: %s", "Final answer: $%s$", r"The answer is \(%s\).",
            "**Answer:** $%s$", "Answer: %s"]
THOUSANDS = [",", "{,}", r",\,", r",\!", r",\ ", r",\;", r",\:", r"{,}\!", r"{,}\,", r"{,}\;", r"\,", r"\!",
             r"\ ", r"\;", r"\:", "~", ",~", "\u2009", ",\u2009", "\u202f", "\u00a0", ",\u00a0",
             r"\thinspace ", r",\thinspace ", r"\!,\!", r" \, "]


def _grouped(n: int, separator: str) -> str:
    return f"{n:,}".replace(",", separator)


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(1000, 10**12), st.sampled_from(THOUSANDS), st.sampled_from(CONTEXTS))
def test_thousands_separators_with_any_spacing_are_read_as_one_number(n, separator, context):
    grouped = _grouped(n, separator)
    assert verify_answer(context % grouped, str(n)) == Verdict(str(n), True)
    assert verify_answer(rf"\boxed{{{n}}}", grouped).correct  # the key is read by the same rule


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(1, 999), st.integers(0, 99), st.sampled_from(THOUSANDS[2:]))
def test_a_group_of_other_than_three_digits_is_never_joined(head, tail, separator):
    text = rf"\boxed{{{head}{separator}{tail}}}"
    assert not verify_answer(text, f"{head}{tail}").correct
    assert not verify_answer(text, f"{head}{tail:02d}").correct


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(1000, 10**9), st.sampled_from([", ", " ", ",  "]))
def test_a_plain_space_or_a_comma_and_a_plain_space_is_not_a_separator(n, separator):
    assert not verify_answer(rf"\boxed{{{_grouped(n, separator)}}}", str(n)).correct


ORDINALS = ["{n}{s}", "{n} {s}", "{n}^{{{s}}}", "{n}^{{\\text{{{s}}}}}", "{n}^\\text{{{s}}}", "{n}^{{\\rm {s}}}",
            "{n}^{{\\mathrm{{{s}}}}}", "{n}^{{\\textrm{{{s}}}}}", "{n}\\textsuperscript{{{s}}}", "{n}\\text{{{s}}}",
            "{n}^{{ \\text{{ {s} }} }}", "{n}^\\mathrm{{{s}}}", "{n}^{{\\textnormal{{{s}}}}}"]


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(1, 9999), st.sampled_from(["st", "nd", "rd", "th"]), st.sampled_from(ORDINALS),
       st.sampled_from(CONTEXTS))
def test_an_ordinal_suffix_in_any_spelling_is_dropped(n, suffix, spelling, context):
    ordinal = spelling.format(n=n, s=suffix)
    assert verify_answer(context % ordinal, str(n)) == Verdict(str(n), True)


ELLIPSES = ["\u2026", "\u22ef", r"\ldots", r"\cdots", r"\dots", "..."]
CHAIN_CONTEXTS = ["Answer: %s", "Final answer: %s.", "Final answer: $%s$", r"The answer is \(%s\).",
                  r"\boxed{%s}", "**Answer:** %s"]


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(3, 60), st.sampled_from(ELLIPSES), st.sampled_from(["", " "]), st.sampled_from(CHAIN_CONTEXTS))
def test_a_chain_of_equalities_with_any_ellipsis_gives_its_last_value(n, ellipsis, space, context):
    total = n * (n + 1) // 2
    chain = f"1{space}+{space}2{space}+{space}{ellipsis}{space}+{space}{n}{space}={space}{total}"
    assert verify_answer(context % chain, str(total)) == Verdict(str(total), True)
    assert not verify_answer(context % chain, "1").correct  # never the first number


MARKERS = ["Answer", "Answer:", "**Answer:**", "Answer :", "Final answer", "Final answer:", "The final answer is",
           "The answer is", "Final Answer: The final answer is"]
DELIMITERS = [("$", "$"), ("$$", "$$"), (r"\(", r"\)"), (r"\[", r"\]")]
PADDING = ["", " ", "  ", r"\;", r"\,", r"\ ", r"\quad ", "\n", " \\! "]


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(0, 999), st.sampled_from(MARKERS), st.sampled_from(DELIMITERS), st.sampled_from(PADDING),
       st.sampled_from(PADDING), st.sampled_from([" ", "", "\n"]))
def test_a_marker_before_math_delimiters_with_spaces_inside_gives_the_value(n, marker, delimiters, left, right, gap):
    if gap == "\n" and not marker.endswith((":", "is", ":**")):
        gap = " "  # only an open marker (a colon, "is") takes its answer from the next line
    text = f"{marker}{gap}{delimiters[0]}{left}{n}{right}{delimiters[1]}"
    assert verify_answer(text, str(n)) == Verdict(str(n), True)


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(0, 23), st.integers(0, 59), st.sampled_from([":", " : ", r"\colon ", r" \colon "]),
       st.sampled_from(["Final answer: %s", "Final answer: %s PM", "The answer is %s.", r"\boxed{%s}",
                        "Answer: $%s$", "The meeting starts at %s, so the answer is %s"]))
def test_a_clock_time_or_ratio_is_one_value_never_its_first_number(hours, minutes, colon, context):
    written = f"{hours}{colon}{minutes:02d}"
    text = context % ((written,) * context.count("%s"))
    value = f"{hours}:{minutes:02d}"
    assert verify_answer(text, value) == Verdict(value, True)
    assert not verify_answer(text, str(hours)).correct
    assert not verify_answer(text, str(minutes)).correct


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9))
def test_a_three_part_ratio_equals_only_itself(a, b, c):
    assert verify_answer(rf"\boxed{{{a} : {b} : {c}}}", f"{a}:{b}:{c}").correct
    assert not verify_answer(rf"\boxed{{{a}:{b}:{c}}}", str(a)).correct


SQRTS = [r"\sqrt {n}", r"\sqrt{n}", r"\sqrt  {n}", r"\sqrt{{{n}}}", r"\sqrt {{ {n} }}"]
FRACS = [r"\frac{a}{b}", r"\frac {a} {b}", r"\frac{{{a}}}{b}", r"\frac{a}{{{b}}}", r"\dfrac{a}{b}", r"\tfrac {a}{b}",
         r"\frac{{{a}}}{{{b}}}"]


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(2, 99), st.sampled_from(SQRTS), st.sampled_from(CONTEXTS))
def test_an_unbraced_square_root_argument_is_the_whole_number(k, spelling, context):
    root = spelling.format(n=k * k)
    assert verify_answer(context % root, str(k)).correct
    assert not verify_answer(context % root, str(k * k)).correct


@settings(deadline=None)  # sympy's first parse may be slow; nothing here is timed
@given(st.integers(1, 9), st.integers(1, 9), st.sampled_from(FRACS), st.sampled_from(CONTEXTS))
def test_an_unbraced_fraction_takes_one_token_per_argument(a, b, spelling, context):
    written = spelling.format(a=a, b=b)
    value = Fraction(a, b)
    assert verify_answer(context % written, str(value)).correct
    if value != a * 10 + b:
        assert not verify_answer(context % written, f"{a}{b}").correct


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.integers(2, 9), st.sampled_from([r"\frac{a}{b}", r"\frac {a} {b}", r"\frac{a}{{{b}}}"]),
       st.sampled_from([r"\sqrt 2", r"\pi", r"\sqrt 3"]))
def test_unbraced_arguments_inside_an_expression_compare_as_the_braced_expression(a, b, spelling, factor):
    written = spelling.format(a=a, b=b) + factor
    braced = rf"\frac{{{a}}}{{{b}}}" + factor.replace(r"\sqrt ", r"\sqrt{").replace("2", "2}").replace("3", "3}")
    assert verify_answer(rf"\boxed{{{written}}}", braced).correct
    assert not verify_answer(rf"\boxed{{{written}}}", rf"\frac{{{a}}}{{{b}}}").correct
