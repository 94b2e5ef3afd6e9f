"""Finding final-answer markers in a response: ``\\boxed{}``-style boxes with balanced braces and phrases such as
"Final answer: X", each with its position, so that :func:`graftbench.verify.answers.extract_answer` can take the last
one.

Imports no torch, no sympy. Never raises on any text: the callers catch nothing from here but treat ``[]`` as
"no marker".
"""

from __future__ import annotations

import math
import re

from .spelling import canonical_spelling

MAX_BOX_SCAN = 1000  # characters: a \boxed{...} whose closing brace is further away is not an answer
MAX_PHRASE_LINE = 300  # characters of the line after "final answer:" that are looked at

TEXT_CMD_RE = re.compile(r"\\(?:text|mbox|textrm|mathrm|textnormal|operatorname)\s*\{([^{}]*)\}")
_UNIT_EXPONENT = r"(?:\s*\^\s*(?:\{[^{}]*\}|[0-9a-zA-Z]))?"
TEXT_CMD_WITH_EXPONENT_RE = re.compile(TEXT_CMD_RE.pattern + _UNIT_EXPONENT)


def strip_text_blocks(s: str, with_exponent: bool = False) -> str:
    """Remove \\text{...}-style unit annotations (with their exponent, ``\\text{ cm}^2``, when ``with_exponent``);
    unwrap them if nothing else would remain."""
    pattern = TEXT_CMD_WITH_EXPONENT_RE if with_exponent else TEXT_CMD_RE
    removed = pattern.sub(" ", s).strip()
    if removed:
        return removed
    return TEXT_CMD_RE.sub(lambda m: m.group(1), s).strip()


_BOX_RE = re.compile(r"\\(?:boxed|fbox|framebox)\s*(?:\[[^\]\n]{0,40}\])?\s*\{")

# Phrase markers. Group "tail" records whether the marker ended with ":" or "is", which
# lets the answer sit on the following line ("The final answer is:\n\n73").
_PHRASE_RE = re.compile(
    r"(?:"
    r"\bfinal\s+answer\b(?:\s+is\b)?"  # Final answer: X / final answer is X
    r"|\banswer\s+is\b"  # The answer is X / our answer is X
    r"|^[ \t>#*_]*answer\b(?=[ \t*_]*[:：])"  # Answer: X / **Answer:** X (line start)
    r")"
    r"(?P<tail>[ \t*_]*[:：]?)",
    re.IGNORECASE | re.MULTILINE,
)
# Version 3: a line "Answer" followed by a math delimiter is a marker without a colon ("Answer $ 9 $").
_PHRASE_V3_RE = re.compile(
    _PHRASE_RE.pattern.replace(r"(?=[ \t*_]*[:：])", r"(?=[ \t*_]*(?:[:：]|\$|\\[(\[]))"),
    re.IGNORECASE | re.MULTILINE,
)
_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_OPENING_RE = re.compile(r"[ \t*_]*(\n\s*)?(\$\$|\$|\\\(|\\\[)")
_LATEX_SPACE_RE = re.compile(r"\\[,;:! ]|\\q?quad(?![a-zA-Z])|~")


def match_brace(text: str, open_idx: int, limit: int = MAX_BOX_SCAN) -> int:
    """Index of the ``}`` closing the ``{`` at ``open_idx``; -1 if unclosed within ``limit``."""
    depth = 0
    end = min(len(text), open_idx + limit)
    i = open_idx
    while i < end:
        c = text[i]
        if c == "\\":  # skip escaped characters such as \{ \}
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


# TeX boxes the next token when no brace follows: one character (\boxed 2, \boxed7). Several characters after it
# (\boxed 42, \boxed 2.5) are ambiguous: TeX boxes only the first, a reader sees them all.
_BRACELESS_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])[ \t]*([0-9a-zA-Z])(?![0-9a-zA-Z{]|[.,]\d)")
_PLACEHOLDER_RE = re.compile(
    r"^(?:\?*|\.{2,}|\u2026|\\[lc]?dots|\\square|\\Box|_*|(?:\\_)+"
    r"|\\text\{(?:your|the)?(?:final)?(?:answer)?\})$",
    re.IGNORECASE,
)


def is_placeholder(content: str) -> bool:
    """True for a box that holds no answer: empty, spaces, ``?``, an ellipsis, ``\\square``, ``\\text{answer}``."""
    squeezed = re.sub(r"\s+|\\[,;:! ]|\\q?quad(?![a-zA-Z])", "", content)
    return bool(_PLACEHOLDER_RE.match(squeezed))


def box_candidates(text: str, version: int = 1) -> list[tuple[int, str | None]]:
    """``(position, content)`` of every closed box; under version 2 also brace-less boxes around one character,
    and no placeholder boxes; under version 5 content ``None`` (no answer) for a box holding a number that is
    followed by another value offered in its place, and for the boxes inside that hedge (``\\boxed{42} or
    \\boxed{43}``, ``\\boxed{42} (or 43)``)."""
    out: list[tuple[int, str | None]] = []
    hedged_until = -1
    for m in _BOX_RE.finditer(text):
        open_idx = m.end() - 1
        close = match_brace(text, open_idx)
        if close < 0:
            continue  # unclosed (e.g. truncated output): not a final answer
        content = text[open_idx + 1 : close]
        if version >= 2 and is_placeholder(content):
            continue
        if version >= 5:
            if m.start() < hedged_until:
                out.append((m.start(), None))
                continue
            reach = _box_hedge_reach(text, content, close + 1)
            if reach:
                hedged_until = reach
                out.append((m.start(), None))
                continue
        out.append((m.start(), content))
    if version >= 2:
        out += [(m.start(), m.group(1)) for m in _BRACELESS_BOX_RE.finditer(text)]
    return out


_SENTENCE_END_RE = re.compile(r"\.(?=\s|$)|;|,\s|\s\(|!\s|\?")
# Version 2: the periods of an ellipsis ("1 + 2 + ... + 10") do not end a sentence.
_SENTENCE_END_V2_RE = re.compile(r"(?<!\.)\.(?!\.)(?=\s|$)|;|,\s|\s\(|!\s|\?")
_QUOTED_RE = re.compile(r"^([\"'`\u201c\u2018])(.{1,80}?)([\"'`\u201d\u2019])")
_CONNECTOR_RE = re.compile(r"\b(?:is|equals)\b", re.IGNORECASE)
_LEADING_NUMBER_RE = re.compile(
    r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w.])"
)
# Version 3: a clock time or ratio (3:45) is taken whole, and an ordinal suffix (5th) belongs to its number.
_LEADING_NUMBER_V3_RE = re.compile(
    r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?::\d+)*(?:\s*/\s*\d+)?(?:st|nd|rd|th)?(?![\w.:])"
)
# Version 5: what follows a leading number that offers another value in its place ("42 or 43", "42, 43", "42; 43",
# "42 (or possibly 43)", "42 to 44"). Group "alt" is a word offering an alternative (or, maybe, ...), which makes any
# other value a hedge; a list joiner (a comma, "and", "to", a dash) does only when the second value ends the clause
# (:data:`_LIST_END_RE`), so "42, 1 more than 41" and "3.14 to 2 decimal places" stay one value.
_HEDGE_RE = re.compile(
    r"\s*(?:(?P<alt>(?:[,;\uff0c\uff1b\u3001]\s*|[\u2014\u2013]\s*)?(?:[(\[]\s*)?"
    r"(?:or|else|maybe|possibly|perhaps|alternatively)\b|\\(?:lor|vee)\b)"
    r"|(?:[,;\uff0c\uff1b\u3001](?:\s*and\b)?|\b(?:and|to)\b|and/or\b|[\u2014\u2013]))"
    r"\s*(?:(?:possibly|maybe|perhaps|else|even|also)\s+)?[$*_(\\ ]*(?=[-+\u2212]?\d)", re.IGNORECASE)
# the second value of a hedge, which may end its sentence ("42 or 43.")
_NUMBER_RE = re.compile(_LEADING_NUMBER_V3_RE.pattern.lstrip("^").replace("[-+]?", "[-+\u2212]?", 1)
                        .replace("(?![\\w.:])", "(?![\\w:]|[.:]\\w)"))
_LIST_END_RE = re.compile(
    r"(?:\$|\\[)\]]|[*_])*\s*(?:$|[.,;:!?)\]\uff0c\uff1b\u3001\u2014\u2013]|\\(?:lor|vee)\b"
    r"|\b(?:or|and|respectively|inclusive)\b)", re.IGNORECASE)
_EMPHASIS_RE = re.compile(r"(?<!\w)[*_]+|[*_]+(?![\w{])")
# after a second value: the first restated as a percentage ("1/4, or 25%") or in another base ("42, or 101010 in base
# 2"); and the closing marks to step over before looking for a third value ("$42$ or $42.0$ or $43$")
_PERCENT_AFTER_RE = re.compile(r"\s*(?:\\?%|percent\b)", re.IGNORECASE)
_OTHER_BASE_AFTER_RE = re.compile(r"_\{?(?P<sub>\d+)|\s*\(?(?:in\s+)?(?:base[\s_{]*(?P<base>\d+)|(?P<word>binary|octal))\b",
                                  re.IGNORECASE)
_CLOSERS_RE = re.compile(r"(?:\$|\\[)\]]|[)\]])*")
_LATEX_CMD_RE = re.compile(r"\\[a-zA-Z]+")
_WORDISH_RE = re.compile(r"[a-zA-Z]{2,}")
_MATH_CHARS_RE = re.compile(r"^[0-9a-zA-Z\s+\-*/^_(){}\[\].,=!|<>:'%\\]+$")


_BOX_OR_TEXT_RE = re.compile(r"\\(?:boxed|fbox|framebox|text|mbox|textrm|mathrm)\s*\{([^{}]*)\}")
_OPENERS_CLOSERS_RE = re.compile(r"\$|\\[()\[\]]|\\q?quad(?![a-zA-Z])|\\[,;:! ]")


def _box_hedge_reach(text: str, content: str, after: int) -> int:
    """Version 5: the end of the rest of the line after a box holding the number ``content`` when that rest
    offers another value in its place (``\\boxed{42} or \\boxed{43}``, ``\\boxed{42} \\quad (\\text{or } 43)``,
    :func:`_offered_elsewhere` on the rest with boxes and text blocks unwrapped); 0 when it does not."""
    number = _LEADING_NUMBER_V3_RE.fullmatch(canonical_spelling(content).strip())
    if not number:
        return 0
    line_end = text.find("\n", after, after + MAX_PHRASE_LINE)
    end = line_end if line_end >= 0 else min(len(text), after + MAX_PHRASE_LINE)
    rest = _BOX_OR_TEXT_RE.sub(lambda m: m.group(1), text[after:end])
    rest = _OPENERS_CLOSERS_RE.sub(" ", canonical_spelling(rest))
    return end if _offered_elsewhere(_EMPHASIS_RE.sub("", rest), number.group(0), 0) else 0


def _delimited(s: str) -> str | None:
    """If ``s`` starts with a math delimiter ($, $$, \\(, \\[), return the enclosed text."""
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(open_):
            end = s.find(close, len(open_))
            return s[len(open_) : end] if end >= 0 else s[len(open_) :]
    return None


def _looks_like_math(s: str, version: int = 1) -> bool:
    """True for short expressions without prose: no two-letter words outside LaTeX commands. Under version 2 an
    equation ``A = B`` qualifies when B does and A is a short name (``xy = 10``: no word of three letters or more)."""
    if version >= 2 and "=" in s:
        left, _, right = s.rpartition("=")
        return _looks_like_name(left) and _looks_like_math(right.strip())
    if not s or not _MATH_CHARS_RE.match(s):
        return False
    stripped = _without_commands(s)
    return not _WORDISH_RE.search(stripped) and bool(re.search(r"[0-9a-zA-Z]", stripped))


def _without_commands(s: str) -> str:
    stripped = re.sub(r"\\(?:text|mbox|mathrm|textrm)\s*\{[^{}]*\}", " ", s)
    return _LATEX_CMD_RE.sub(" ", stripped)


def _looks_like_name(s: str) -> bool:
    return bool(s.strip()) and bool(_MATH_CHARS_RE.match(s)) and not re.search(r"[a-zA-Z]{3,}", _without_commands(s))


def _phrase_tail(text: str, m: re.Match[str]) -> str:
    """What follows a phrase marker on its line; the next non-empty line when the marker ends the line with
    ``:`` or ``is`` ("The final answer is:\n\n73")."""
    start = m.end()
    line_end = text.find("\n", start, start + MAX_PHRASE_LINE)
    rest = text[start : line_end if line_end >= 0 else start + MAX_PHRASE_LINE]
    rest = rest.strip().lstrip("*_ \t,").strip()
    ends_open = bool(m.group("tail").strip(" \t*_")) or m.group(0).lower().rstrip(" \t*_").endswith("is")
    if not rest and ends_open:
        window = text[start : start + 2 * MAX_PHRASE_LINE]
        nxt = re.match(r"[ \t*_]*\n\s*([^\n]+)", window)
        rest = nxt.group(1).strip().lstrip("*_ \t").strip() if nxt else ""
    return rest


def _delimited_block(text: str, start: int, ends_open: bool) -> str | None:
    """Version 3: a math-delimited answer right after a marker, taken to its closing delimiter even on a later
    line (``Answer: \\[`` / ``9`` / ``\\]``); on the next line only after an open marker (``:`` or ``is``)."""
    window = text[start : start + 2 * MAX_PHRASE_LINE]
    opening = _OPENING_RE.match(window)
    if not opening or (opening.group(1) and not ends_open):
        return None
    close = dict(_DELIMITERS)[opening.group(2)]
    end = window.find(close, opening.end())
    return window[opening.start(2) : end + len(close)] if end >= 0 else None


def _math_in_delimiters(rest: str, version: int) -> str | None:
    inner = _delimited(rest)
    if inner is None:
        return None
    if version >= 3:  # LaTeX spacing inside the delimiters is space: $\; 9 \;$
        inner = _LATEX_SPACE_RE.sub(" ", inner)
    inner = inner.strip()
    if not inner or re.search(r"\\(?:boxed|fbox|framebox)", inner):
        return None
    return inner if _looks_like_math(strip_text_blocks(inner), version) else None


def _sentence_value(sentence: str) -> str | None:
    """Version 2: the value after the last "is" / "equals" of a sentence ("The largest $n$ is 34" -> "34")."""
    connectors = list(_CONNECTOR_RE.finditer(sentence))
    if not connectors:
        return None
    value = sentence[connectors[-1].end():].strip()
    if _delimited(value) is not None:
        return _math_in_delimiters(value, 2)
    return value if _looks_like_math(value) else None


def _number_value(s: str) -> tuple[int, int] | None:
    """Version 5: an integer, decimal or ``a/b`` as a reduced ``(numerator, denominator)``; None for anything else
    (a clock time, an ordinal)."""
    m = re.fullmatch(r"([-+\u2212]?)(\d+)(?:\.(\d+))?(?:\s*/\s*(\d+))?", s.replace(",", ""))
    if not m or len(s) > 40:
        return None
    num = int(m.group(2) + (m.group(3) or "")) * (-1 if m.group(1) in ("-", "\u2212") else 1)
    den = 10 ** len(m.group(3) or "") * int(m.group(4) or 1)
    if den == 0:
        return None
    g = math.gcd(num, den)
    return num // g, den // g


def _offered_elsewhere(plain: str, first: str, pos: int) -> bool:
    """Version 5: whether ``plain`` from ``pos`` (just after the first value ``first``) offers another value in its
    place; a second spelling of the same value (``3/4 or 0.75``, ``42 (or 42.0)``) is not another value."""
    while True:
        joiner = _HEDGE_RE.match(plain, pos)
        second = _NUMBER_RE.match(plain, joiner.end()) if joiner else None
        if not second:
            return False
        if not joiner.group("alt") and not _LIST_END_RE.match(plain, second.end()):
            return False  # "42, 1 more than 41": a number in the prose after the answer
        value, first_value = _number_value(second.group(0)), _number_value(first)
        base = _OTHER_BASE_AFTER_RE.match(plain, second.end())
        if base and second.group(0).isdigit() and first_value is not None:
            radix = int(base.group("sub") or base.group("base") or {"binary": 2, "octal": 8}[base.group("word").lower()])
            try:
                value = (int(second.group(0), radix), 1) if 2 <= radix <= 36 else None
            except ValueError:
                value = None  # "42, or 43 in base 2": 43 is no base-2 numeral
        if value is not None and first_value is not None and _PERCENT_AFTER_RE.match(plain, second.end()):
            first_value = _number_value(f"{first_value[0] * 100}/{first_value[1]}")
        if value is None or value != first_value:
            return True
        pos = _CLOSERS_RE.match(plain, second.end()).end()


def _hedged(rest: str) -> bool:
    """Version 5: whether the text after a phrase marker opens with a number (bare, bold, italic or in math
    delimiters) followed by another value offered in its place (:data:`_HEDGE_RE`: ``42 or 43``, ``$42$ or $43$``,
    ``42, 43``, ``42, or maybe 43``)."""
    plain = _EMPHASIS_RE.sub("", rest).strip()
    for open_, close in _DELIMITERS:
        if plain.startswith(open_):
            end = plain.find(close, len(open_))
            inner = plain[len(open_):end].strip() if end >= 0 else ""
            whole = _LEADING_NUMBER_V3_RE.fullmatch(inner) if inner else None
            return bool(whole) and _offered_elsewhere(plain, inner, end + len(close))
    number = _LEADING_NUMBER_V3_RE.match(plain)
    return bool(number) and _offered_elsewhere(plain, number.group(0), number.end())


def _phrase_candidate(text: str, m: re.Match[str], version: int) -> str | None:
    """The answer following a phrase marker, or None if what follows is not an answer."""
    rest = _phrase_tail(text, m)
    if version >= 5 and _hedged(canonical_spelling(rest)):
        return None  # "42 or 43", "$42$ or $43$", "42, 43": a hedge or a list is not one answer
    if version >= 3:
        ends_open = bool(m.group("tail").strip(" \t*_")) or m.group(0).lower().rstrip(" \t*_").endswith("is")
        rest = _delimited_block(text, m.end(), ends_open) or rest
        rest = canonical_spelling(rest).strip()
    if not rest:
        return None
    if "\\boxed" in rest[:20] or "\\fbox" in rest[:20] or "\\framebox" in rest[:20]:
        return None  # the box itself is a (later) marker
    quoted = _QUOTED_RE.match(rest) if version >= 2 else None
    if quoted and _looks_like_math(quoted.group(2).strip()):
        return quoted.group(2).strip()
    if _delimited(rest) is not None:
        return _math_in_delimiters(rest, version)
    cut = (_SENTENCE_END_V2_RE if version >= 2 else _SENTENCE_END_RE).search(rest)
    chunk = rest[: cut.start()] if cut else rest
    chunk = chunk.replace("**", "").replace("__", "").strip().rstrip(".").strip()
    if _looks_like_math(chunk, version):
        return chunk
    num = (_LEADING_NUMBER_V3_RE if version >= 3 else _LEADING_NUMBER_RE).match(rest.replace("**", "").strip())
    if num:
        return num.group(0)
    return _sentence_value(chunk) if version >= 2 else None


def phrase_candidates(text: str, version: int = 1) -> list[tuple[int, str]]:
    """``(position, answer)`` after every phrase marker ("Final answer: X", "the answer is X", a line
    "Answer: X") whose answer looks like mathematics, under the rules of verifier ``version``."""
    out = []
    for m in (_PHRASE_V3_RE if version >= 3 else _PHRASE_RE).finditer(text):
        cand = _phrase_candidate(text, m, version)
        if cand is not None:
            out.append((m.start(), cand))
    return out
