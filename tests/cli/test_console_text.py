"""Untrusted text on the terminal outside the tables: a progress line's last item (a problem id from a problem file,
a pair id from an expectation), the model-loading status and the loaded model's line (a model an expectation
records), and merge's table. Each is shown as written on a real terminal: never markup (a ``[link=...]`` is no
hyperlink), never a raw escape sequence (an OSC 8 hyperlink, a screen clear), never a line break."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console
from rich.progress import Progress

from graftbench.cli import common
from graftbench.engine.models import ModelError
from graftbench.settings import ModelOptions

HOSTILE = "p1[link=http://evil.example/]CLICK[/link]\x1b]8;;http://evil2.example/\x1b\\L\x1b]8;;\x1b\\\x1b[2J|x\ny"


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, color_system="truecolor", width=400, emoji=False), out


def _shown_as_written(text: str) -> None:
    assert "\x1b]8;" not in text and "\x1b[2J" not in text, repr(text)  # no hyperlink, no cleared screen
    assert "[link=http://evil.example/]CLICK[/link]" in text and "\\x1b]8;;http://evil2.example/" in text
    assert "|x\\ny" in text  # the newline shown, not a second line


@pytest.mark.parametrize("item", [HOSTILE, SimpleNamespace(problem=SimpleNamespace(id=HOSTILE))])
def test_a_progress_lines_last_item_is_shown_as_written(item):
    terminal, out = _terminal()
    bar = Progress(*common.progress_columns(), console=terminal, auto_refresh=False)
    task = bar.add_task("solve", total=2, last="")
    bar.update(task, advance=1, last=common.describe(item))
    terminal.print(bar.make_tasks_table(bar.tasks))
    _shown_as_written(out.getvalue())


class _Factory:
    """An engine whose loading text and loaded line name the model, as torch's and llama.cpp's do."""

    name, options, pinned_dtype = "hostile", (), True

    def __init__(self, fails: bool):
        self.fails = fails

    def loading_text(self, options) -> str:
        return f"loading {options.model} on the test engine"

    def open(self, options):
        if self.fails:
            raise ModelError(f"model {options.model!r} is not one")
        return SimpleNamespace(describe=lambda model: f"model {model}: loaded")


@pytest.mark.parametrize("fails", [True, False])
def test_the_loading_status_and_the_loaded_line_show_a_recorded_model_as_written(monkeypatch, fails):
    """A replay opens the model its expectation records (a name: an alias, ``random:``); the status shown while it
    loads and the line after it name that model."""
    terminal, out = _terminal()
    monkeypatch.setattr(common, "console", terminal)
    monkeypatch.setattr(common, "engine_factory", lambda name: _Factory(fails))
    shown = []
    status = terminal.status
    monkeypatch.setattr(terminal, "status", lambda text, **kw: shown.append(text) or status(text, **kw))
    options = ModelOptions(engine="hostile", model=HOSTILE, dtype="float32", chunk_size=16)
    if fails:
        with pytest.raises(common.typer.Exit):
            common.open_model(options, architecture_only=True)
    else:
        common.open_model(options, architecture_only=True)
        _shown_as_written(out.getvalue())
    rendered, text_out = _terminal()
    rendered.print(*shown)
    _shown_as_written(text_out.getvalue())
    assert "\x1b]8;" not in out.getvalue() and "\x1b[2J" not in out.getvalue()
