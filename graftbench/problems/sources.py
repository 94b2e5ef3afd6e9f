"""Reading a problem-set source (a local file or a Hugging Face hub id) into raw rows, before any row is validated.

:mod:`graftbench.problems.loading` turns the rows into problems. Errors raise
:class:`~graftbench.problems.types.ProblemSetError` naming the file (or hub id) and, for bytes that cannot be
read, the 1-based line.

How each kind of file is read, and how often:

* JSON and JSON Lines are parsed once, here (the ``json`` module), and the parsed values are the rows; a float
  literal is read as :class:`decimal.Decimal`, its exact value, so that :mod:`graftbench.problems.loading` can
  check it (``9007199254740993.0`` is not read as the float 9007199254740992.0).
  ``datasets`` is no longer used for them: it typed mixed-type columns lossily (``"033"`` next to ``33`` read
  back as ``33``), so every value it read that was not a plain string had to be replaced by our own parse's,
  and its plain strings were our parse's strings.
* CSV is read in two passes with different jobs, and neither overwrites the other. :func:`_scan_csv` checks
  the bytes (UTF-8, a header of distinct names, no row wider than the header, at least one row) so that errors
  name the file and line, and returns the header, which makes every column a string column; the values come only
  from ``datasets``' CSV builder (pandas), whose quoting, blank-line and NA rules (empty, ``NA``, ``null``, ...
  are missing) define what a CSV cell holds. Reading the values in our own ``csv`` pass instead would have to
  re-implement those rules exactly, or loaded values would change.
* Parquet files and hub datasets are read by ``datasets`` only.

This module must stay importable without torch; ``datasets`` is imported lazily, only when it reads something.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from .types import ProblemSetError

__all__ = ["SUPPORTED_SUFFIXES", "RawTable", "is_hub_id", "read_hub", "read_local", "suffix_list"]

SUPPORTED_SUFFIXES: dict[str, str] = {
    ".jsonl": "json",
    ".json": "json",
    ".parquet": "parquet",
    ".csv": "csv",
}
"""Local file suffixes (case-insensitive) and the reader of each: ``"json"`` is this module's own parser,
``"parquet"`` and ``"csv"`` name the ``datasets`` builder."""

_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class RawTable:
    """The rows of one source as read, before validation: ``rows[i]`` maps column names to values (a column a
    row lacks reads as absent, i.e. ``row.get(column)`` is ``None``)."""

    label: str  # how errors name the source: the path as given, or the hub id
    stem: str  # prefix for ids when id_field is None
    columns: list[str]
    rows: list[dict[str, Any]]
    lines: list[int] | None = None  # 1-based line of each row (JSON Lines only)


def suffix_list() -> str:
    """The supported local file suffixes, comma-separated, for error messages."""
    return ", ".join(SUPPORTED_SUFFIXES)


def recorded_source(source: str, cwd: Path | None = None) -> str:
    """The problem-set source as a manifest records it: never an absolute path of the machine that ran.

    A generated set's name, a hub id or a relative path is recorded as given. An absolute local path is recorded
    relative to the working folder ``cwd`` (this process's when ``None``) when the file lies below that folder's
    parent (``/work/shared/data/aime2024.jsonl`` from ``/work/main`` is ``../shared/data/aime2024.jsonl``), else by
    its file name alone. Verifiers find a recorded file by its name and check it by SHA-256
    (:mod:`graftbench.results.anchor`), so nothing about the recording machine's folders is needed."""
    path = Path(source)
    if not path.is_absolute():
        return source
    base = (cwd or Path.cwd()).resolve()
    try:
        path.relative_to(base.parent)
    except ValueError:
        return path.name
    return os.path.relpath(path, base)


SHARED_DATA = Path("..", "shared", "data")  # where the AIME files lie, beside the checkout


class MissingDataFile(ValueError):
    """A problem file under ``../shared/data/`` found neither from the working folder nor beside the checkout; the
    message names both places and the problem sets that need no file."""


def data_file(source: str, cwd: Path | None = None, checkout: Path | None = None) -> str:
    """The path to read for ``source``: ``source`` itself unless it is a relative path under ``../shared/data/``
    that does not exist from ``cwd`` (this process's working folder when ``None``); then the same file beside
    ``checkout`` (the checkout graftbench runs from when ``None``: :data:`graftbench.util.checkout.ROOT`), so a
    default such as ``../shared/data/aime2024.jsonl`` works from any folder. A generated set, a hub id or any other
    path is returned as given. Raises :class:`MissingDataFile` naming both places when the file is in neither."""
    path = Path(source)
    if path.is_absolute() or SHARED_DATA not in (path.parent, *path.parent.parents):
        return source
    if (cwd or Path.cwd()).joinpath(path).exists():
        return source
    if checkout is None:
        from ..util.checkout import ROOT as checkout
    beside = (checkout / path).resolve()
    if beside.exists():
        return str(beside)
    raise MissingDataFile(f"{source}: no such file from this folder ({(cwd or Path.cwd()).resolve()}) nor beside "
                          f"the checkout ({beside}); pass --problems builtin (generated problems with worked "
                          "solutions, no file needed) or the path of a problem file")


def is_hub_id(source: str) -> bool:
    """Whether ``source`` has the form of a hub dataset id, ``owner/name``."""
    return _HUB_ID_RE.match(source) is not None


def read_local(label: str, path: Path) -> RawTable:
    """Read the local problem-set file ``path``; errors name it as ``label`` (the path as given).

    JSON rows are the parsed objects (float literals as ``Decimal``); CSV and parquet rows are read by
    ``datasets``, CSV columns as strings.

    Raises:
        ProblemSetError: the file is missing, a directory, not a regular file or of an unsupported suffix; invalid UTF-8, invalid
            JSON, a non-object JSON row, a JSON Lines row repeating a key, a lone-surrogate ``\\u`` escape, a CSV
            row wider than its header or duplicate CSV column names (each with the 1-based line); no rows;
            ``datasets`` cannot read a parquet or CSV file.
    """
    suffix = path.suffix.lower()
    if not path.exists():
        raise ProblemSetError(f"{label}: file not found")
    if path.is_dir():
        raise ProblemSetError(f"{label}: is a directory; pass a file ({suffix_list()})")
    if not path.is_file():  # a FIFO or device would block the read or never end
        raise ProblemSetError(f"{label}: not a regular file (a FIFO, socket or device); pass a file ({suffix_list()})")
    if suffix not in SUPPORTED_SUFFIXES:
        raise ProblemSetError(
            f"{label}: unsupported file suffix {path.suffix or '(none)'!r}; "
            f"supported: {suffix_list()}"
        )
    builder = SUPPORTED_SUFFIXES[suffix]
    if builder == "json":  # parsed once, here: see the module docstring
        rows, lines = _scan_json(label, path)
        if not rows:
            raise ProblemSetError(f"{label}: no rows (the file holds no JSON objects)")
        columns = list(dict.fromkeys(key for row in rows for key in row))
        return RawTable(label=label, stem=path.stem, columns=columns, rows=rows, lines=lines)
    kwargs: dict[str, Any] = {}
    if builder == "csv":  # checked here, read by datasets: see the module docstring
        header = _scan_csv(label, path)
        import datasets

        kwargs["features"] = datasets.Features({name: datasets.Value("string") for name in header})
    columns, rows = _datasets_load(label, builder, data_files=str(path), split="train", **kwargs)
    if not rows:
        raise ProblemSetError(f"{label}: no rows")
    return RawTable(label=label, stem=path.stem, columns=columns, rows=rows)


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """Silence datasets' progress bars for one load, restoring the caller's setting."""
    import datasets

    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _datasets_load(label: str, builder: str, **kwargs: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """Read a local file with ``datasets.load_dataset(builder, ...)``.

    The Arrow cache goes to a temporary directory that is removed afterwards: local problem
    sets are small, and a per-path cache in ~/.cache would grow with every temporary file
    (and keep a 10 MB copy of every large one). Returns (columns, rows)."""
    import datasets

    with _no_progress_bars(), tempfile.TemporaryDirectory(prefix="graftbench-problems-") as cache:
        try:
            ds = datasets.load_dataset(builder, cache_dir=cache, **kwargs)
            columns = list(ds.column_names)
            rows = [dict(r) for r in ds]
            del ds
        except Exception as e:  # datasets raises many types; name the file in every case
            raise ProblemSetError(
                f"{label}: datasets could not read the file: {type(e).__name__}: {e}"
            ) from e
    return columns, rows


def _scan_json(label: str, path: Path) -> tuple[list[dict[str, Any]], list[int] | None]:
    """Parse a .json/.jsonl file ourselves: a JSON array of objects, or JSON Lines.

    Returns the rows and, for JSON Lines, each row's 1-based line number (blank lines are
    skipped). An object repeating a key keeps the key's last value, except that a JSON Lines
    row repeating a key is refused, after all other checks of the file. Both are what the
    ``datasets`` reader this parse replaced did (pyarrow refuses a line repeating a key; an
    array went through a dict first), kept so that no file changes between loading and not."""
    data = path.read_bytes()
    if path.suffix.lower() == ".json":
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            line = data.count(b"\n", 0, e.start) + 1
            raise ProblemSetError(f"{label}: line {line}: invalid UTF-8 at byte {e.start}") from None
        if text.lstrip().startswith("["):
            try:
                doc = json.loads(text, parse_float=_decimal)
            except json.JSONDecodeError as e:
                raise ProblemSetError(
                    f"{label}: line {e.lineno}: invalid JSON ({e.msg}, column {e.colno})"
                ) from None
            except (ValueError, RecursionError) as e:  # e.g. an integer of over 4300 digits, deep nesting
                raise ProblemSetError(f"{label}: invalid JSON ({e})") from None
            if not isinstance(doc, list):  # pragma: no cover - '[' always parses to a list
                raise ProblemSetError(f"{label}: expected a JSON array of objects")
            for i, item in enumerate(doc, 1):
                if not isinstance(item, dict):
                    raise ProblemSetError(
                        f"{label}: row {i}: expected a JSON object, got {type(item).__name__}"
                    )
                _check_no_surrogates(item, f"{label}: row {i}")
            return doc, None
        # Otherwise a .json file must hold JSON Lines (one object per line); fall through.
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    repeated: tuple[int, str] | None = None  # the first line whose object repeats a key, and the key
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProblemSetError(
                f"{label}: line {lineno}: invalid UTF-8 at byte {e.start} of the line"
            ) from None
        try:
            obj, repeated_key = _loads(text)
        except json.JSONDecodeError as e:
            raise ProblemSetError(
                f"{label}: line {lineno}: invalid JSON ({e.msg}, column {e.colno})"
            ) from None
        except RecursionError:
            raise ProblemSetError(f"{label}: line {lineno}: invalid JSON (nested too deeply)") from None
        except ValueError as e:  # e.g. an integer of over 4300 digits
            raise ProblemSetError(f"{label}: line {lineno}: invalid JSON ({e})") from None
        if not isinstance(obj, dict):
            raise ProblemSetError(
                f"{label}: line {lineno}: expected a JSON object, got {type(obj).__name__}"
            )
        _check_no_surrogates(obj, f"{label}: line {lineno}")
        if repeated_key is not None and repeated is None:
            repeated = (lineno, repeated_key)
        rows.append(obj)
        lines.append(lineno)
    if repeated is not None:
        raise ProblemSetError(f"{label}: line {repeated[0]}: the object repeats the key {repeated[1]!r}")
    return rows, lines


def _loads(text: str) -> tuple[Any, str | None]:
    """``json.loads(text)``, and the first key its top-level object repeats (``None`` if none, or if the
    value is not an object). An object keeps a repeated key's last value, as ``json.loads`` does."""
    repeats: list[tuple[dict[str, Any], str]] = []  # holds the objects, so no identity is reused

    def to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) < len(pairs):
            keys = [key for key, _ in pairs]
            repeats.append((obj, next(key for i, key in enumerate(keys) if key in keys[:i])))
        return obj

    value = json.loads(text, object_pairs_hook=to_dict, parse_float=_decimal)
    return value, next((key for obj, key in repeats if obj is value), None)


def _decimal(literal: str) -> Decimal:
    """A JSON float literal as its exact value; a ``ValueError`` (reported as invalid JSON, with the line) for
    an exponent beyond what ``Decimal`` holds (``1e99999999999999999999``)."""
    try:
        return Decimal(literal)
    except ArithmeticError:  # decimal.InvalidOperation
        raise ValueError(f"the number {literal[:40]} is out of range") from None


def _check_no_surrogates(obj: dict[str, Any], where: str) -> None:
    # A \ud800-style escape parses in Python, but the text then has no UTF-8 encoding: it could not be
    # hashed, tokenized or written to a manifest.
    try:
        json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")  # default: Decimal floats
    except UnicodeEncodeError:
        raise ProblemSetError(f"{where}: invalid JSON string (a \\u escape encodes a lone surrogate)") from None


def _scan_csv(label: str, path: Path) -> list[str]:
    """Check a CSV file is UTF-8 and has a header of distinct names; return the header."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ProblemSetError(f"{label}: line {line}: invalid UTF-8 at byte {e.start}") from None
    reader = csv.reader(io.StringIO(text))
    field_limit = csv.field_size_limit()
    csv.field_size_limit(max(field_limit, len(text)))  # a long cell is checked later, with a clearer message
    try:
        header = next(reader, [])
        if not header or not any(h.strip() for h in header):
            raise ProblemSetError(f"{label}: empty file (no CSV header line)")
        has_row = False
        for row, record in enumerate((r for r in reader if r), 1):
            has_row = has_row or any(cell.strip() for cell in record)
            if len(record) > len(header):
                raise ProblemSetError(
                    f"{label}: line {reader.line_num}: row {row} has {len(record)} fields, "
                    f"the header names {len(header)}"
                )
    except csv.Error as e:
        raise ProblemSetError(f"{label}: line {reader.line_num}: unreadable CSV ({e})") from None
    finally:
        csv.field_size_limit(field_limit)
    if not has_row:
        raise ProblemSetError(f"{label}: no rows (only a header line)")
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise ProblemSetError(f"{label}: line 1: duplicate column names {dupes}")
    return header


def read_hub(source: str, split: str) -> RawTable:
    """Read split ``split`` of the hub dataset ``source`` with ``datasets.load_dataset``.

    Raises:
        ProblemSetError: it cannot be loaded (offline, or no such id or split), is not a single dataset, or has
            no rows.
    """
    import datasets

    from ..util.hub_access import offline_hint, one_line

    with _no_progress_bars():
        try:
            ds = datasets.load_dataset(source, split=split)
        except Exception as e:
            raise ProblemSetError(
                f"{source}: file not found, and as a hub dataset (split {split!r}) it could not be loaded: the "
                f"hub cannot be reached, or the id/split does not exist ({one_line(e)}); "
                f"{offline_hint(f'a local file ({suffix_list()})')}"
            ) from e
    if not isinstance(ds, datasets.Dataset):
        raise ProblemSetError(f"{source}: split {split!r} did not give a single dataset")
    rows = [dict(r) for r in ds]
    if not rows:
        raise ProblemSetError(f"{source}: split {split!r} has no rows")
    return RawTable(label=source, stem=source.rsplit("/", 1)[-1], columns=list(ds.column_names), rows=rows)
