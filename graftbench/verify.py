"""Final-answer extraction and exact equivalence checking for AIME-style math answers.

Three public functions and one result type:

* :func:`extract_answer` -- pull the *last* final answer out of a model response or a
  reference solution and return it normalized (``"\\boxed{033}"`` -> ``"33"``).
* :func:`answers_equivalent` -- exact mathematical equality of two answer strings
  (integers, decimals and fractions compared as exact rationals; anything else via sympy).
* :func:`verify_answer` -- both of the above on ``cue + output``; returns a :class:`Verdict`.

None of them raises, whatever the input: malformed or pathological text yields
``Verdict(None, False)`` / ``None`` / ``False``.

This module deliberately imports neither torch nor transformers, and imports sympy /
latex2sympy2_extended lazily (only when an answer is not a plain number), so that it is
cheap to import and usable on machines without the model stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from .answer_extraction import box_candidates, match_brace, phrase_candidates, strip_text_blocks

__all__ = ["Verdict", "extract_answer", "answers_equivalent", "verify_answer"]

# Limits that keep every call fast and sympy away from pathological input.
_MAX_SYMPY_LEN = 200  # candidates longer than this never reach sympy
_MAX_EXPONENT = 1000  # |exponent| / factorial argument limit inside sympy expressions
_MAX_SIMPLIFY_OPS = 80  # sympy.simplify is only tried on expressions this small
_MAX_DIGITS = 1000  # integer literals longer than this are not parsed as numbers


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one response against an answer key.

    ``extracted`` is the normalized final answer that was found (``None`` when the text has
    no final-answer marker), ``correct`` whether it equals the key exactly.
    """

    extracted: str | None
    correct: bool


# --------------------------------------------------------------------------------------
# Marker detection
# --------------------------------------------------------------------------------------

# \boxed{, \fbox{, \framebox{ (the latter with an optional [width] argument).

_UNWRAP_CMD_RE = re.compile(
    r"\\(?:textbf|mathbf|boldsymbol|bm|textit|mathit|emph|underline"
    r"|mathrm\b(?=\s*\{\s*[-+\d]))"  # \mathrm{12} is a number, \mathrm{cm} a unit
    r"\s*\{([^{}]*)\}"
)
_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_INT_RE = re.compile(r"^[-+]?\d+$")
_DEC_RE = re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+)$")
_SLASH_FRAC_RE = re.compile(r"^([-+]?)(\d+)\s*/\s*(\d+)$")
_LATEX_FRAC_RE = re.compile(
    r"^([-+]?)\\frac\s*(?:\{\s*([-+]?\d+)\s*\}|(\d))\s*(?:\{\s*([-+]?\d+)\s*\}|(\d))$"
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


def _normalize_once(s: str) -> str:
    s = s.strip()
    s = s.replace("\\$", "").replace("$", "")
    if s.startswith("\\(") and s.endswith("\\)") or s.startswith("\\[") and s.endswith("\\]"):
        s = s[2:-2]
    s = s.replace("**", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\(?:left|right|displaystyle|textstyle|bigl?|bigr?|Bigl?|Bigr?)(?![a-zA-Z])", "", s)
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|°", "", s)
    # thousands separators written in LaTeX: 1{,}000, 1\,000, 1\ 000, 1\!000, 1~000
    s = re.sub(
        r"(?<=\d)(?:\{,\}|\\[,;:! ]|~)(?=\d{3}(?!\d))",
        lambda m: "," if m.group(0) == "{,}" else "",
        s,
    )
    s = _UNWRAP_CMD_RE.sub(lambda m: m.group(1), s)
    s = strip_text_blocks(s)
    s = re.sub(r"\\[,;:! ]", " ", s)  # remaining LaTeX spacing
    s = re.sub(r"\s+", " ", s).strip()
    s = s.rstrip(".").strip()
    # "x = 5", "147 \cdot 2 = 294": the value is what follows the last "=".
    parts = re.split(r"(?<![<>!\\:])=(?!=)", s)
    if len(parts) > 1 and parts[-1].strip():
        s = parts[-1].strip()
    s = _unwrap_parens(s)
    if s.startswith("{") and s.endswith("}") and match_brace(s, 0, len(s)) == len(s) - 1:
        s = s[1:-1].strip()
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    if _INT_RE.match(s) and len(s) <= _MAX_DIGITS:
        s = str(int(s))
    return s


def _normalize(s: str) -> str:
    """Canonical string form of an answer (idempotent)."""
    for _ in range(6):
        new = _normalize_once(s)
        if new == s:
            break
        s = new
    frac = _as_plain_fraction(s)
    if frac is not None:
        s = frac
    return s


def _as_plain_fraction(s: str) -> str | None:
    """``\\frac{a}{b}`` / ``a / b`` with integer a, b -> ``"a/b"`` (sign in front)."""
    m = _LATEX_FRAC_RE.match(s)
    if m:
        sign, num, den = m.group(1), m.group(2) or m.group(3), m.group(4) or m.group(5)
    else:
        m = _SLASH_FRAC_RE.match(s)
        if not m:
            return None
        sign, num, den = m.group(1), m.group(2), m.group(3)
    if len(num) + len(den) > _MAX_DIGITS:
        return None
    n, d = int(num), int(den)
    neg = (sign == "-") ^ (n < 0) ^ (d < 0)
    return f"{'-' if neg else ''}{abs(n)}/{abs(d)}"


def _as_rational(s: str) -> Fraction | None:
    """Exact value of an integer, decimal or integer fraction string; None otherwise."""
    if len(s) > _MAX_DIGITS:
        return None
    try:
        if _INT_RE.match(s):
            return Fraction(int(s))
        if _DEC_RE.match(s):
            return Fraction(s[:-1] if s.endswith(".") else s)
        frac = _as_plain_fraction(s)
        if frac is not None:
            num, den = frac.split("/")
            if int(den) == 0:
                return None
            return Fraction(int(num), int(den))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


# --------------------------------------------------------------------------------------
# Sympy comparison (only for answers that are not plain rationals)
# --------------------------------------------------------------------------------------

_DECIMAL_LITERAL_RE = re.compile(r"(?<![\d.])(\d+)\.(\d+)(?![\d.])")


def _decimals_to_fracs(s: str) -> str:
    """Rewrite decimal literals as exact LaTeX fractions so sympy never sees a Float."""

    def repl(m: re.Match[str]) -> str:
        whole, frac = m.group(1), m.group(2)
        if len(whole) + len(frac) > 60:
            return m.group(0)
        return "\\frac{%s}{%s}" % (int(whole + frac), 10 ** len(frac))

    return _DECIMAL_LITERAL_RE.sub(repl, s)


def _sympy_parse(s: str):
    """Parse a normalized answer into a safe sympy expression; None if impossible/unsafe."""
    if not s or len(s) > _MAX_SYMPY_LEN:
        return None
    try:
        from latex2sympy2_extended import latex2sympy
        import sympy
    except Exception:  # pragma: no cover - dependency missing
        return None
    try:
        expr = latex2sympy(_decimals_to_fracs(s))
    except Exception:
        return None
    try:
        if isinstance(expr, sympy.Equality):
            expr = expr.rhs
        if not isinstance(expr, sympy.Expr) or not _is_safe(expr, sympy):
            return None
        return expr
    except Exception:
        return None


def _is_safe(expr, sympy) -> bool:
    """Reject expressions whose evaluation could explode (huge powers, factorials, integrals)."""
    allowed_funcs = (
        sympy.Add, sympy.Mul, sympy.Pow, sympy.Abs,
        sympy.exp, sympy.log, sympy.sin, sympy.cos, sympy.tan, sympy.cot, sympy.sec, sympy.csc,
        sympy.asin, sympy.acos, sympy.atan, sympy.floor, sympy.ceiling,
        sympy.factorial, sympy.binomial,
    )
    count = 0
    for node in sympy.postorder_traversal(expr):
        count += 1
        if count > 500:
            return False
        if node.is_Atom:
            if node.is_Integer and abs(int(node)) > 10 ** _MAX_DIGITS:
                return False
            continue
        if not isinstance(node, allowed_funcs):
            return False
        if isinstance(node, sympy.Pow):
            big = node.exp
        elif isinstance(node, (sympy.factorial, sympy.binomial)):
            big = node.args[0]
        else:
            continue
        if big.free_symbols:
            continue
        val = big.evalf(15)
        if not val.is_number or not val.is_finite:
            return False
        if abs(complex(val)) > _MAX_EXPONENT:
            return False
    return True


def _sympy_equal(a, b) -> bool:
    import sympy

    if a == b:
        return True
    diff = a - b
    if not diff.free_symbols:
        approx = diff.evalf(60)
        if not approx.is_number:
            return False
        scale = max(1.0, abs(complex(a.evalf(30))), abs(complex(b.evalf(30))))
        if abs(complex(approx)) > 1e-40 * scale:
            return False
    if sympy.count_ops(diff) <= _MAX_SIMPLIFY_OPS:
        if sympy.simplify(diff) == 0:
            return True
    if not diff.free_symbols:
        # Could not prove it symbolically: accept only agreement to 100 significant digits.
        approx = diff.evalf(110)
        scale = max(1.0, abs(complex(a.evalf(30))))
        return bool(abs(complex(approx)) < 1e-90 * scale)
    return False


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def extract_answer(text: str) -> str | None:
    """Return the normalized final answer of ``text``, or ``None`` if it has none.

    A final answer is marked by one of

    * ``\\boxed{...}``, ``\\fbox{...}``, ``\\framebox{...}`` with balanced (possibly
      nested) braces; an unclosed box (e.g. a response truncated mid-answer) is ignored;
    * a phrase ``Final answer: X``, ``final answer is X``, ``The answer is X`` or a line
      ``Answer: X`` (case-insensitive; ``**X**``, ``$X$`` and a trailing period allowed).
      ``X`` must look like mathematics (a number, or an expression without prose words);
      otherwise the phrase is not a marker (``the answer is equivalent to ...``).

    When several markers occur, the one that starts last in the text wins. A bare number
    without any marker is not an answer. The result is normalized: units in ``\\text{}``
    dropped, ``\\textbf``/``\\mathbf``/parentheses/``$`` unwrapped, thousands separators
    and leading zeros removed, ``\\dfrac``/``\\tfrac`` -> ``\\frac``, ``^\\circ`` removed,
    ``x = 5`` -> ``5``, integer fractions written ``a/b``.

    Never raises: any input that is not a string, or any internal failure, gives ``None``.
    """
    try:
        if not isinstance(text, str) or not text:
            return None
        candidates = box_candidates(text) + phrase_candidates(text)
        if not candidates:
            return None
        _, raw = max(candidates, key=lambda pc: pc[0])
        return _normalize(raw)
    except Exception:
        return None


def answers_equivalent(extracted: str, key: str) -> bool:
    """True iff the two answer strings denote exactly the same mathematical value.

    Both sides are normalized as in :func:`extract_answer`. Integers, decimals and integer
    fractions are compared as exact rationals (``\\frac{1}{2}`` == ``0.5``, but
    ``0.25`` != ``25``); identical normalized strings are equal; anything else is parsed
    with latex2sympy2_extended (decimals turned into exact fractions first) and compared
    with sympy (``4\\sqrt{2}`` != ``4``, ``\\sqrt{16}`` == ``4``). Candidates over 200
    characters, or with exponents/factorials over 1000, are not given to sympy.

    Never raises: unparsable or pathological input gives ``False``.
    """
    try:
        if not isinstance(extracted, str) or not isinstance(key, str):
            return False
        a, b = _normalize(extracted), _normalize(key)
        if not a or not b:
            return False
        ra, rb = _as_rational(a), _as_rational(b)
        if ra is not None and rb is not None:
            return ra == rb
        if a == b:
            return True
        ea = _sympy_parse(a)
        if ea is None:
            return False
        eb = _sympy_parse(b)
        if eb is None:
            return False
        return _sympy_equal(ea, eb)
    except Exception:
        return False


def verify_answer(output: str, key: str, cue: str = "") -> Verdict:
    """Verify ``cue + output`` against the answer ``key``.

    ``cue`` is the answer cue that ended the prompt (e.g. ``"Final answer:"``, possibly
    ``""``); it is prepended so that a bare continuation such as ``" 204\\n"`` after the cue
    ``"Final answer:"`` counts as the final answer. The last final-answer marker in the
    combined text is taken (see :func:`extract_answer`) and compared with
    :func:`answers_equivalent`.

    Never raises: returns ``Verdict(None, False)`` when no answer is found or on any error.
    """
    try:
        text = (cue if isinstance(cue, str) else "") + (output if isinstance(output, str) else "")
        extracted = extract_answer(text)
        if extracted is None:
            return Verdict(None, False)
        return Verdict(extracted, answers_equivalent(extracted, key))
    except Exception:
        return Verdict(None, False)
