"""Rewrites that verifier 3 applies to an answer's spelling before it is read: each turns every spelling of one
kind into a single canonical one, so that the kind is handled as a rule and not as the example it was found with.

* thousands separators written with any LaTeX or Unicode spacing (``1,\\;000``, ``1{,}\\!000``, ``1\\thinspace
  000``, ``1\u2009000``) -> plain digits, only when every group after the first has exactly three digits;
* ordinal suffixes in any spelling (``5th``, ``5^{th}``, ``5^{\\text{th}}``, ``5^\\text{th}``,
  ``5\\textsuperscript{th}``, ``5^{\\rm th}``) -> the number;
* Unicode ellipses (``…``, ``⋯``) -> ``\\ldots`` / ``\\cdots``, which the other rules already read;
* a colon between two numbers (a clock time, a ratio) -> ``a:b`` without spaces, one value that is never its first
  number;
* LaTeX commands with unbraced arguments (``\\sqrt 16``, ``\\frac34``, ``\\frac 3 4``, ``\\binom 5 2``) -> braced.

Imports no torch, no sympy; never raises on any text.
"""

from __future__ import annotations

import re

# Spacing that can sit inside a number: LaTeX spacing commands, a tie, Unicode thin / narrow / figure / no-break
# spaces. Plain spaces alone never separate thousands (``2 345`` may be two numbers).
_SPACE = r"(?:\\[,;:! ]|\\(?:thinspace|medspace|thickspace|negthinspace)(?![a-zA-Z])|~|[\u2009\u202f\u00a0\u2007\u2008\u200a])"
_COMMA = r"(?:\{,\}|,)"
_SEP = rf"(?:[ \t]*{_SPACE})*[ \t]*{_COMMA}?(?:[ \t]*{_SPACE})*[ \t]*"
_GROUPED_RE = re.compile(rf"(?<![\d.,])\d{{1,3}}(?:{_SEP}\d{{3}})+(?![\d])")
_SEPARATOR_RE = re.compile(_SEP)
_BARE_COMMA_RE = re.compile(r"(?<!\\),")  # a comma, not the thin space \,
_PLAIN_RE = re.compile(r"[ \t]*(?:,[ \t]+)?")  # a plain space, or a comma and a plain space: not a separator here

_SUFFIX = r"(?:st|nd|rd|th)"
_TEXT_CMD = r"\\(?:text|textrm|mathrm|mbox|textnormal|rm|mathit|textit)(?![a-zA-Z])"
_ORDINAL_RE = re.compile(
    r"(?<=\d)[ \t]*(?:"
    rf"\^[ \t]*\{{[ \t]*(?:{_TEXT_CMD}[ \t]*\{{?[ \t]*)?{_SUFFIX}[ \t]*\}}?[ \t]*\}}"  # ^{th} ^{\text{th}} ^{\rm th}
    rf"|\^[ \t]*{_TEXT_CMD}[ \t]*\{{[ \t]*{_SUFFIX}[ \t]*\}}"  # ^\text{th}
    rf"|\\textsuperscript[ \t]*\{{[ \t]*{_SUFFIX}[ \t]*\}}"  # \textsuperscript{th}
    rf"|{_TEXT_CMD}[ \t]*\{{[ \t]*{_SUFFIX}[ \t]*\}}"  # \text{th}
    rf"|{_SUFFIX}(?![a-zA-Z])"  # th
    r")"
)
_COLON_RE = re.compile(r"(?<=\d)[ \t]*(?::|\\colon(?![a-zA-Z]))[ \t]*(?=\d)")
RATIO_RE = re.compile(r"^\d+(?::\d+)+$")

_ARG = r"(?:\{(?:[^{}]|\{[^{}]*\})*\}|\d|[a-zA-Z]|\\[a-zA-Z]+)"  # a group (two levels deep) or one token
_SQRT_RE = re.compile(r"\\sqrt(?![a-zA-Z])[ \t]*(\[[^\]]{0,20}\])?[ \t]*(?![{\[])(\d+(?:\.\d+)?|[a-zA-Z]|\\[a-zA-Z]+)")
_TWO_ARGS_RE = re.compile(rf"\\(frac|binom)(?![a-zA-Z])[ \t]*({_ARG})[ \t]*({_ARG})")


def _group(number: re.Match[str]) -> str:
    """Digits of a grouped number, or the text unchanged when one of its separators is plain (``1, 000``)."""
    text = number.group(0)
    seps = _SEPARATOR_RE.findall(text)
    if any(sep and _PLAIN_RE.fullmatch(sep) for sep in seps) or any(len(_BARE_COMMA_RE.findall(sep)) > 1
                                                                     for sep in seps):
        return text
    return "".join(c for c in text if c.isdigit())


def ungroup_thousands(s: str) -> str:
    """``1,\\;000`` -> ``1000`` for every number whose groups after the first have three digits each and whose
    separators hold a comma or a LaTeX / Unicode space (a plain space, or a comma and a plain space, are not)."""
    return _GROUPED_RE.sub(_group, s)


def drop_ordinals(s: str) -> str:
    """The number without its ordinal suffix, in any spelling: ``5^{\\text{th}}`` -> ``5``."""
    return _ORDINAL_RE.sub("", s)


def ellipses_as_latex(s: str) -> str:
    """``…`` -> `` \\ldots ``, ``⋯`` -> `` \\cdots ``."""
    return s.replace("\u2026", r" \ldots ").replace("\u22ef", r" \cdots ")


def tight_colons(s: str) -> str:
    """``3 : 45`` and ``3 \\colon 45`` -> ``3:45``."""
    return _COLON_RE.sub(":", s)


def _unbrace(arg: str) -> str:
    return arg[1:-1] if arg.startswith("{") else arg


def brace_arguments(s: str) -> str:
    """``\\sqrt 16`` -> ``\\sqrt{16}`` (the whole number, as a reader means it), ``\\sqrt[3] 8`` ->
    ``\\sqrt[3]{8}``, ``\\frac34`` / ``\\frac 3 4`` -> ``\\frac{3}{4}`` (one token each, as TeX reads them)."""
    for _ in range(4):  # nested commands: \frac{\sqrt 3}2
        new = _SQRT_RE.sub(lambda m: rf"\sqrt{m.group(1) or ''}{{{m.group(2)}}}", s)
        new = _TWO_ARGS_RE.sub(lambda m: rf"\{m.group(1)}{{{_unbrace(m.group(2))}}}{{{_unbrace(m.group(3))}}}", new)
        if new == s:
            break
        s = new
    return s


def canonical_spelling(s: str) -> str:
    """Every rewrite of this module, in an order where none undoes another."""
    s = ellipses_as_latex(s)
    s = ungroup_thousands(s)
    s = drop_ordinals(s)
    s = tight_colons(s)
    return brace_arguments(s)
