"""Untrusted text (manifests, index rows, file names, model output) made safe to show: the one place that decides
how such text reaches a terminal, a plot or a markdown file. Imports no torch, and rich only where asked.

Every function takes any value (``str()`` of it is shown) and returns text that shows exactly that value and
cannot act on what displays it:

- :func:`visible`: control characters (C0, DEL, C1: escape sequences, carriage returns, newlines), bidirectional
  overrides, zero-width and other format characters, and line or paragraph separators are written as Python-style
  escapes (``\\x1b``, ``\\n``, ``\\u202e``), so a value cannot clear a screen, move the cursor, break a line or
  reorder what follows it;
- :func:`console_markup`: :func:`visible`, then rich's markup escaped (``[/x]`` cannot raise ``MarkupError`` or
  colour anything), for text placed inside a markup string;
- :func:`console_text`: :func:`visible` as a ``rich.text.Text`` (never parsed as markup), for table cells;
- :func:`plot_text`: :func:`visible` with every ``$`` escaped, so matplotlib never parses mathtext in it;
- :func:`markdown_text`: :func:`visible` for a markdown table cell, list item or paragraph: HTML characters as
  entities, ``|`` and emphasis characters backslash-escaped, and ``]`` escaped where it would close a link, so
  a value cannot add a row or a column, start a heading, embed HTML or form a link (``javascript:`` or any).
"""

from __future__ import annotations

import html
import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}  # controls, format, separators, surrogates, unassigned
_MARKDOWN_SPECIAL = "\\`*_~|"  # backslash first: escapes added after it are not doubled


def _escape_char(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    if unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(value: object, limit: int | None = None) -> str:
    """``str(value)`` with every character that could act on a display written as a visible escape (see the
    module's docstring); with ``limit``, cut to at most ``limit`` characters of the result, ending with ``…`` when
    cut. Never raises for a value whose ``str()`` does not."""
    shown = "".join(_escape_char(c) for c in str(value))
    if limit is not None and len(shown) > limit:
        return shown[: max(0, limit - 1)] + "…"
    return shown


def console_markup(value: object, limit: int | None = None) -> str:
    """:func:`visible` with rich markup escaped: safe to place inside a string that ``console.print`` parses as
    markup (``f"[red]mismatch[/red] {console_markup(line)}"``)."""
    from rich.markup import escape

    return escape(visible(value, limit))


def console_text(value: object, limit: int | None = None):
    """:func:`visible` as a ``rich.text.Text``: a table cell or title that rich shows as it is, never as markup."""
    from rich.text import Text

    return Text(visible(value, limit))


def plot_text(value: object, limit: int | None = None) -> str:
    """:func:`visible` for a matplotlib label, title or annotation: every ``$`` escaped, so no mathtext is parsed
    (``x$\\frac{$`` or deep nesting is drawn as written, never raises)."""
    return visible(value, limit).replace("$", "\\$")


def markdown_text(value: object, limit: int | None = None) -> str:
    """:func:`visible` for markdown (a table cell, a list item, a paragraph; never a code span): ``&``, ``<``
    and ``>`` as HTML entities (no tag, no autolink), the backslash, backtick, ``*``, ``_``, ``~`` and ``|``
    backslash-escaped (no code span, no emphasis, no new column), and ``]`` escaped before ``(`` or ``[`` (no link
    or image can close). :func:`visible` already removed every line break, so no new row, heading or list item can
    start."""
    text = html.escape(visible(value, limit), quote=False)
    for char in _MARKDOWN_SPECIAL:
        text = text.replace(char, "\\" + char)
    return text.replace("](", "\\](").replace("][", "\\][")
