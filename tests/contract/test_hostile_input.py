"""Hostile input: nothing a manifest, an index or a store's files hold makes a command contact an address, open a
FIFO or a device, follow a symlink out of a store, read without bound, crash on markup or draw it as markup.

A hang is bounded (each command runs in a thread that is given :data:`HANG_BOUND_S`; a FIFO left waiting is
released and the test fails), and a read that could grow without bound runs in a child process whose memory is
capped (:func:`cli_capped`), so that a regression fails instead of hanging or exhausting the machine.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.util.display_text import console_markup, markdown_text, plot_text, visible
from graftbench.results.fingerprint import pin_fingerprint
from graftbench.results.manifest import (compute_totals, load_manifest, run_metrics, seal_sha256, sealed_fields,
                                         verify_manifest, write_manifest)
from graftbench.report.compare import RUN_COLUMNS, build_report, markdown
from graftbench.util.safe_files import UnsafeFileError, read_regular, sha256_regular
from graftbench.store.folder import Store

from tests.conftest import REFERENCE_MANIFESTS
from tests.store.test_folder import artifact

ROOT = Path(__file__).resolve().parents[2]
BASELINE = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-baseline.json"
RECURRING = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-recurring.json"
HANG_BOUND_S = 120  # far above any of these commands' run time: reached only by a command that blocks
SPARSE_BYTES = 8 << 30
MEMORY_CAP_BYTES = 3 << 30  # a child that reads a /dev/zero or an 8 GiB file to the end fails long before


# ------------------------------------------------------------------------------------------------ helpers


def bounded(call, release: list[Path] = ()):
    """``call()`` in a thread given :data:`HANG_BOUND_S`; the test fails (after opening every FIFO of ``release``
    for writing, which lets a reader blocked on it go on) when it has not returned by then."""
    outcome = {}

    def target():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG_BOUND_S)
    if thread.is_alive():
        for fifo in release:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        pytest.fail(f"still blocked after {HANG_BOUND_S} s (a FIFO was opened)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def cli(*args, release: list[Path] = ()):
    """The command line in this process, bounded as :func:`bounded`; returns ``(exit code, output)`` and fails on
    any exception other than the command's own exit."""
    result = bounded(lambda: CliRunner().invoke(app, [str(a) for a in args]), release)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


CAPPED = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (int(sys.argv[1]), int(sys.argv[1])))
from typer.testing import CliRunner
from graftbench.cli.app import app
results = []
for args in json.loads(sys.argv[2]):
    result = CliRunner().invoke(app, args)
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    results.append([result.exit_code, result.output, repr(result.exception) if crashed else None])
print(json.dumps(results))
"""


def cli_capped(*commands: list) -> list[tuple[int, str]]:
    """Each command line of ``commands`` in one child process whose data memory is capped at
    :data:`MEMORY_CAP_BYTES` and whose run is bounded by :data:`HANG_BOUND_S`; ``(exit code, output)`` of each.
    Fails on a crash (a ``MemoryError`` included) in any."""
    args = json.dumps([[str(a) for a in command] for command in commands])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CAPPED, str(MEMORY_CAP_BYTES), args], capture_output=True,
                          text=True, timeout=HANG_BOUND_S, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.splitlines()[-1])
    for (code, output, crash), command in zip(results, commands):
        assert crash is None, f"{command}: {crash}\n{output}"
    return [(code, output) for code, output, _ in results]


def one_line_naming(output: str, name: str) -> str:
    """The one output line that names ``name`` (the test fails unless there is exactly one) and no traceback."""
    assert "Traceback" not in output and "MemoryError" not in output, output
    lines = [line for line in output.splitlines() if name in line]
    assert len(lines) == 1, output
    return lines[0]


def reseal(manifest: dict) -> dict:
    """``manifest`` with its derived values and seal recomputed, as a forger (or an honest tool) would write it."""
    manifest = {k: v for k, v in manifest.items() if k not in ("manifest_sha256", "sealed_fields")}
    manifest["config_fingerprint"] = pin_fingerprint(manifest["config"])
    manifest["totals"] = compute_totals(manifest["samples"])
    manifest["metrics"] = run_metrics(manifest["samples"], manifest["problems"], manifest["settings"])
    manifest["sealed_fields"] = sealed_fields(manifest)
    return {**manifest, "manifest_sha256": seal_sha256(manifest, manifest["schema"])}


def written(manifest: dict, path: Path) -> Path:
    write_manifest(manifest, path)
    return path


@pytest.fixture
def stored(tmp_path):
    """A store holding one indexed artifact: ``(root, id, its file)``."""
    root = tmp_path / "store"
    artifact_id = Store(root).put(artifact("7"))
    return root, artifact_id, root / "artifacts" / f"{artifact_id}.safetensors"


def hostile_payload_store(tmp_path) -> tuple[Path, Path]:
    """A folder store (no index) whose only file carries the name of the committed recurring manifest's first
    artifact: ``(store, that file's path)`` for the caller to make hostile."""
    store = tmp_path / "payloads"
    (store / "artifacts").mkdir(parents=True)
    first = load_manifest(RECURRING)["artifacts"][0]["id"]
    return store, store / "artifacts" / f"{first}.safetensors"


# ---------------------------------------------- verify-manifest contacts and opens only what the user names


class CountingHandler(http.server.BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        CountingHandler.requests.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"\0" * 64)

    do_HEAD = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


def test_verify_manifest_sends_no_request_to_the_url_a_manifest_records_as_its_store(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAFTBENCH_STORE_CACHE", str(tmp_path / "cache"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CountingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    CountingHandler.requests.clear()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/store"
        path = written(reseal({**load_manifest(RECURRING), "store": url}), tmp_path / "m.json")
        code, output = cli("verify-manifest", path)
    finally:
        server.shutdown()
    assert CountingHandler.requests == []
    assert code == 4, output  # verified, but its payloads were not checked
    assert "30 artifact payloads not checked (no store given with --store)" in output
    assert not (tmp_path / "cache").exists()  # no read-through cache or index written for it either


def test_verify_manifest_never_opens_the_folder_a_manifest_records_as_its_store(tmp_path):
    store, payload = hostile_payload_store(tmp_path)
    os.mkfifo(payload)  # opening it would block until a writer came
    path = written(reseal({**load_manifest(RECURRING), "store": str(store)}), tmp_path / "m.json")
    mismatches, notes = bounded(lambda: verify_manifest(path), [payload])
    assert mismatches == []
    assert notes[0].endswith("30 artifact payloads not checked (no store given with --store)")


def test_verify_manifest_checks_payloads_in_the_store_given_with_store(tmp_path):
    store, payload = hostile_payload_store(tmp_path)
    payload.write_bytes(b"other bytes")
    mismatches, notes = verify_manifest(RECURRING, store=store)
    assert mismatches == [f"artifact {payload.name[:16]}: payload SHA-256 differs from the manifest"]
    assert notes[0].endswith(f"1 artifact payloads checked against {store}, 29 not checked (absent from the store)")


# ------------------------------------------------------------- FIFOs, devices, symlinks out, sparse files


def test_a_fifo_as_a_manifest_path_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "manifest.json"
    os.mkfifo(fifo)
    code, output = cli("verify-manifest", fifo, release=[fifo])
    assert code == 2 and "a FIFO (named pipe), not a regular file" in one_line_naming(output, str(fifo))
    code, output = cli("report", fifo, "--out", tmp_path / "r", release=[fifo])
    assert code == 2 and "not a regular file" in one_line_naming(output, str(fifo))


def _make_hostile(path: Path, kind: str, outside: Path) -> str:
    """Replace the file at ``path`` by a hostile one of ``kind``; the words its refusal must hold."""
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
        return "a FIFO (named pipe), not a regular file"
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
        return "resolves to /dev/zero, outside"
    if kind == "outside":
        outside.write_bytes(b"bytes outside the store")
        path.symlink_to(outside)
        return f"resolves to {outside}, outside"
    with open(path, "wb") as handle:  # sparse: no block is written
        handle.truncate(SPARSE_BYTES)
    return f"it is {SPARSE_BYTES:,} bytes, more than the"


HOSTILE_FILES = ["fifo", "dev-zero", "outside", "sparse-8GiB"]
STORE_COMMANDS = ("verify", "ls", "reindex")


@pytest.fixture(scope="module")
def hostile_outcomes(tmp_path_factory) -> dict:
    """For each kind of :data:`HOSTILE_FILES`: a store whose indexed artifact file is replaced by one of that kind,
    and a payload folder holding one under the name of the committed recurring manifest's first artifact; what
    ``store verify``, ``store ls``, ``store reindex`` and ``verify-manifest --store`` say about them, and what
    ``verify-manifest`` and ``report`` say of ``/dev/zero`` as a manifest: all from one memory-capped child
    (:func:`cli_capped`). Keyed by ``(kind, command)``; each value ``(exit code, output, the file, the words its
    refusal holds, the artifact id)``."""
    cases, commands = [], []
    for kind in HOSTILE_FILES:
        base = tmp_path_factory.mktemp(kind)
        root = base / "store"
        artifact_id = Store(root).put(artifact("7"))
        path = root / "artifacts" / f"{artifact_id}.safetensors"
        words = _make_hostile(path, kind, base / "elsewhere")
        for command in STORE_COMMANDS:
            cases.append(((kind, command), path, words, artifact_id))
            commands.append(["store", command, "--store", root])
        payloads, payload = hostile_payload_store(base)
        words = _make_hostile(payload, kind, base / "elsewhere-too")
        cases.append(((kind, "verify-manifest"), payload, words, payload.name[:64]))
        commands.append(["verify-manifest", RECURRING, "--store", payloads])
    for command in (["verify-manifest", "/dev/zero"], ["report", "/dev/zero", "--out", tmp_path_factory.mktemp("r")]):
        cases.append((("dev-zero-manifest", command[0]), Path("/dev/zero"), "not a regular file", None))
        commands.append(command)
    return {key: (*outcome, path, words, artifact_id)
            for (key, path, words, artifact_id), outcome in zip(cases, cli_capped(*commands))}


@pytest.mark.parametrize("command", ["verify-manifest", "report"])
def test_dev_zero_as_a_manifest_path_is_one_line_naming_it(hostile_outcomes, command):
    code, output, path, words, _ = hostile_outcomes[("dev-zero-manifest", command)]
    assert code == 2 and words in one_line_naming(output, str(path))


@pytest.mark.parametrize("kind", HOSTILE_FILES)
def test_a_hostile_artifact_file_is_one_line_naming_it_in_verify_manifest(hostile_outcomes, kind):
    code, output, payload, words, _ = hostile_outcomes[(kind, "verify-manifest")]
    assert code == 1
    line = one_line_naming(output, payload.name)
    assert line.startswith(f"mismatch artifact {payload.name[:16]}: artifact file {payload}") and words in line


@pytest.mark.parametrize("kind", HOSTILE_FILES)
def test_a_hostile_artifact_file_is_refused_naming_it_by_store_verify(hostile_outcomes, kind):
    code, output, path, words, artifact_id = hostile_outcomes[(kind, "verify")]
    line = one_line_naming(output, path.name)
    assert code == 1 and line.startswith(f"refused artifact {artifact_id[:16]}: read check failed: "
                                         f"artifact file {path}") and words in line


@pytest.mark.parametrize("kind", HOSTILE_FILES)
def test_a_hostile_artifact_file_is_skipped_naming_it_by_store_reindex(hostile_outcomes, kind):
    code, output, path, words, _ = hostile_outcomes[(kind, "reindex")]
    assert code == 0 and words in one_line_naming(output, f"skipped {path.name}")
    assert "0 artifact(s) indexed, 1 file(s) skipped" in output


@pytest.mark.parametrize("kind", HOSTILE_FILES)
def test_store_ls_lists_the_index_whatever_the_artifact_file_is(hostile_outcomes, kind):
    code, output, _, _, artifact_id = hostile_outcomes[(kind, "ls")]
    assert code == 0 and artifact_id[:16] in output and "Traceback" not in output


def test_a_fifo_named_like_an_artifact_never_blocks_a_graft_read(stored):
    from graftbench.store.codec import ArtifactError

    root, artifact_id, path = stored
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(ArtifactError, match="a FIFO") as caught:
        bounded(lambda: Store(root, readonly=True).read(artifact_id), [path])
    assert caught.value.check == "read"


def test_a_fifo_as_the_index_is_one_line_naming_it_and_reindex_replaces_it(stored):
    root, artifact_id, _ = stored
    index = root / "index.sqlite"
    index.unlink()
    os.mkfifo(index)
    for command in ("ls", "verify"):
        code, output = cli("store", command, "--store", root, release=[index])
        assert code == 2 and "a FIFO (named pipe), not a regular file" in one_line_naming(output, str(index))
    code, output = cli("store", "reindex", "--store", root, release=[index])
    assert code == 0 and "1 artifact(s) indexed" in output
    assert Store(root, readonly=True).ids() == [artifact_id]


def test_an_index_symlinked_out_of_the_store_is_refused_naming_it(stored, tmp_path):
    root, _, _ = stored
    index = root / "index.sqlite"
    moved = tmp_path / "elsewhere.sqlite"
    index.rename(moved)
    index.symlink_to(moved)
    code, output = cli("store", "ls", "--store", root)
    assert code == 2 and f"resolves to {moved}, outside" in one_line_naming(output, str(index))


def test_bounded_reads_refuse_before_reading_and_stream_what_they_hash(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1000)
    with pytest.raises(UnsafeFileError, match=f"file {big} is refused: it is 1,000 bytes, more than the 999"):
        read_regular(big, max_bytes=999)
    assert read_regular(big, max_bytes=1000) == b"x" * 1000
    assert sha256_regular(big, max_bytes=1000) == hashlib.sha256(b"x" * 1000).hexdigest()
    with pytest.raises(IsADirectoryError):
        read_regular(tmp_path, max_bytes=10)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent", max_bytes=10)


# ------------------------------------------------------------------------------------- store ls and clean


def test_store_ls_shows_wrongly_typed_and_markup_cells_as_written(stored, monkeypatch):
    from graftbench.cli.common import console

    monkeypatch.setattr(console, "width", 400)  # wide enough that no cell is folded over lines
    root, artifact_id, _ = stored
    with sqlite3.connect(root / "index.sqlite") as db:
        db.execute("UPDATE artifacts SET bytes = 'lots', n_tokens = X'00ff', problem_id = 12345, "
                   "answer = '[/x] [green]ok[/green] ' || char(27) || '[2J', source = NULL WHERE id = ?",
                   (artifact_id,))
    code, output = cli("store", "ls", "--store", root)
    assert code == 0, output
    assert "(1 of no recorded size)" in output and "12345" in output and "b'\\x00\\xff'" in output
    assert "[/x] [green]ok[/green] \\x1b[2J" in output and "\x1b" not in output


def test_store_clean_never_follows_a_symlinked_artifacts_folder(stored, tmp_path):
    root, _, _ = stored
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / ".tmp-not-the-stores"
    victim.write_bytes(b"someone else's file")
    (root / "artifacts").rename(tmp_path / "real-artifacts")
    (root / "artifacts").symlink_to(outside)
    code, output = cli("store", "clean", "--store", root)
    assert code == 0 and "0 temporary file(s) removed" in output
    assert victim.read_bytes() == b"someone else's file"


# ----------------------------------------------------------------------------- untrusted text as data


def test_markup_and_escape_sequences_in_a_manifest_are_shown_as_written_by_verify_manifest(tmp_path):
    manifest = load_manifest(BASELINE)
    manifest["samples"][0]["key"] = "[/x] [green]ok[/green] \x1b[2J"  # not re-sealed: a mismatch that quotes it
    code, output = cli("verify-manifest", written(manifest, tmp_path / "m.json"))
    assert code == 1
    assert "[/x] [green]ok[/green] \\x1b[2J" in output and "\x1b" not in output
    assert not any(line.startswith("ok") for line in output.splitlines())


def hostile_run(tmp_path: Path, name: str, run: str, model: str = "smollm2-135m", layout: str | None = None,
                family: str | None = None, energy: str = "estimate") -> Path:
    """The committed baseline re-sealed with hostile text where a report shows it (nothing else changed)."""
    manifest = load_manifest(BASELINE)
    manifest["run"] = run
    manifest["config"] = {**manifest["config"], "model": model}
    manifest["energy"] = {**manifest["energy"], "method": energy}
    if layout is not None:
        manifest["samples"][0]["layout"] = layout
    if family is not None:
        manifest["problems"][0]["family"] = family
    return written(reseal(manifest), tmp_path / name)


@pytest.mark.parametrize("run", ["[/x]", "x$\\frac{$", "$" + "{" * 400 + "}" * 400 + "$", "\x1b[2J\rclear"],
                         ids=["markup", "mathtext", "deep-nesting", "escape-sequence"])
def test_report_draws_and_prints_a_hostile_run_name_as_written(tmp_path, run):
    path = hostile_run(tmp_path, "m.json", run)
    assert verify_manifest(path)[0] == []
    code, output = cli("report", path, "--out", tmp_path / "r", "--resamples", "100")
    assert code == 0, output
    assert visible(run)[:20] in output and "\x1b" not in output
    assert (tmp_path / "r" / "accuracy_vs_tokens.png").is_file() and (tmp_path / "r" / "families.png").is_file()


UNESCAPED_PIPE = r"(?<!\\)(?:\\\\)*\|"  # a pipe after an even number of backslashes: a cell boundary


def test_report_md_cannot_be_broken_by_manifest_text(tmp_path):
    hostile = {"run": "a | b\n## Forged heading\n| 100.0% | forged row |",
               "model": "<script>alert(1)</script>", "layout": "[click](javascript:alert(1))",
               "family": "fam|<b>x</b>", "energy": "![img](javascript:x) *bold* `code`"}
    path = hostile_run(tmp_path, "m.json", **hostile)
    assert verify_manifest(path)[0] == []
    text = markdown(build_report([path], resamples=100))
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("#")] == [
        "# graftbench report", "## Runs", "## Per family", "## Notes"]
    runs_table = lines[lines.index("## Runs") + 2: lines.index("## Per family") - 1]
    assert len(runs_table) == 3  # header, rule, the one run: no forged row
    assert {len(re.findall(UNESCAPED_PIPE, row)) for row in runs_table} == {len(RUN_COLUMNS) + 1}  # no forged column
    assert "<script>" not in text and "<b>" not in text and "`code`" not in text
    assert not re.search(r"(?<!\\)\]\(", text)  # no link or image can close (markdown() here draws no plot)
    assert markdown_text(hostile["model"]) in runs_table[2] and markdown_text(hostile["run"]) in runs_table[2]


def test_display_text_makes_controls_visible_and_escapes_each_medium():
    assert visible("a\x1b[2Jb\nc\u202ed\x85") == "a\\x1b[2Jb\\nc\\u202ed\\x85"
    assert visible("x" * 10, limit=5) == "xxxx…"
    assert console_markup("[/x]") == "\\[/x]"
    assert plot_text("x$\\frac{$") == "x\\$\\frac{\\$"
    assert markdown_text("[a](javascript:x) | <b> *x* \\") == "[a\\](javascript:x) \\| &lt;b&gt; \\*x\\* \\\\"
    assert markdown_text("96.7% [83.3, 99.4] (estimate)") == "96.7% [83.3, 99.4] (estimate)"  # figures unchanged


def test_a_file_read_into_a_kept_buffer_grows_it_once_and_a_file_that_changes_size_is_refused(tmp_path):
    from graftbench.util.safe_files import UnsafeFileError, read_regular_into

    path = tmp_path / "artifact"
    path.write_bytes(b"abcdef")
    buffer = bytearray()
    view = read_regular_into(path, buffer, max_bytes=100)
    assert bytes(view) == b"abcdef" and view.obj is buffer and len(buffer) == 6
    del view
    path.write_bytes(b"xyz")
    view = read_regular_into(path, buffer, max_bytes=100)
    assert bytes(view) == b"xyz" and len(buffer) == 6  # reused, not reallocated
    held = view  # a view still held: a larger file goes into a new buffer, the held bytes untouched
    path.write_bytes(b"0123456789")
    grown = read_regular_into(path, buffer, max_bytes=100)
    assert bytes(grown) == b"0123456789" and bytes(held) == b"xyz"
    with pytest.raises(UnsafeFileError, match="over|refused"):
        read_regular_into(path, bytearray(), max_bytes=4)
    link = tmp_path / "link"
    link.symlink_to("/dev/zero")
    with pytest.raises(UnsafeFileError):
        read_regular_into(link, bytearray(), max_bytes=100)


def test_report_md_notes_of_an_unanchored_run_cannot_be_broken_by_manifest_text(tmp_path):
    """A run accepted with --allow-unanchored gets a note naming it and why: its name and its recorded problem-set
    source are manifest text, escaped there as in the tables."""
    manifest = load_manifest(hostile_run(tmp_path, "h.json", "r\n# Forged heading <img src=x onerror=alert(1)> "
                                         "[click](javascript:alert(1))"))
    manifest["problem_set"] = {**manifest["problem_set"], "source": "a</p><script>alert(2)</script>[x](http://e).jsonl"}
    path = written(reseal(manifest), tmp_path / "m.json")
    text = markdown(build_report([path], resamples=100, allow_unanchored=True))
    assert "verified, except: problem set not anchored" in text
    assert [line for line in text.splitlines() if line.startswith("#")] == [
        "# graftbench report", "## Runs", "## Per family", "## Notes"]
    assert "<script>" not in text and "<img" not in text and not re.search(r"(?<!\\)\]\(", text)


def test_report_lm_eval_folders_stay_under_lm_eval_and_never_overwrite_each_other(tmp_path):
    from graftbench.report.write import lm_eval_folder_names

    assert lm_eval_folder_names(["..", ".", "", "a/b", "a_b", "a b", "ok"]) == \
        ["__", "_", "_-2", "a_b", "a_b-2", "a_b-3", "ok"]
    paths = [hostile_run(tmp_path, f"{i}.json", "..") for i in range(2)]
    code, output = cli("report", *paths, "--out", tmp_path / "r", "--format", "lm-eval", "--resamples", "100")
    assert code == 0, output
    found = sorted(p.relative_to(tmp_path / "r").parts[:2] for p in (tmp_path / "r").rglob("results_*.json"))
    assert found == [("lm-eval", ".._2"), ("lm-eval", "__")]  # the second is labelled ..#2


def test_a_run_folders_manifest_symlinked_out_of_it_is_refused_by_every_reader(tmp_path):
    from graftbench.scale.merge import MergeError, manifest_path as shard_manifest

    outside = written(load_manifest(BASELINE), tmp_path / "elsewhere.json")
    folder = tmp_path / "runs" / "borrowed"
    folder.mkdir(parents=True)
    (folder / "manifest.json").symlink_to(outside)
    for command in (["verify-manifest", folder], ["report", folder, "--out", tmp_path / "r", "--resamples", "100"],
                    ["view", folder, "--out", tmp_path / "v.html"]):
        code, output = cli(*command)
        assert code == 2, (command, output)
        assert "outside" in one_line_naming(output, "never followed out of its folder")
    assert not (tmp_path / "r").exists() and not (tmp_path / "v.html").exists()
    with pytest.raises(MergeError, match="never followed out of its folder"):
        shard_manifest(folder, tmp_path / "runs")
    # named by its own path, the same file is the caller's choice; a link that stays inside the folder is followed
    assert cli("verify-manifest", outside)[0] == 0
    inside = tmp_path / "runs" / "inside"
    inside.mkdir()
    written(load_manifest(BASELINE), inside / "sealed.json")
    (inside / "manifest.json").symlink_to("sealed.json")
    assert cli("verify-manifest", inside)[0] == 0


def test_a_run_name_whose_manifest_is_symlinked_out_is_never_taken_for_a_finished_run(tmp_path, monkeypatch):
    """``solve``/``eval`` recognise a finished run from its folder's manifest before any model loads: a
    ``manifest.json`` symlinked out of the folder is not read (the run is not finished), and resuming it is refused
    in one line naming the run and the file, as a ``samples.jsonl`` linked out is."""
    from graftbench.results import finished
    from graftbench.results.runs import RunDir, RunError
    from graftbench.settings import EvalSettings

    outside = written(load_manifest(BASELINE), tmp_path / "elsewhere.json")
    folder = tmp_path / "runs" / "borrowed"
    folder.mkdir(parents=True)
    (folder / "manifest.json").symlink_to(outside)
    (folder / "run.json").write_text("{}")
    monkeypatch.setattr(finished, "_matches", lambda *args: True)  # whatever the outside manifest records
    monkeypatch.setattr(finished, "_complete", lambda *args: True)
    request = finished.Request("solve", "smollm2-135m", "float32", 256, "native", EvalSettings())
    assert finished.finished_run(tmp_path / "runs", "borrowed", request, []) is None
    with pytest.raises(RunError, match="never followed out of its folder") as refused:
        RunDir(tmp_path / "runs", "borrowed").open({"command": "solve"})
    assert "manifest.json" in str(refused.value) and "outside" in str(refused.value)
    assert outside.read_bytes() == written(load_manifest(BASELINE), tmp_path / "again.json").read_bytes()


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling"])
def test_a_run_folders_manifest_that_is_no_regular_file_is_named_as_such_not_taken_for_an_unsealed_run(tmp_path,
                                                                                                       kind):
    """``view`` showed such a folder's ``samples.jsonl`` as an unsealed run ("no manifest.json") and ``report`` said
    the folder holds none; each reader now names the file and what it is, opening nothing."""
    from graftbench.scale.merge import MergeError, manifest_path as shard_manifest

    folder = tmp_path / "runs" / "odd"
    folder.mkdir(parents=True)
    held = folder / "manifest.json"
    {"fifo": os.mkfifo, "folder": os.mkdir, "dangling": lambda p: p.symlink_to("sealed.json")}[kind](held)
    (folder / "samples.jsonl").write_text(json.dumps({"problem_id": "p"}) + "\n")
    said = {"fifo": "it is a FIFO", "folder": "is a directory", "dangling": "which does not exist"}[kind]
    for command in (["verify-manifest", folder], ["report", folder, "--out", tmp_path / "r", "--resamples", "100"],
                    ["view", folder, "--out", tmp_path / "v.html"]):
        code, output = cli(*command, release=[held] if kind == "fifo" else [])
        assert code == 2, (command, output)
        assert said in one_line_naming(output, "manifest.json"), (command, output)
    assert not (tmp_path / "r").exists() and not (tmp_path / "v.html").exists()
    with pytest.raises(MergeError, match=said):
        shard_manifest("odd", tmp_path / "runs")
