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


def test_deposits_note_on_other_pins_shows_the_index_text_as_written_whatever_its_type(stand_in, tmp_path):
    """A store's index may be written by another tool: a config fingerprint holding markup, escape sequences or a
    BLOB is shown as written in deposit's note (it was drawn as a hyperlink, and a BLOB beside text crashed the sort
    with a traceback after the deposit)."""
    import sqlite3

    from typer.testing import CliRunner

    from graftbench.cli.app import app
    from tests import stand_in_engine

    store = tmp_path / "store"
    args = ["deposit", "--engine", stand_in_engine.NAME, "--model", stand_in_engine.MODEL_PREFIX, "--chunk-size",
            "16", "--limit", "1", "--store", str(store)]
    assert CliRunner().invoke(app, args).exit_code == 0
    with sqlite3.connect(store / "index.sqlite") as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(artifacts)")]
        row = list(db.execute("SELECT * FROM artifacts").fetchone())
        for digit, fingerprint in (("e", "[link=a.b]\x1b[2J"), ("d", b"\x00blob")):
            row[columns.index("id")], row[columns.index("config_fingerprint")] = digit * 64, fingerprint
            db.execute(f"INSERT INTO artifacts VALUES ({','.join('?' * len(row))})", row)
    result = CliRunner().invoke(app, [*args, "--recompute"])
    output = " ".join(result.output.split())
    assert result.exit_code == 0 and result.exception is None, result.output
    assert "another pin, config [link=a.b]\\x1b[ (this one" in output and "config b'\\x00blob' (this" in output
    assert "\x1b" not in result.output
