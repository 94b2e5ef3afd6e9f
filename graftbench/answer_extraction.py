"""Finding final-answer markers in a response: ``\\boxed{}``-style boxes with balanced braces and phrases such as
"Final answer: X", each with its position, so that :func:`graftbench.verify.extract_answer` can take the last one.

Imports no torch, no sympy. Never raises on any text: the callers catch nothing from here but treat ``[]`` as
"no marker".
"""

from __future__ import annotations

import re

MAX_BOX_SCAN = 1000  # characters: a \boxed{...} whose closing brace is further away is not an answer
MAX_PHRASE_LINE = 300  # characters of the line after "final answer:" that are looked at

TEXT_CMD_RE = re.compile(r"\\(?:text|mbox|textrm|mathrm|textnormal|operatorname)\s*\{([^{}]*)\}")


def strip_text_blocks(s: str) -> str:
    """Remove \\text{...}-style unit annotations; unwrap them if nothing else would remain."""
    removed = TEXT_CMD_RE.sub(" ", s).strip()
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


def box_candidates(text: str) -> list[tuple[int, str]]:
    out = []
    for m in _BOX_RE.finditer(text):
        open_idx = m.end() - 1
        close = match_brace(text, open_idx)
        if close < 0:
            continue  # unclosed (e.g. truncated output): not a final answer
        out.append((m.start(), text[open_idx + 1 : close]))
    return out


_SENTENCE_END_RE = re.compile(r"\.(?=\s|$)|;|,\s|\s\(|!\s|\?")
_LEADING_NUMBER_RE = re.compile(
    r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w.])"
)
_LATEX_CMD_RE = re.compile(r"\\[a-zA-Z]+")
_WORDISH_RE = re.compile(r"[a-zA-Z]{2,}")
_MATH_CHARS_RE = re.compile(r"^[0-9a-zA-Z\s+\-*/^_(){}\[\].,=!|<>:'%\\]+$")


def _delimited(s: str) -> str | None:
    """If ``s`` starts with a math delimiter ($, $$, \\(, \\[), return the enclosed text."""
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(open_):
            end = s.find(close, len(open_))
            return s[len(open_) : end] if end >= 0 else s[len(open_) :]
    return None


def _looks_like_math(s: str) -> bool:
    """True for short expressions without prose: no two-letter words outside LaTeX commands."""
    if not s or not _MATH_CHARS_RE.match(s):
        return False
    stripped = re.sub(r"\\(?:text|mbox|mathrm|textrm)\s*\{[^{}]*\}", " ", s)
    stripped = _LATEX_CMD_RE.sub(" ", stripped)
    return not _WORDISH_RE.search(stripped) and bool(re.search(r"[0-9a-zA-Z]", stripped))


def _phrase_candidate(text: str, m: re.Match[str]) -> str | None:
    """The answer following a phrase marker, or None if what follows is not an answer."""
    start = m.end()
    line_end = text.find("\n", start, start + MAX_PHRASE_LINE)
    rest = text[start : line_end if line_end >= 0 else start + MAX_PHRASE_LINE]
    rest = rest.strip().lstrip("*_ \t,").strip()
    ends_open = bool(m.group("tail").strip(" \t*_")) or m.group(0).lower().rstrip(" \t*_").endswith("is")
    if not rest and ends_open:
        # "The final answer is:\n\n73": look at the next non-empty line.
        window = text[start : start + 2 * MAX_PHRASE_LINE]
        nxt = re.match(r"[ \t*_]*\n\s*([^\n]+)", window)
        rest = nxt.group(1).strip().lstrip("*_ \t").strip() if nxt else ""
    if not rest:
        return None
    if "\\boxed" in rest[:20] or "\\fbox" in rest[:20] or "\\framebox" in rest[:20]:
        return None  # the box itself is a (later) marker
    inner = _delimited(rest)
    if inner is not None:
        inner = inner.strip()
        if not inner or re.search(r"\\(?:boxed|fbox|framebox)", inner):
            return None
        return inner if _looks_like_math(strip_text_blocks(inner)) else None
    chunk = rest
    cut = _SENTENCE_END_RE.search(chunk)
    if cut:
        chunk = chunk[: cut.start()]
    chunk = chunk.replace("**", "").replace("__", "").strip().rstrip(".").strip()
    if _looks_like_math(chunk):
        return chunk
    num = _LEADING_NUMBER_RE.match(rest.replace("**", "").strip())
    return num.group(0) if num else None


def phrase_candidates(text: str) -> list[tuple[int, str]]:
    out = []
    for m in _PHRASE_RE.finditer(text):
        cand = _phrase_candidate(text, m)
        if cand is not None:
            out.append((m.start(), cand))
    return out


# --------------------------------------------------------------------------------------
# Normalization
# --------------------------------------------------------------------------------------
