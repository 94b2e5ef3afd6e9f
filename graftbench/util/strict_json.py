"""Strict JSON reading: a document that different JSON parsers could read differently is refused.

``json.loads`` accepts several things that RFC 8259 leaves to the parser, and that other parsers (a browser, ``jq``,
serde, pandas) resolve differently; a committed document (a manifest, an exactness expectation, a replay log) must
read the same everywhere, so :func:`loads_strict` refuses them (the I-JSON profile, RFC 7493):

* an object that repeats a key (``"correct": true, "correct": false``): Python keeps the last value, other parsers
  the first or an error;
* ``NaN``, ``Infinity``, ``-Infinity`` (not JSON at all), and a number too large for a float (``1e400``), which
  Python would read as infinity;
* a ``\\u`` escape of a lone surrogate (``"\\ud800"``): it parses in Python, but the string has no UTF-8 encoding,
  so it cannot be hashed, written back or compared with what another parser makes of it.

Errors are :class:`StrictJSONError` (a ``ValueError``), naming the source, the place in the document (``samples[0]``)
and, for a repeated key, the key. Imports only the standard library.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["StrictJSONError", "load_strict", "loads_strict"]


class StrictJSONError(ValueError):
    """A JSON document refused by :func:`loads_strict`: invalid JSON, or JSON that parsers may read differently.

    ``source`` names the document; ``reason`` says what is wrong and, where known, where
    (``is refused: the object at samples[0] repeats the key 'correct'``, ``is not valid JSON (...)``); the message
    is the two joined by a space."""

    def __init__(self, source: str, reason: str):
        super().__init__(f"{source} {reason}")
        self.source = source
        self.reason = reason


class _Refused(ValueError):
    """Raised inside ``json.loads``'s hooks; becomes a :class:`StrictJSONError` with the source."""


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"is not valid JSON ({name} is not a JSON number)")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _Refused(f"is refused: the number {literal[:40]} is too large for a float (Python reads infinity)")
    return value


def _place(path: tuple) -> str:
    """``("samples", 0, "output")`` → ``samples[0].output``; the empty path is ``the top level``."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return text or "the top level"


def loads_strict(text: str | bytes, *, source: str = "<string>",
                 parse_float: Callable[[str], Any] | None = None) -> Any:
    """Parse ``text`` (``bytes`` are decoded as UTF-8) as JSON, refusing what parsers may read differently.

    ``source`` names the document in errors (a path, or a path and a line). ``parse_float`` is passed to
    ``json.loads`` (e.g. ``decimal.Decimal`` to keep a number's exact literal); by default a float literal
    becomes a ``float`` and one too large for a float is refused.

    Raises:
        StrictJSONError: the bytes are not UTF-8; the text is not JSON (``json.JSONDecodeError``'s line and
            column are named), nests too deeply or holds an integer of over 4,300 digits; an object repeats a key
            (the key and the object's place are named); ``NaN``/``Infinity``; a float literal too large for a
            float; a string or key holding a lone surrogate (its place is named).
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(source, f"is not valid JSON (not UTF-8 at byte {exc.start})") from None
    repeated: list[tuple[dict, str]] = []  # holds the objects, so no id() is reused while parsing

    def to_dict(pairs: list[tuple[str, Any]]) -> dict:
        obj = dict(pairs)
        if len(obj) < len(pairs):
            seen: set[str] = set()
            repeated.append((obj, next(k for k, _ in pairs if k in seen or seen.add(k))))
        return obj

    try:
        value = json.loads(text, object_pairs_hook=to_dict, parse_constant=_refuse_constant,
                           parse_float=parse_float or _finite_float)
    except _Refused as exc:
        raise StrictJSONError(source, str(exc)) from None
    except json.JSONDecodeError as exc:
        raise StrictJSONError(source, f"is not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise StrictJSONError(source, "is not valid JSON (nested too deeply)") from None
    except ArithmeticError:  # decimal.InvalidOperation from parse_float=Decimal: an exponent out of range
        raise StrictJSONError(source, "is not valid JSON (a number whose exponent is out of range)") from None
    except ValueError as exc:  # e.g. an integer of over 4,300 digits
        raise StrictJSONError(source, f"is not valid JSON ({exc})") from None
    problem = _first_problem(value, {id(obj): key for obj, key in repeated})
    if problem is not None:
        raise StrictJSONError(source, f"is refused: {problem}; JSON parsers may read it differently")
    return value


def _first_problem(value: Any, repeats: dict[int, str]) -> str | None:
    """The first repeated key or lone surrogate in document order, described with its place; ``None`` if none.
    Walks with an explicit stack, so depth that ``json.loads`` accepted cannot overflow here."""
    stack: list[tuple[Any, tuple]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if not _encodes(item):
                return f"the string at {_place(path)} holds a lone surrogate ({_surrogate(item)})"
        elif isinstance(item, dict):
            if id(item) in repeats:
                return f"the object at {_place(path)} repeats the key {repeats[id(item)]!r}"
            for key in item:
                if not _encodes(key):
                    return f"a key of the object at {_place(path)} holds a lone surrogate ({_surrogate(key)})"
            stack.extend((v, (*path, k)) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, (*path, i)) for i, v in reversed(list(enumerate(item))))
    return None


def _surrogate(text: str) -> str:
    """The first lone surrogate of ``text`` as its JSON escape, e.g. ``\\ud800``."""
    return next(f"\\u{ord(c):04x}" for c in text if 0xD800 <= ord(c) <= 0xDFFF)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def load_strict(path: str | Path, *, parse_float: Callable[[str], Any] | None = None) -> Any:
    """Read the file at ``path`` (UTF-8) with :func:`loads_strict`; errors name the path. Only a regular file of
    at most :data:`graftbench.util.safe_files.MAX_JSON_BYTES` is read (:func:`graftbench.util.safe_files.read_regular`).

    Raises:
        OSError: the file cannot be read (``FileNotFoundError``, ``IsADirectoryError``, ...), unchanged, or is
            refused (:class:`graftbench.util.safe_files.UnsafeFileError`: a FIFO, a device, over the size cap).
        StrictJSONError: as :func:`loads_strict`.
    """
    from .safe_files import MAX_JSON_BYTES, read_regular

    return loads_strict(read_regular(path, max_bytes=MAX_JSON_BYTES, what="JSON file"), source=str(path),
                        parse_float=parse_float)
