"""Canonical string form of an answer, under a numbered set of rules (the verifier version).

Version 1 is the rule set every manifest written before the version was recorded was scored under; version 2 adds
the rules listed in :data:`RULES_ADDED`. A rule that changes a verdict is never changed in place: it is added under a
new version, so that a committed manifest keeps verifying under the version it records (see
:func:`graftbench.verify.answers.verify_answer`).

Imports no torch, no sympy. :func:`normalize` returns ``None`` for an answer that is not one value (an equation still
to solve, several assignments in one box); it never raises on any text.
"""

from __future__ import annotations

import re

from .extraction import match_brace, strip_text_blocks
from .spelling import canonical_spelling

MAX_DIGITS = 1000  # integer literals longer than this are not parsed as numbers

# What each version added, for docs/verification.md and ``graftbench verify-manifest --rescore``.
RULES_ADDED = {
    2: (
        "a box without braces counts as a box around the next single character (`\\boxed 2`); `\\boxed 42` is "
        "ambiguous (TeX boxes only the 4) and is not an answer",
        "an empty or placeholder box (`\\boxed{}`, `\\boxed{\\ldots}`, `\\boxed{?}`) is not a marker, so an echoed "
        "instruction after the real answer does not hide it",
        "a thousands separator followed by a thin or negative space (`10,\\!080`, `1,\\,000`) is a separator",
        "a unit in `\\text{}`/`\\mbox{}` is dropped with its exponent (`15\\text{ cm}^2` is 15)",
        "`\\mathrm{}` around a single letter is a symbol, not a unit (`3\\mathrm{i}` is not 3)",
        "a trailing percent sign is dropped (`25\\%` is 25), on responses and keys alike",
        "`A = B` gives B only when A has no variable (shown arithmetic, `3 \\cdot 4 = 12`) or no numeral (a named "
        "quantity, `m+n = 33`, `a_{10} = 55`); when A mixes numerals and variables (`2x + 3 = 7`) there is no answer",
        "several assignments in one answer (`p=3, q=5`) are not one value: no answer",
        "after a marker: an ellipsis (`1 + 2 + ... + 10 = 55`) does not end the sentence, a quoted answer "
        "(`\"42\"`) is unquoted, and a sentence ending in `is X` / `equals X` gives X",
    ),
    3: (
        "a thousands separator is a comma (`,` or `{,}`) and/or any LaTeX or Unicode spacing (`\\,` `\\!` `\\ ` "
        "`\\;` `\\:` `~` `\\thinspace`, thin and no-break spaces) when every later group has three digits "
        "(`1,\\;000` is 1000; `1, 000` and `3,\\!5` are not numbers)",
        "an ordinal suffix in any spelling is dropped (`5th`, `5^{th}`, `5^{\\text{th}}`, `5^\\text{th}`, "
        "`5\\textsuperscript{th}`, `5^{\\rm th}` are 5)",
        "a Unicode ellipsis (`…`, `⋯`) reads as `\\ldots` / `\\cdots`, so a chain `1 + 2 + … + 10 = 55` gives its last "
        "value",
        "a line `Answer` followed by a math delimiter is a marker without a colon (`Answer $ 9 $`, `Answer \\( 9 \\)`), "
        "a delimited answer may span lines (`Answer: \\[` / `9` / `\\]`), and LaTeX spacing inside the delimiters is "
        "ignored",
        "a colon between numbers (a clock time or a ratio, `3:45`, `2 : 3`) is one value `a:b`, never its first "
        "number, and equals only the same `a:b`",
        "a LaTeX command's unbraced arguments are braced: `\\sqrt 16` is `\\sqrt{16}` (the whole number), `\\frac34` "
        "and `\\frac 3 4` are `\\frac{3}{4}` (one token each, as TeX reads them), `\\binom 5 2` is `\\binom{5}{2}`",
    ),
    4: (
        "an output's reasoning, between the reasoning delimiters its prompt layout names (`<think>` ... `</think>`), "
        "is not read: the answer comes only from the text after the last closing delimiter, and an output cut "
        "inside its reasoning (opened, never closed) has no answer; a layout that names no delimiters reads the "
        "whole output, as version 3 did",
    ),
    5: (
        "a hedged or listed answer is not one value: a number after a phrase marker followed by another value in its "
        "place (`42 or 43`, `42, or maybe 43`, `42 (or possibly 43)`, `42 [or 43]`, `*42* or *43*`; after a comma, "
        "semicolon, `and`, `to` or a dash only a value that ends the clause: `42, 43`, `42; 43`, `42 to 44`, "
        "`42 \u2013 43`, but not `42, 1 more than 41`) gives no answer, where version 4 took the first number; the "
        "same value spelled again (`3/4 or 0.75`, `1/4, or 25%`, `42, or 101010 in base 2`) is one answer; a "
        "program's answer line is read the same way",
        "a box holding a number followed on its line by another value offered in its place (`\\boxed{42} or "
        "\\boxed{43}`, `\\boxed{42} \\quad (\\text{or } 43)`) gives no answer, nor does any box in that hedge, "
        "where version 4 took the last box",
        "a `\\text{}` (or `\\mbox{}`, `\\mathrm{}`, `\\textrm{}`) block offering another value (`or`, `and`, "
        "`to`, `possibly`, `maybe`, `perhaps` with a numeral) is not a unit: `\\boxed{42 \\text{ (or 43)}}` gives no "
        "answer, where version 4 dropped the block and read 42",
    ),
}

_UNWRAP_CMD_RE = re.compile(
    r"\\(?:textbf|mathbf|boldsymbol|bm|textit|mathit|emph|underline"
    r"|mathrm\b(?=\s*\{\s*[-+\d]))"  # \mathrm{12} is a number, \mathrm{cm} a unit
    r"\s*\{([^{}]*)\}"
)
_MATHRM_SYMBOL_RE = re.compile(r"\\mathrm\s*\{\s*([a-zA-Z])\s*\}")
_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SPACED_THOUSANDS_RE = re.compile(r"(?<=\d)(?:\{,\}|,)\s*\\[,!]\s*(?=\d{3}(?!\d))")
_PERCENT_RE = re.compile(r"\s*\\?%$")
INT_RE = re.compile(r"^[-+]?\d+$")
_SLASH_FRAC_RE = re.compile(r"^([-+]?)(\d+)\s*/\s*(\d+)$")
_LATEX_FRAC_RE = re.compile(
    r"^([-+]?)\\frac\s*(?:\{\s*([-+]?\d+)\s*\}|(\d))\s*(?:\{\s*([-+]?\d+)\s*\}|(\d))$"
)
_EQUALS_RE = re.compile(r"(?<![<>!\\:])=(?!=)")
_GREEK_RE = re.compile(
    r"\\(?:alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|mu|nu|xi|rho|"
    r"sigma|tau|upsilon|phi|varphi|chi|psi|omega|Gamma|Delta|Theta|Lambda|Xi|Sigma|Phi|Psi|Omega)(?![a-zA-Z])"
)


def _unwrap_parens(s: str) -> str:
    if len(s) >= 2 and s[0] == "(" and s[-1] == ")":
        depth = 0
        for i, c in enumerate(s):
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and i < len(s) - 1:
                return s  # "(1)+(2)": the outer parentheses are not a wrapper
        inner = s[1:-1].strip()
        # keep tuples such as (1, 2) but unwrap thousands-separated numbers such as (1,000)
        if "," not in inner or _THOUSANDS_RE.match(inner):
            return inner
    return s


def _top_level_split(s: str, separators: str) -> list[str]:
    """``s`` split at the characters in ``separators`` that are outside (), [] and {}."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c in separators and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    return [*parts, s[start:]]


def _side_kind(side: str) -> tuple[bool, bool]:
    """(has a numeral, has a variable) for one side of an equation. Subscripts and numeric function arguments are
    part of a name (``a_{10}``, ``f(3)``); ``\\text{}`` blocks are names; Greek letters are variables, ``\\pi`` is
    a constant."""
    side = re.sub(r"\\(?:text|mbox|textrm|mathrm|operatorname)\s*\{[^{}]*\}", " v ", side)
    side = re.sub(r"_\s*(?:\{[^{}]*\}|\\?[a-zA-Z0-9])", "", side)
    side = re.sub(r"(?<=[a-zA-Z])\(\s*[-+\d.,\s]*\)", "", side)
    side = _GREEK_RE.sub(" v ", side)
    side = re.sub(r"\\[a-zA-Z]+", " ", side)
    return bool(re.search(r"\d", side)), bool(re.search(r"[a-zA-Z]", side))


def _equation_value(s: str, version: int) -> str | None:
    """The value of ``s`` when it is written as an equation (``x = 5`` -> ``5``); ``s`` itself when it is none."""
    parts = _EQUALS_RE.split(s)
    if len(parts) < 2 or not parts[-1].strip():
        return s
    if version >= 2:
        pieces = _top_level_split(s, ",;")
        if len(pieces) > 1 and any(_EQUALS_RE.search(p) for p in pieces[1:]):
            return None  # several assignments: p=3, q=5
        if any(all(_side_kind(lhs)) for lhs in parts[:-1]):
            return None  # an equation still to solve: 2x + 3 = 7
    return parts[-1].strip()


def _strip_units(s: str, version: int) -> str:
    if version < 2:
        return strip_text_blocks(s)
    s = _MATHRM_SYMBOL_RE.sub(lambda m: m.group(1), s)
    return strip_text_blocks(s, with_exponent=True)


# Version 5: a \text{}-like block offering another value (``\text{ (or 43)}``, ``\text{ or possibly 43}``) is a
# hedge, not a unit; a number set in text font (``\text{1001}_{2}``) is not one
_TEXT_WITH_NUMBER_RE = re.compile(r"\\(?:text|mbox|mathrm|textrm)\s*\{[^{}]*\b(?:or|and|to|possibly|maybe|perhaps)\b"
                                  r"[^{}]*\d[^{}]*\}", re.IGNORECASE)


def _normalize_once(s: str, version: int) -> str | None:
    s = s.strip()
    s = s.replace("\\$", "").replace("$", "")
    if s.startswith("\\(") and s.endswith("\\)") or s.startswith("\\[") and s.endswith("\\]"):
        s = s[2:-2]
    s = s.replace("**", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    if version >= 3:
        s = canonical_spelling(s)
    s = re.sub(r"\\(?:left|right|displaystyle|textstyle|bigl?|bigr?|Bigl?|Bigr?)(?![a-zA-Z])", "", s)
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|°", "", s)
    if version >= 2:
        s = _SPACED_THOUSANDS_RE.sub(",", s)
    # thousands separators written in LaTeX: 1{,}000, 1\,000, 1\ 000, 1\!000, 1~000
    s = re.sub(
        r"(?<=\d)(?:\{,\}|\\[,;:! ]|~)(?=\d{3}(?!\d))",
        lambda m: "," if m.group(0) == "{,}" else "",
        s,
    )
    s = _UNWRAP_CMD_RE.sub(lambda m: m.group(1), s)
    if version >= 5 and _TEXT_WITH_NUMBER_RE.search(s):
        return None  # a text block offering another value is no unit: "42 \text{ (or 43)}" is not one value
    s = _strip_units(s, version)
    s = re.sub(r"\\[,;:! ]", " ", s)  # remaining LaTeX spacing
    s = re.sub(r"\s+", " ", s).strip()
    s = s.rstrip(".").strip()
    if version >= 2:
        s = _PERCENT_RE.sub("", s)
    value = _equation_value(s, version)
    if value is None:
        return None
    s = _unwrap_parens(value)
    if s.startswith("{") and s.endswith("}") and match_brace(s, 0, len(s)) == len(s) - 1:
        s = s[1:-1].strip()
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    if INT_RE.match(s) and len(s) <= MAX_DIGITS:
        s = str(int(s))
    return s


def normalize(s: str, version: int) -> str | None:
    """Canonical string form of the answer ``s`` under the rules of verifier ``version`` (idempotent); ``None``
    when, under version 2, ``s`` is not one value (an equation with numerals and variables on its left side, or
    several assignments)."""
    for _ in range(6):
        new = _normalize_once(s, version)
        if new is None or new == s:
            s = new
            break
        s = new
    if s is None:
        return None
    frac = as_plain_fraction(s)
    return frac if frac is not None else s


def as_plain_fraction(s: str) -> str | None:
    """``\\frac{a}{b}`` / ``a / b`` with integer a, b -> ``"a/b"`` (sign in front); ``None`` for anything else."""
    m = _LATEX_FRAC_RE.match(s)
    if m:
        sign, num, den = m.group(1), m.group(2) or m.group(3), m.group(4) or m.group(5)
    else:
        m = _SLASH_FRAC_RE.match(s)
        if not m:
            return None
        sign, num, den = m.group(1), m.group(2), m.group(3)
    if len(num) + len(den) > MAX_DIGITS:
        return None
    n, d = int(num), int(den)
    neg = (sign == "-") ^ (n < 0) ^ (d < 0)
    return f"{'-' if neg else ''}{abs(n)}/{abs(d)}"
