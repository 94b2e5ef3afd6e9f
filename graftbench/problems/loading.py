"""Loading a problem set (:func:`load_problems`): choosing the source, and validating every row into a problem.

Sources: ``"builtin"`` (:data:`BUILTIN`, the generated set of :mod:`graftbench.problems.builtin`); a local file
(``.jsonl``, ``.json``, ``.parquet``, ``.csv``) or a Hugging Face hub id ``owner/name``, both read into raw rows by
:mod:`graftbench.problems.sources` (which says how each kind of file is parsed). This module maps the fields and
checks every row: ids, problem texts and answer keys (canonical integers for AIME). Anything wrong with a problem
set raises :class:`~graftbench.problems.types.ProblemSetError`, whose message names the file (or hub id), the
1-based row (or line) and the field.

This module must stay importable without torch.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

from .builtin import MAX_PER_FAMILY, builtin_problems
from .methods import METHODS_MAX_PER_FAMILY, method_problems
from .sources import SUPPORTED_SUFFIXES, RawTable, is_hub_id, read_hub, read_local, suffix_list
from .types import Problem, ProblemSetError

__all__ = ["BUILTIN", "MAX_PROBLEM_CHARS", "load_problems"]

BUILTIN = "builtin"
"""The source name meaning the built-in generated problem set."""

MAX_PROBLEM_CHARS = 1_000_000
"""Cap on the length of one problem statement, in characters.

Real AIME statements are under 2,000 characters; a statement of a million characters is a
broken file (or a wrong ``problem_field``), not a problem, and would only be truncated or
blow up a model's context later. Longer statements are refused with a clear error rather
than silently truncated. Solutions are not capped."""

_INT_RE = re.compile(r"^[+-]?[0-9]+$")
_DECIMAL_RE = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")  # ASCII digits only
_MAX_EXACT_FLOAT = 2**53
"""Every integer of magnitude up to 2**53 is a float (binary64); past it not every one is, so an integral value
written as a float there may be a rounded one (9007199254740993 exported as a float is 9007199254740992.0), and a
float literal there (``9007199254740993.0``) reads as another integer in every reader that parses floats as
binary64 (pandas, JavaScript, Python's own ``json``)."""
_INTEGER_ONLY = "answers must be integers (the command line reads integer keys only; correct the key in the file)"


METHODS = "methods"
"""The method-transfer set (:mod:`graftbench.problems.methods`), sliced as the built-in set is."""

_GENERATED: dict[str, tuple[Callable[[int], list[Problem]], int]] = {
    BUILTIN: (lambda n: builtin_problems(n_per_family=n), MAX_PER_FAMILY),
    METHODS: (lambda n: method_problems(n_per_family=n), METHODS_MAX_PER_FAMILY),
}
_GENERATED_SLICE = re.compile(r"([a-z]+)(?::(?:(\d+)-)?(\d+))?")


def is_generated(source: str) -> bool:
    """Whether ``source`` names a set graftbench generates (``builtin``, ``methods``, with or without a slice)."""
    return source.split(":", 1)[0] in _GENERATED


def generated_slice(source: str) -> list[Problem]:
    """The generated problems named by ``source``: ``NAME`` (the default 2 per family), ``NAME:N`` (the first N of
    every family) or ``NAME:A-B`` (problems A to B - 1 of every family, by their index in the family: the same
    problems whatever B is), where NAME is ``builtin`` or ``methods``. Raises :class:`ProblemSetError` for another
    spelling, an empty range, or more problems per family than the set holds."""
    match = _GENERATED_SLICE.fullmatch(source)
    name = match.group(1) if match else source.split(":", 1)[0]
    if not match or name not in _GENERATED:
        raise ProblemSetError(f"problem set {source!r}: write {name}, {name}:N or {name}:A-B (A < B, "
                              "problems per family)")
    make, most = _GENERATED[name]
    if match.group(3) is None:
        return make(2)
    start, end = int(match.group(2) or 0), int(match.group(3))
    if start >= end:
        raise ProblemSetError(f"problem set {source!r}: the range {start}-{end} holds no problem (A < B)")
    if end > most:
        raise ProblemSetError(f"problem set {source!r}: the {name} families hold {most} distinct "
                              f"problems each, not {end}")
    return [p for p in make(end) if int(p.id.rsplit("-", 1)[1]) >= start]


def generated_by_id(source: str, ids: Iterable[object]) -> dict[str, Problem]:
    """The problems among ``ids`` that the generated set ``source`` names makes, by id: ``builtin`` or
    ``methods`` (a slice such as ``builtin:2-4`` names its whole set). An id ``<family>-<k>`` with ``k`` below the
    set's most per family is made as :func:`generated_slice` makes it (the first k problems of a family are the same
    for any size), so a subset of the set (a flywheel round's) can be checked problem by problem. An id of no other
    form, of no family of the set, or past its most is left out. Raises :class:`ProblemSetError` when ``source``
    names no generated set."""
    name = source.split(":", 1)[0]
    if name not in _GENERATED:
        raise ProblemSetError(f"problem set {source!r} is not a generated set ({', '.join(_GENERATED)})")
    make, most = _GENERATED[name]
    wanted = {i for i in ids if isinstance(i, str)}
    indexes = [int(k) for i in wanted if (k := i.rsplit("-", 1)[-1]).isascii() and k.isdigit()]
    size = max((k + 1 for k in indexes if k < most), default=0)
    return {p.id: p for p in make(size) if p.id in wanted} if size else {}


def _check_hub(source: str) -> None:
    """Before the hub dataset ``source`` is loaded: raise :class:`ProblemSetError` at once (one line) when the hub
    cannot be reached and ``HF_HUB_OFFLINE`` does not ask for the cache (with it, the cache is read)."""
    from ..util.hub_access import hub_unreachable, offline_hint, offline_requested

    why = hub_unreachable()
    if why is not None and not offline_requested():
        raise ProblemSetError(f"{source}: file not found, and as a hub dataset id it cannot be loaded: the hub "
                              f"cannot be used ({why}); {offline_hint(f'a local file ({suffix_list()})')}")


def load_problems(
    source: str,
    *,
    id_field: str | None = "id",
    problem_field: str = "problem",
    answer_field: str = "answer",
    solution_field: str | None = "solution",
    split: str = "train",
    integer_answers: bool = True,
    limit: int | None = None,
) -> list[Problem]:
    """Load a problem set.

    ``source`` (a ``str`` or a path) is one of:

    * ``"builtin"`` → :func:`~graftbench.problems.builtin.builtin_problems` with its defaults
      (2 per family; field arguments ignored); ``"builtin:A-B"`` → problems ``A`` to ``B - 1`` of every family
      (``builtin:2-12``: the ten after the first two of each family, 60 problems), ``"builtin:N"`` → ``builtin:0-N``
      (see :func:`generated_slice`); ``"methods"`` and its slices the same way, from
      :func:`~graftbench.problems.methods.method_problems` (the method-transfer families);
    * a local ``.jsonl`` / ``.json`` file (a JSON array of objects, or JSON Lines: one object
      per line, blank lines skipped), parsed once by :mod:`graftbench.problems.sources`;
    * a local ``.parquet`` / ``.csv`` file, read with
      ``datasets.load_dataset("parquet" | "csv", data_files=path, split="train")`` (a CSV file
      is first checked by a pass of our own, so errors name the file and line);
    * otherwise a hub id ``owner/name`` → ``datasets.load_dataset(source, split=split)``.

    Field mapping: ``id_field``, ``problem_field``, ``answer_field`` name the columns to read
    (``id_field=None`` makes ids ``"<file stem>-<row>"``, rows 1-based);
    ``solution_field`` is optional (column absent, ``None`` or empty → ``solution=None``).

    With ``integer_answers=True`` every key must be an integer, the same in every format: an
    integer (a JSON or parquet integer, or a string of ASCII digits with an optional sign and
    surrounding whitespace, of any size), or a number written with a fraction or an exponent
    whose value is exactly an integer of magnitude at most 2**53 (JSON ``42.0``, a parquet
    float or decimal, CSV or JSON strings ``"42.0"``, ``"4.2e1"``). It is stored canonically
    (``"033"``, ``" 33 "``, ``33``, ``33.0`` and ``"3.3e1"`` all become ``"33"``). Refused:
    ``"abc"``, ``"1_000"``, booleans, a non-integral value (``42.5``, ``"42.5"``), and an
    integral value written as a float beyond 2**53 (``9007199254740993.0``: a float there may
    be a rounded integer, and other readers load it as 9007199254740992). With
    ``integer_answers=False`` string keys are kept exactly as given; a number becomes ``str``
    of its int or float, and a JSON float literal holding more digits than a float
    (``0.10000000000000001``, ``9007199254740993.0``) is refused (quote it as a string).

    JSON values are taken exactly as parsed, float literals as :class:`decimal.Decimal` so that
    the literal itself is checked (``"033"`` next to ``33`` stays ``"033"``, integers of any
    size up to Python's 4,300 digits stay exact); the columns are the keys of
    all rows, in order of first appearance; a key absent from a row reads as ``None``. CSV
    columns are all read as strings (so ids like ``"007"`` survive); cells pandas reads as NA
    (empty, ``NA``, ``null``, ...) count as missing.

    Every row is validated, even past ``limit``; ``limit`` then keeps the first N problems.

    Raises:
        ProblemSetError: file not found or a directory; unsupported suffix (the message lists
            the supported ones); invalid UTF-8, invalid JSON, a JSON Lines row repeating a key or a
            ``\\u`` escape of a lone surrogate (file and 1-based line); no rows; a required
            column missing (the message lists the available fields and names ``--id-field`` /
            ``--problem-field`` / ``--answer-field``); per row (file,
            1-based row, field): null id/problem/answer, empty or whitespace-only problem,
            problem over :data:`MAX_PROBLEM_CHARS`, non-integer key, an integral key written as a
            float beyond 2**53, a JSON float literal a float cannot hold (``integer_answers=False``),
            duplicate id, wrong value type; a hub id that cannot be loaded (e.g. offline); any other failure of
            ``datasets`` to read a parquet or CSV file.
        ValueError: ``limit`` negative or not an int.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    source = os.fspath(source)  # a pathlib.Path is accepted too
    if is_generated(source):
        problems = generated_slice(source)
        return problems if limit is None else problems[:limit]

    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    if suffix in SUPPORTED_SUFFIXES or path.exists() or (is_hub_id(source) and path.parent.is_dir()):
        table = read_local(source, path)  # a path under a folder that exists is a file, never a hub id
    elif is_hub_id(source):
        _check_hub(source)
        table = read_hub(source, split)
    else:
        raise ProblemSetError(
            f"{source}: no such file, and not a hub dataset id of the form owner/name; "
            f"pass {BUILTIN!r}, a hub id or a local file ({suffix_list()})"
        )
    problems = _rows_to_problems(
        table,
        id_field=id_field,
        problem_field=problem_field,
        answer_field=answer_field,
        solution_field=solution_field,
        integer_answers=integer_answers,
    )
    return problems if limit is None else problems[:limit]


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _rows_to_problems(
    table: RawTable,
    *,
    id_field: str | None,
    problem_field: str,
    answer_field: str,
    solution_field: str | None,
    integer_answers: bool,
) -> list[Problem]:
    label = table.label

    def where(i: int, field: str) -> str:
        line = table.lines[i - 1] if table.lines else None
        at = f"row {i}" + (f" (line {line})" if line is not None and line != i else "")
        return f"{label}: {at}, field {field!r}"

    for field, flag in ((id_field, "--id-field"), (problem_field, "--problem-field"), (answer_field, "--answer-field")):
        if field is not None and field not in table.columns:
            raise ProblemSetError(
                f"{where(1, field)}: no such field; available fields: {', '.join(table.columns) or '(none)'}. "
                f"Use {flag} to name the right column "
                "(--id-field/--problem-field/--answer-field map id, problem and answer)."
            )

    problems: list[Problem] = []
    first_row_of_id: dict[str, int] = {}
    for i, row in enumerate(table.rows, 1):
        # id
        if id_field is None:
            pid = f"{table.stem}-{i}"
        else:
            value = row.get(id_field)
            if _is_null(value):
                raise ProblemSetError(f"{where(i, id_field)}: id is missing (null or NaN)")
            if isinstance(value, bool) or not isinstance(value, (str, numbers.Integral)):
                raise ProblemSetError(
                    f"{where(i, id_field)}: id must be a string or an integer, got {_type_name(value)}"
                )
            pid = str(value).strip()
            if not pid:
                raise ProblemSetError(f"{where(i, id_field)}: id is empty")
            if pid in first_row_of_id:
                raise ProblemSetError(
                    f"{where(i, id_field)}: duplicate id {pid!r} (first used at row {first_row_of_id[pid]})"
                )
            first_row_of_id[pid] = i
        # problem
        text = row.get(problem_field)
        if _is_null(text):
            raise ProblemSetError(f"{where(i, problem_field)}: problem text is missing (null or NaN)")
        if not isinstance(text, str):
            raise ProblemSetError(
                f"{where(i, problem_field)}: problem text must be a string, got {_type_name(text)}"
            )
        if not text.strip():
            raise ProblemSetError(f"{where(i, problem_field)}: problem text is empty or whitespace")
        if len(text) > MAX_PROBLEM_CHARS:
            raise ProblemSetError(
                f"{where(i, problem_field)}: problem text has {len(text):,} characters, over the "
                f"cap of {MAX_PROBLEM_CHARS:,} (MAX_PROBLEM_CHARS); is --problem-field right?"
            )
        _check_encodable(text, where(i, problem_field))
        # answer
        answer = _answer_key(row.get(answer_field), integer_answers, lambda: where(i, answer_field))
        # solution
        solution: str | None = None
        if solution_field is not None and solution_field in table.columns:
            sol = row.get(solution_field)
            if not _is_null(sol):
                if not isinstance(sol, str):
                    raise ProblemSetError(
                        f"{where(i, solution_field)}: solution must be a string, got {_type_name(sol)}"
                    )
                if sol.strip():
                    _check_encodable(sol, where(i, solution_field))
                    solution = sol
        problems.append(Problem(id=pid, problem=text, answer=answer, solution=solution))
    return problems


def _check_encodable(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ProblemSetError(f"{where}: not valid Unicode (lone surrogate at character {e.start})") from None


def _type_name(value: Any) -> str:
    """The JSON-ish type name of ``value`` for errors: a JSON float literal (a ``Decimal`` here) is a float."""
    return "float" if isinstance(value, Decimal) else type(value).__name__


def _answer_key(value: Any, integer_answers: bool, where: Callable[[], str]) -> str:
    if _is_null(value):
        raise ProblemSetError(f"{where()}: answer is missing (null or NaN)")
    if isinstance(value, bool):
        raise ProblemSetError(f"{where()}: answer must be an integer, got a boolean {value!r}")
    if integer_answers:
        return _integer_key(value, where)
    if isinstance(value, str):
        if not value.strip():
            raise ProblemSetError(f"{where()}: answer is empty")
        return value
    if isinstance(value, Decimal):  # a JSON float literal: kept as before (str of its float) if a float holds it
        as_float = float(value)
        if not math.isfinite(as_float) or Decimal(repr(as_float)) != value:
            raise ProblemSetError(
                f"{where()}: answer {value} has more digits than a float holds (readers would load "
                f"{as_float!r}); write it as a string"
            )
        return str(as_float)
    if isinstance(value, float) and not math.isfinite(value):
        raise ProblemSetError(f"{where()}: answer {value!r} is not a number")
    if isinstance(value, (numbers.Integral, float)):
        return str(value)
    raise ProblemSetError(f"{where()}: answer must be a string or a number, got {type(value).__name__}")


def _integer_key(value: Any, where: Callable[[], str]) -> str:
    """The canonical integer string of an integer answer, whatever the format wrote it as (see
    :func:`load_problems`)."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ProblemSetError(f"{where()}: answer {value!r} is not an integer; {_INTEGER_ONLY}")
        return _integral(Decimal(value), repr(value), where)  # Decimal(float) is the float's exact value
    if isinstance(value, Decimal):  # a JSON float literal, or a parquet decimal
        return _integral(value, str(value), where)
    if isinstance(value, str):
        s = value.strip()
        if _INT_RE.fullmatch(s):
            return str(int(s))
        if _DECIMAL_RE.fullmatch(s):  # a CSV cell is always a string: "42.0" is a float export
            try:
                number = Decimal(s)
            except ArithmeticError:  # decimal.InvalidOperation: an exponent beyond what Decimal holds
                raise ProblemSetError(f"{where()}: answer {value!r} is out of range; {_INTEGER_ONLY}") from None
            return _integral(number, repr(value), where)
        raise ProblemSetError(f"{where()}: answer {value!r} is not an integer; {_INTEGER_ONLY}")
    raise ProblemSetError(f"{where()}: answer must be an integer, got {type(value).__name__}")


def _integral(number: Decimal, shown: str, where: Callable[[], str]) -> str:
    """``number`` (written with a fraction or an exponent) as a canonical integer string, if it is exactly an
    integer of magnitude at most :data:`_MAX_EXACT_FLOAT`; ``shown`` is how errors quote it."""
    not_integer = ProblemSetError(f"{where()}: answer {shown} is not an integer; {_INTEGER_ONLY}")
    if not number.is_finite() or (not number.is_zero() and number.adjusted() < 0):  # 0 < |number| < 1
        raise not_integer
    # adjusted() (the exponent of the leading digit) bounds the number without arithmetic on it, so a literal
    # like 1e999999999 costs nothing; 2**53 has 16 digits.
    if number.adjusted() >= 16 or number.copy_abs() > _MAX_EXACT_FLOAT:
        if number.as_tuple().exponent < 0 and number != number.to_integral_value():
            raise not_integer
        as_float = float(number)
        rounded = math.isfinite(as_float) and as_float != number
        loaded = f" (readers that parse floats load {as_float:.0f})" if rounded else ""
        raise ProblemSetError(
            f"{where()}: answer {shown} is written as a float beyond 2**53 = {_MAX_EXACT_FLOAT}, where a float does "
            f"not hold every integer{loaded}; write it as an integer, without a fraction or an exponent"
        )
    if number != number.to_integral_value():
        raise not_integer
    return str(int(number))
