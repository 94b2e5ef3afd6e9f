"""Every graftbench command line shown in the README and docs/ names a real command and real options.

The command lines are read from the pages' shell code blocks (```bash, ```sh, ```shell, a bare ```, and the ``$ ``
lines of ```console) and from inline code that starts with ``graftbench `` or ``python -m graftbench``. Each is
resolved against the CLI tree (``typer.main.get_command(app)``, groups such as ``store`` included) and its tokens
are run through click's own option parser for that command, which knows every option name and how many values
each takes but runs no callback, opens no file and converts no value. Placeholders (``<file>``, ``FILE``, ``...``)
are values like any other. docs/cli.md is generated from the app (tests/contract/test_meta.py keeps it equal), so
it is not read here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.core
import typer.main

from graftbench.cli.app import app

try:  # typer 0.29 and later carry their own copy of click, earlier versions use click itself
    from typer._click import exceptions as click_errors
except ImportError:
    from click import exceptions as click_errors

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *(page for page in sorted((ROOT / "docs").glob("*.md")) if page.name != "cli.md")]
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
# An inline code span: a run of backticks, its content (which may wrap onto the next lines of its paragraph, never
# across a blank line), the same run closing it.
SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", re.S)
# A placeholder for a value: <file>, <the four manifests>; made one token before the line is split.
ANGLED = re.compile(r"<[^<>\n]*>")
PLACEHOLDER = re.compile(r"^(?:VALUE|[A-Z][A-Z0-9_]*|\.\.\.|…)$")
SEPARATORS = {"|", "||", "&", "&&", ";", ";;"}
REDIRECTS = {">", ">>", "<", "<<", ">&", "<&", "&>", "|&"}
# Inline code read as a command line: `graftbench ...`, `python -m graftbench ...`, after `VAR=value` assignments.
INLINE = re.compile(r"^(?:[A-Za-z_]\w*=\S*\s+)*(?:graftbench |python\S* -m graftbench(?: |$))")
PYTHON = re.compile(r"^(?:.*/)?python(?:\d+(?:\.\d+)?)?$")


@dataclass(frozen=True)
class Invocation:
    """One graftbench command line of a page: where it is (1-based line of its start), the text as written and the
    arguments after ``graftbench`` (placeholders kept as values)."""

    page: str
    line: int
    text: str
    args: tuple[str, ...]


def _tokens(text: str) -> list[str]:
    """Shell words and operators of `text`, comments dropped; ValueError on an unclosed quote."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def _segments(text: str) -> list[list[str]]:
    """The simple commands of one shell line (already joined across ``\\`` continuations): split on pipes, ``&&``,
    ``||`` and ``;``, comments and redirections dropped. A line that is not valid shell (an unclosed quote) is read
    with its quotes as spaces, so that it is still checked."""
    text = ANGLED.sub("VALUE", text)
    try:
        tokens = _tokens(text)
    except ValueError:
        tokens = _tokens(text.replace("'", " ").replace('"', " "))
    segments: list[list[str]] = [[]]
    skip_next = False
    for token in tokens:
        if skip_next:
            skip_next = False
        elif token in SEPARATORS:
            segments.append([])
        elif token in REDIRECTS:
            skip_next = True
        else:
            segments[-1].append(token)
    return [segment for segment in segments if segment]


def _graftbench_args(segment: list[str]) -> list[str] | None:
    """The arguments after the command word of a simple command when that command is graftbench (``graftbench``,
    ``venv/bin/graftbench``, ``python -m graftbench``, after ``VAR=value`` assignments), else None."""
    words = list(segment)
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    if not words:
        return None
    if words[0] == "graftbench" or words[0].endswith("/bin/graftbench"):
        return words[1:]
    if PYTHON.match(words[0]) and words[1:3] == ["-m", "graftbench"]:
        return words[3:]
    return None


def _optional_marks_removed(token: str) -> str:
    """``[--store`` and ``S]`` of a usage line such as ``PATH [--store S]`` read as ``--store`` and ``S``."""
    return token.lstrip("[").rstrip("]") if token not in ("[", "]") else ""


def _invocations_of(page: str, line: int, text: str) -> list[Invocation]:
    found = []
    for segment in _segments(text):
        args = _graftbench_args(segment)
        if args is not None:
            args = [a for a in map(_optional_marks_removed, args) if a]
            found.append(Invocation(page, line, " ".join(text.split()), tuple(args)))
    return found


def extract(markdown: str, page: str) -> list[Invocation]:
    """Every graftbench command line in a markdown text: in shell code blocks (continuations joined, ``$ `` lines
    only in ``console`` blocks) and in inline code starting with ``graftbench `` or ``python -m graftbench``.
    `page` is only recorded in each result."""
    found: list[Invocation] = []
    lines = markdown.split("\n")
    prose = list(lines)  # the text outside code blocks, each code block's lines blanked
    fence = kind = None
    pending, pending_start = "", 0
    for number, line in enumerate(lines, 1):
        opening = FENCE.match(line)
        if fence is None:
            if opening:
                fence, kind = opening.group(1), opening.group(2).lower()
                prose[number - 1] = ""
            continue
        prose[number - 1] = ""
        if opening and opening.group(1).startswith(fence) and not opening.group(2):
            fence = kind = None
            pending = ""
            continue
        if kind not in SHELL_FENCES:
            continue
        text = line.strip()
        if kind == "console" and not pending:
            if not text.startswith("$ "):
                continue
            text = text[2:]
        if not pending:
            pending_start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        found += _invocations_of(page, pending_start, pending + text)
        pending = ""
    text = "\n".join(prose)
    for match in SPAN.finditer(text):
        code = " ".join(match.group(2).split())
        if INLINE.match(code):
            found += _invocations_of(page, text.count("\n", 0, match.start()) + 1, code)
    return sorted(found, key=lambda invocation: invocation.line)


def problem(invocation: Invocation) -> str | None:
    """Why `invocation` does not name a real command with real options and arguments (a sentence naming the
    offending text), or None when it does. Each command's own click parser reads the arguments: it knows every
    option name and how many values each takes, but runs no callback, opens no file and converts no value.
    Placeholders stand for any value; an argument missing from a shortened line is not a fault."""
    command = typer.main.get_command(app)
    args = list(invocation.args)
    path = ["graftbench"]
    while True:
        # A bare context (nothing parsed into it, so no callback runs); not resilient, which would make the parser
        # swallow an unknown option.
        ctx = command.context_class(command, info_name=path[-1])
        try:
            _, rest, _ = command.make_parser(ctx).parse_args(list(args))
        except click_errors.NoSuchOption as error:
            return f"{' '.join(path)} has no option {error.option_name}"
        except click_errors.BadOptionUsage as error:
            try:  # an option named at the end of a span without its value ("`graftbench bench --only`")
                _, rest, _ = command.make_parser(ctx).parse_args([*args, "VALUE"])
            except click_errors.UsageError:
                return f"{' '.join(path)}: {error.format_message()}"
        if not isinstance(command, typer.core.TyperGroup):
            extra = [arg for arg in rest if not PLACEHOLDER.match(arg)]
            return f"{' '.join(path)} takes no argument {extra[0]!r}" if extra else None
        if not rest or PLACEHOLDER.match(rest[0]):
            return None  # the group alone, or `graftbench COMMAND --help`
        name = rest[0]
        sub = command.commands.get(name)
        if sub is None:
            return f"{' '.join(path)} has no command {name!r}"
        command, path, args = sub, [*path, name], rest[1:]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))  # README.md and docs/README.md apart


def _read(page: Path) -> list[Invocation]:
    return extract(page.read_text(encoding="utf-8"), _name(page))


FOUND = {_name(page): _read(page) for page in PAGES}


def test_the_command_lines_of_the_pages_are_found():
    total = sum(len(found) for found in FOUND.values())
    assert total > 100, f"only {total} graftbench command lines found in README.md and docs/"
    assert len(FOUND["README.md"]) >= 15 and len(FOUND["docs/getting-started.md"]) >= 15
    assert ("verify-manifest", "runs/aime-graft", "--store", "store") in {i.args for i in FOUND["README.md"]}


# Only pages that show a command line: a page with none would pass with nothing checked
PAGES_WITH_COMMANDS = [page for page in PAGES if FOUND[_name(page)]]


@pytest.mark.parametrize("page", PAGES_WITH_COMMANDS, ids=_name)
def test_every_command_line_names_a_real_command_and_real_options(page):
    faults = [f"{invocation.page}:{invocation.line}: {reason}, in `{invocation.text}`"
              for invocation in FOUND[_name(page)] if (reason := problem(invocation))]
    assert faults == [], "\n".join(faults)


BAD_PAGE = """# A page with wrong command lines

Prose naming `graftbench solve --max-new-tokens 64` and a wrong one, `graftbench solve --max-tokens 64`.

```bash
graftbench deposit --problems <file> \\
    --store store --no-such-flag   # a comment --also-not-checked
OMP_NUM_THREADS=1 graftbench store ls --store s3://b/p | head -3 && graftbench store list
python -m graftbench evaluate --graft
graftbench eval --graft=yes
```

```console
$ graftbench check-exact --expect FILE --pairs 20:
error: not a command line, --whatever
$ graftbench store verify s3://b/p
$ graftbench solve --run "unclosed --bogus
```

```python
subprocess.run("graftbench solve --not-read-in-python", shell=True)
```
"""


def test_a_wrong_command_or_option_is_named_with_its_page_and_line(tmp_path):
    page = tmp_path / "bad.md"
    page.write_text(BAD_PAGE, encoding="utf-8")
    found = extract(page.read_text(encoding="utf-8"), "bad.md")
    assert [(invocation.line, problem(invocation)) for invocation in found] == [
        (3, None),
        (3, "graftbench solve has no option --max-tokens"),
        (6, "graftbench deposit has no option --no-such-flag"),
        (8, None),
        (8, "graftbench store has no command 'list'"),
        (9, "graftbench has no command 'evaluate'"),
        (10, "graftbench eval: Option '--graft' does not take a value."),
        (14, None),
        (16, "graftbench store verify takes no argument 's3://b/p'"),
        (17, "graftbench solve has no option --bogus"),
    ]
    assert found[2].args == ("deposit", "--problems", "VALUE", "--store", "store", "--no-such-flag")
    assert found[2].text.endswith("--no-such-flag # a comment --also-not-checked")


@pytest.mark.parametrize("text", [
    "`graftbench check-exact --expect\nFILE --pairs 20:`",
    "`graftbench verify-manifest PATH [--store S]`",
    "`graftbench report <the four manifests> --families grid-detour,recurrence`",
    "`graftbench COMMAND --help`",
    "`graftbench store ls|verify|reindex|clean`",
    "`graftbench bench --only`",
    "`graftbench solve --shard 0/2 --run base-0 ... ; graftbench merge base-0 base-1 --out base`",
])
def test_placeholders_and_usage_marks_are_values(text):
    found = extract(f"Some prose, then {text} and more prose.\n", "page.md")
    assert found and [problem(invocation) for invocation in found] == [None] * len(found)
