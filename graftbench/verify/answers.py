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

from .extraction import box_candidates, match_brace, phrase_candidates
from .reasoning import split_reasoning
from .spelling import RATIO_RE
from .normalization import INT_RE, MAX_DIGITS, as_plain_fraction, normalize

__all__ = ["VERIFIER_VERSION", "VERIFIER_VERSIONS", "Verdict", "check_version", "extract_answer",
           "answers_equivalent", "verify_answer", "answer_span", "REASONING_VERSION"]

VERIFIER_VERSION = 5  # the rules new runs are scored under (see graftbench.verify.normalization.RULES_ADDED)
VERIFIER_VERSIONS = (1, 2, 3, 4, 5)  # every version whose rules this graftbench still applies
REASONING_VERSION = 4  # from this version on, the answer is read only after the reasoning (verify/reasoning.py)

# Limits that keep every call fast and sympy away from pathological input.
_MAX_SYMPY_LEN = 200  # candidates longer than this never reach sympy
_MAX_EXPONENT = 1000  # |exponent| / factorial argument limit inside sympy expressions
_MAX_SIMPLIFY_OPS = 80  # sympy.simplify is only tried on expressions this small
_MAX_DIGITS = MAX_DIGITS


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one response against an answer key.

    ``extracted`` is the normalized final answer that was found (``None`` when the text has
    no final-answer marker), ``correct`` whether it equals the key exactly.
    """

    extracted: str | None
    correct: bool


_INT_RE = INT_RE
_DEC_RE = re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+)$")


def check_version(version: int) -> int:
    """``version`` itself when this graftbench knows its rules; raises ``ValueError`` naming the known ones."""
    if isinstance(version, bool) or version not in VERIFIER_VERSIONS:
        known = ", ".join(map(str, VERIFIER_VERSIONS))
        raise ValueError(f"verifier version {version!r} is not known to this graftbench (it knows {known})")
    return version


def _as_rational(s: str) -> Fraction | None:
    """Exact value of an integer, decimal or integer fraction string; None otherwise."""
    if len(s) > _MAX_DIGITS:
        return None
    try:
        if _INT_RE.match(s):
            return Fraction(int(s))
        if _DEC_RE.match(s):
            return Fraction(s[:-1] if s.endswith(".") else s)
        frac = as_plain_fraction(s)
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


def _sympy_parse(s: str, version: int):
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
            if version >= 2:
                return None  # an equation left whole by normalization is not a value
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


def extract_answer(text: str, version: int = VERIFIER_VERSION) -> str | None:
    """Return the normalized final answer of ``text`` under the rules of verifier ``version``, or ``None`` if it
    has none.

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
    ``x = 5`` -> ``5``, integer fractions written ``a/b``. Version 2 adds the rules of
    :data:`graftbench.verify.normalization.RULES_ADDED` (placeholder boxes skipped, ``2x + 3 = 7`` gives ``None``).

    Never raises on any text: input that is not a string, or any internal failure, gives ``None``. Raises
    ``ValueError`` only for a ``version`` this graftbench does not know (:func:`check_version`).
    """
    check_version(version)
    try:
        if not isinstance(text, str) or not text:
            return None
        candidates = box_candidates(text, version) + phrase_candidates(text, version)
        if not candidates:
            return None
        _, raw = max(candidates, key=lambda pc: pc[0])
        return normalize(raw, version) if raw is not None else None  # None: a hedged box (version 5)
    except Exception:
        return None


def answers_equivalent(extracted: str, key: str, version: int = VERIFIER_VERSION) -> bool:
    """True iff the two answer strings denote exactly the same mathematical value.

    Both sides are normalized as in :func:`extract_answer` (the key by the same rules as the response). Integers,
    decimals and integer fractions are compared as exact rationals (``\\frac{1}{2}`` == ``0.5``, but
    ``0.25`` != ``25``); identical normalized strings are equal; anything else is parsed
    with latex2sympy2_extended (decimals turned into exact fractions first) and compared
    with sympy (``4\\sqrt{2}`` != ``4``, ``\\sqrt{16}`` == ``4``). Candidates over 200
    characters, or with exponents/factorials over 1000, are not given to sympy.

    Never raises on any text: unparsable or pathological input gives ``False``. Raises ``ValueError`` only for an
    unknown ``version``.
    """
    check_version(version)
    try:
        if not isinstance(extracted, str) or not isinstance(key, str):
            return False
        a, b = normalize(extracted, version), normalize(key, version)
        if not a or not b:
            return False
        ra, rb = _as_rational(a), _as_rational(b)
        if ra is not None and rb is not None:
            return ra == rb
        if a == b:
            return True
        if version >= 3 and (RATIO_RE.match(a) or RATIO_RE.match(b)):
            return False  # a clock time or ratio equals only the same a:b
        ea = _sympy_parse(a, version)
        if ea is None:
            return False
        eb = _sympy_parse(b, version)
        if eb is None:
            return False
        return _sympy_equal(ea, eb)
    except Exception:
        return False


def _answer_text(output: str, cue: str, version: int, reasoning) -> tuple[str, int]:
    """``cue + output`` as the verifier reads it under ``version``, and where ``output`` starts in it: from verifier
    :data:`REASONING_VERSION` on, only the text after the reasoning (:func:`graftbench.verify.reasoning.split_reasoning`
    under the layout's ``reasoning`` delimiters), nothing when the output was cut while reasoning."""
    text = (cue if isinstance(cue, str) else "") + (output if isinstance(output, str) else "")
    start = len(text) - len(output) if isinstance(output, str) else len(text)
    if version < REASONING_VERSION or not reasoning:
        return text, start
    split = split_reasoning(text, reasoning)
    return split.answer_text(text), start - (len(text) if split.cut else split.answer_start)


def verify_answer(output: str, key: str, cue: str = "", version: int = VERIFIER_VERSION,
                  reasoning: tuple[str, str] | None = None) -> Verdict:
    """Verify ``cue + output`` against the answer ``key`` under the rules of verifier ``version``.

    ``cue`` is the answer cue that ended the prompt (e.g. ``"Final answer:"``, possibly
    ``""``); it is prepended so that a bare continuation such as ``" 204\\n"`` after the cue
    ``"Final answer:"`` counts as the final answer. The last final-answer marker in the
    combined text is taken (see :func:`extract_answer`) and compared with
    :func:`answers_equivalent`. A manifest is re-checked under the version it records, so that a later rule
    never turns a recorded verdict into a mismatch.

    ``reasoning`` is the ``(open, close)`` pair of the layout's reasoning delimiters (``None``: the model does not
    think). From verifier 4 (:data:`REASONING_VERSION`) on, only the text after the last closing delimiter is read,
    and an output with an opened block that never closes (cut while reasoning) has no answer; earlier versions read
    the whole text, as they always did.

    Never raises on any text: returns ``Verdict(None, False)`` when no answer is found or on any error. Raises
    ``ValueError`` only for an unknown ``version`` or malformed ``reasoning`` delimiters.
    """
    check_version(version)
    if version >= REASONING_VERSION:
        split_reasoning("", reasoning)  # refuses malformed delimiters before any text is read
    try:
        text, _ = _answer_text(output, cue, version, reasoning)
        extracted = extract_answer(text, version)
        if extracted is None:
            return Verdict(None, False)
        return Verdict(extracted, answers_equivalent(extracted, key, version))
    except Exception:
        return Verdict(None, False)


def answer_span(output: str, cue: str = "", version: int = VERIFIER_VERSION,
                reasoning: tuple[str, str] | None = None) -> tuple[int, int] | None:
    """Where in ``output`` the final answer :func:`verify_answer` takes stands, as ``(start, end)`` character
    indices (``end`` exclusive), for a reader to mark it: the whole box (``\\boxed{...}``) or the marker phrase to the
    end of its line, cut to ``output`` when the marker is in ``cue`` (``Final answer:`` then `` 204``). ``None``
    when there is no answer, or when the part inside ``output`` is empty. Never raises on any text; raises
    ``ValueError`` only as :func:`verify_answer` does."""
    check_version(version)
    try:
        text, offset = _answer_text(output, cue, version, reasoning)
        if not isinstance(output, str) or extract_answer(text, version) is None:
            return None
        candidates = box_candidates(text, version) + phrase_candidates(text, version)
        position = max(candidates, key=lambda pc: pc[0])[0]
        brace = text.find("{", position)
        is_box = text.startswith("\\", position) and 0 <= brace - position <= 60 and match_brace(text, brace) > 0
        line_end = text.find("\n", position)
        end = match_brace(text, brace) + 1 if is_box else (line_end if line_end >= 0 else len(text))
        start, end = max(position - offset, 0), end - offset
        return (start, end) if 0 <= start < end <= len(output) else None
    except Exception:
        return None
