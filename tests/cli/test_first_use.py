"""What a new user meets first: --version, tables that fit 80 columns, a store of another pin named before a graft
run, a finished run left as it is, fast offline errors, messages that say what was kept, and the commands that
need no model importing no torch."""

from __future__ import annotations

import errno
import inspect
import os
import socket
import subprocess
import sys
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import typer
from rich.console import Console
from typer.testing import CliRunner

from graftbench.util import hub_access
from graftbench.store.codec import ArtifactError, audit_artifact, decode_artifact, encode_artifact
from graftbench.store.ids import artifact_id_of
from graftbench.cli.app import app
from graftbench.cli.common import os_error_text
from graftbench.util.durable import StorageError, storage_error
from graftbench.problems.loading import load_problems
from graftbench.problems.types import ProblemSetError
from graftbench.report.compare import build_report
from graftbench.results.samples import Sample
from graftbench.store.folder import Store
from graftbench.eval.preflight import store_notes
from graftbench.settings import EvalSettings
from graftbench.store.coverage import pins_held
from graftbench.cli.tables import SUMMARY_COLUMNS, report_tables, rounds_tables, samples_table, summary_table
from graftbench.eval.eval_run import open_graft_store
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = REFERENCE_MANIFESTS
GRAFTED = MANIFESTS / "aime2024-smollm2-135m-recurring.json"
PROGRAM = MANIFESTS / "aime2025-qwen2.5-coder-0.5b-program-graft-gated.json"
BASELINE = MANIFESTS / "aime2024-smollm2-135m-baseline.json"
runner = CliRunner()

# Put first on PYTHONPATH, this makes any import of torch or transformers raise in the process started.
NO_TORCH = '''
import sys

class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError(name + " may not be imported here")
        return None

sys.meta_path.insert(0, _NoTorch())
'''


def kv_artifact(problem_id: str, fingerprint: str, dtype: torch.dtype = torch.float32, tokens: int = 4) -> bytes:
    """A small valid artifact of ``problem_id`` under the pin ``fingerprint`` (no model)."""
    generator = torch.Generator().manual_seed(tokens)
    layers = [(torch.randn(1, 2, tokens, 4, generator=generator).to(dtype),
               torch.randn(1, 2, tokens, 4, generator=generator).to(dtype)) for _ in range(2)]
    header = {"config_fingerprint": fingerprint, "positions": [0, tokens], "dtype": str(dtype).removeprefix("torch."),
              "kv_heads": 2, "head_dim": 4, "layers": [{"kind": "full", "seen": tokens, "kept": tokens}] * 2,
              "parent": None, "problem_key": f"key-{problem_id}", "problem_text": f"problem {problem_id} text",
              "problem_id": problem_id, "answer": "7", "source": "reference", "model": "gemma3-270m"}
    return encode_artifact(header, torch.arange(tokens), layers)


def run_without_torch(tmp_path: Path, *args: str, **env_vars: str) -> subprocess.CompletedProcess:
    """``graftbench ARGS`` in a process where importing torch or transformers raises (with ``env_vars`` set)."""
    blocker = tmp_path / "no_torch"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(NO_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT)]), "COLUMNS": "80", **env_vars}
    code = "import sys; from graftbench.cli.app import app; app(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


def rendered(*tables, width: int = 80) -> list[str]:
    out = Console(width=width, record=True, file=open(os.devnull, "w"))
    for table in tables:
        out.print(table)
    return out.export_text().splitlines()


# ---- --version, console width, tables ----


def test_version_option_prints_the_installed_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"graftbench {version('graftbench')}"


@pytest.mark.parametrize("columns", ["55", "123"])
def test_the_console_follows_columns_when_output_is_not_a_terminal(columns):
    code = "from graftbench.cli.common import console; print(console.width)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": columns}, stdin=subprocess.DEVNULL)
    assert done.stdout.strip() == columns, done.stderr


def _sample(**fields) -> Sample:
    base = dict(problem_id="aime2025-II-15", problem_sha256="0" * 64, key="601", mode="graft", route="similar",
                similarity=0.7, fallback="refused: config", cue="", prefill_tokens=10, prefill_tokens_saved=0,
                artifact_id=None, artifact_tokens=0, logits_sha256="0" * 64, output="x", output_sha256="0" * 64,
                extracted="123456789", correct=False, finish_reason="budget", decode_tokens=1234, ttft_s=0.1,
                wall_s=0.5, energy_j=1.0, certificate_sha256=None, certify_s=None, certified=None)
    return Sample(**{**base, **fields})


def test_run_tables_fit_80_columns_with_whole_cells_and_the_wide_summary_keeps_every_figure():
    totals = {"correct": 29, "samples": 30, "accuracy": 29 / 30, "decode_tokens": 123456, "prefill_tokens_saved": 98765,
              "grafts": 30, "fallbacks": 0, "wall_s": 1234.5, "decode_tokens_per_correct": 4.9, "prefill_tokens": 55,
              "mean_ttft_s": 0.954, "energy_j": 299.0}
    lines = rendered(samples_table([_sample(), _sample(problem_id="mod-0", route=None, fallback=None)]),
                     summary_table([("eval-smollm2-135m-aime2025-graft", totals)], "estimate"))
    assert max(map(len, lines)) <= 80 and not any("…" in line for line in lines)
    text = "\n".join(lines)
    for cell in ("aime2025-II-", "similar", "(fallback)", "123456789", "1234", "29/30 (97%)", "123456", "98765"):
        assert cell in text
    wide = "\n".join(rendered(summary_table([("r", totals)], "estimate", wide=True), width=250))
    assert all(header in wide for header, _, _ in SUMMARY_COLUMNS if header != "energy J")
    assert "energy J (estimate)" in wide and "0.954" in wide and "299.0" in wide


def test_report_tables_fit_80_columns_and_say_a_gain_came_from_exact_routes():
    lines = rendered(*report_tables(build_report([BASELINE, GRAFTED])))
    text = "\n".join(lines)
    assert max(map(len, lines)) <= 80 and "…" not in text
    assert "96.7% [83.3, 99.4]" in text and "+96.7 pp [+79.2, +99.4]" in text  # Newcombe's paired interval
    assert "exact 30 (own answer in context)" in text
    assert "— (exact routes only)" in text and "— (no grafts)" in text


def test_flywheel_round_tables_fit_80_columns():
    block = {"avg_at_n": 0.125, "ci95": [0.045, 0.201], "decode_tokens_per_correct": 512.25}
    rows = [{"round": r, "library_size": 10 * r, "held_out_baseline": block, "held_out_graft": block,
             "recurring": block, "deposited": r, "difference": {"mean_difference": 0.0625, "ci95": [-0.125, 0.25]}}
            for r in range(3)]
    lines = rendered(*rounds_tables({"rounds": rows}, "flywheel over 3 rounds (smollm2-135m)"))
    text = "\n".join(lines)
    assert max(map(len, lines)) <= 80 and "…" not in text
    assert text.count("12.5% [4.5, 20.1]") == 9 and text.count("+6.2 pts [-12.5, +25.0]") == 3
    assert "round 2" in text and "512.2" in text


def test_route_quality_tables_fit_80_columns_one_ranker_each():
    from graftbench.cli.route import _ranker_tables
    from graftbench.bench.route_quality import measure_route_quality, table_header, table_rows

    result = measure_route_quality(1, 2, 0.6, 0)
    tables = _ranker_tables(table_header(result), table_rows(result), result["rankers"])
    lines = rendered(*tables)
    assert [t.title for t in tables] == result["rankers"] and max(map(len, lines)) <= 80
    assert "…" not in "\n".join(lines) and sum(line.split()[:1] == ["overall"] for line in lines) == len(tables)


# ---- the store's pins ----


@pytest.fixture
def other_pin_store(tmp_path) -> Store:
    store = Store(tmp_path / "gs")
    for pid in ("mod-0", "mod-1"):
        store.put(kv_artifact(pid, "b" * 64, torch.bfloat16))
    return store


def test_store_ls_names_problem_model_and_pin_within_80_columns(other_pin_store):
    result = run_without_torch(other_pin_store.root.parent, "store", "ls", "--store", str(other_pin_store.root))
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines[0].startswith(f"artifacts in {other_pin_store.root}: 2, ")  # the title holds the path as given
    assert max(map(len, lines[1:])) <= 80
    ids = {i[:16] for i in other_pin_store.ids()}
    at = [n for n, line in enumerate(lines) if line.split()[:1] and line.split()[0] in ids]
    rows = [lines[n].split() + lines[n + 1].split() for n in at]  # the pin's dtype and fingerprint take two lines
    assert sorted(row[1] for row in rows) == ["mod-0", "mod-1"]
    assert all(row[2:4] == ["gemma3-270m", "bfloat16"] and row[-1] == "bbbbbbbb" for row in rows)


def test_a_store_without_this_pin_is_named_before_the_run_and_refused_under_strict(other_pin_store, capsys):
    holdings = pins_held(other_pin_store)
    assert [(h.artifacts, h.model, h.dtype) for h in holdings] == [(2, "gemma3-270m", "bfloat16")]
    pin = {"model": "smollm2-135m", "dtype": "float32"}
    config = SimpleNamespace(model="smollm2-135m", dtype="float32", fingerprint="a" * 64, to_dict=lambda: pin)
    message, = store_notes(other_pin_store, "gs", pin, config.fingerprint, None)
    assert "holds 2 artifact(s), none under this run's torch smollm2-135m float32 (pin aaaaaaaaaaaa)" in message
    assert ("2 under torch gemma3-270m bfloat16 (pin bbbbbbbbbbbb), which differs in: dtype bfloat16 (this run "
            "float32: pass --dtype bfloat16)") in message
    assert store_notes(other_pin_store, "gs", {"model": "gemma3-270m", "dtype": "bfloat16"}, "b" * 64, None) == []
    from graftbench.cli.errors import mapped_errors
    from graftbench.eval.preflight import PreflightError
    from graftbench.scale.eval_job import store_pin_notes

    notes = store_pin_notes(str(other_pin_store.root), config, EvalSettings(graft=True))  # a note; the run goes on
    assert len(notes) == 1 and "pin bbbbbbbbbbbb" in notes[0]
    with pytest.raises(PreflightError) as refused:
        store_pin_notes(str(other_pin_store.root), config, EvalSettings(graft=True, strict=True))
    assert refused.value.kind == "refused"
    with pytest.raises(typer.Exit) as stopped, mapped_errors():  # the command line's one mapping: exit 2
        raise refused.value
    assert stopped.value.exit_code == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "--strict:" in out and "pin bbbbbbbbbbbb" in out and "nothing was run" in out


# ---- no torch where no model is needed ----


def test_the_torch_free_audit_makes_the_checks_of_decode_artifact():
    data = kv_artifact("mod-0", "c" * 64, torch.bfloat16)
    assert audit_artifact(artifact_id_of(data), data) == decode_artifact(artifact_id_of(data), data).header
    edited = bytearray(data)
    edited[-1] ^= 1  # a payload byte: the file hash changes, and under its new id the payload hash catches it
    for check in (lambda d: audit_artifact(artifact_id_of(data), d), lambda d: audit_artifact(artifact_id_of(d), d)):
        with pytest.raises(ArtifactError) as caught:
            check(bytes(edited))
        with pytest.raises(ArtifactError) as expected:
            decode_artifact(caught.value.artifact_id, bytes(edited))
        assert caught.value.check == expected.value.check and caught.value.check in ("hash", "payload")


def test_verify_manifest_and_store_commands_import_no_torch_for_grafted_and_program_manifests(other_pin_store, tmp_path):
    for manifest, last in ((GRAFTED, f"verified, except {GRAFTED}: 30 artifact payloads: 30 not checked"),
                           (PROGRAM, f"ok {PROGRAM}")):  # that store holds none of the recurring run's artifacts
        done = run_without_torch(tmp_path, "verify-manifest", str(manifest), "--store", str(other_pin_store.root),
                                 "--allow-unchecked-payloads")
        assert done.returncode == 0 and last in " ".join(done.stdout.split()), done.stdout + done.stderr
    for command in ("ls", "verify"):
        done = run_without_torch(tmp_path, "store", command, "--store", str(other_pin_store.root))
        assert done.returncode == 0, done.stdout + done.stderr
    assert "every artifact in" in done.stdout
    path = other_pin_store.path(other_pin_store.ids()[0])
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    done = run_without_torch(tmp_path, "store", "verify", "--store", str(other_pin_store.root))
    assert done.returncode == 1 and "hash check failed" in done.stdout and "ImportError" not in done.stderr


# ---- offline, and paths that are not there ----


def test_the_hub_probe_reports_a_refused_connection_at_once(monkeypatch):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: a connection is refused
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        assert hub_access.hub_unreachable() == f"127.0.0.1:{port} cannot be reached (Connection refused)"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_access.hub_unreachable() == "HF_HUB_OFFLINE is set"


def test_an_unreachable_hub_fails_a_model_or_dataset_id_in_one_line(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub_access, "hub_unreachable", lambda: "hub.example:443 cannot be reached (test)")
    result = runner.invoke(app, ["solve", "--model", "owner/no-such-model", "--runs-dir", str(tmp_path)])
    message = " ".join(result.output.split())
    assert result.exit_code == 2 and "model 'owner/no-such-model' is a hub id" in message
    assert "(hub.example:443 cannot be reached (test)); to run offline" in message and "HF_HUB_OFFLINE=1" in message
    with pytest.raises(ProblemSetError, match=r"^owner/probs: file not found, and as a hub dataset id it cannot be "
                                              r"loaded: the hub cannot be used \(hub.example:443 .*HF_HUB_OFFLINE=1"):
        load_problems("owner/probs")


def test_an_offline_hub_model_id_fails_in_one_line_before_torch_is_imported(tmp_path):
    done = run_without_torch(tmp_path, "solve", "--model", "owner/not-cached", "--runs-dir", str(tmp_path / "runs"),
                             HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "empty-hub-cache"))
    lines = done.stdout.splitlines()
    assert done.returncode == 2 and done.stderr == "", done.stdout + done.stderr
    assert " ".join(lines).startswith("error: model 'owner/not-cached' is a hub id")
    assert "(HF_HUB_OFFLINE is set); to run offline" in " ".join(lines) and not (tmp_path / "runs").exists()


def test_a_missing_file_under_an_existing_folder_is_file_not_found_not_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hub_access, "hub_unreachable", lambda: pytest.fail("the hub was asked about a path"))
    with pytest.raises(ProblemSetError, match=r"^data/probs: file not found$"):
        load_problems("data/probs")


# ---- messages that say what happened and what was kept ----


def test_a_failed_write_says_earlier_writes_are_kept():
    error = storage_error(OSError(errno.ENOSPC, "No space left on device"), "sample 'a' to runs/r/samples.jsonl")
    assert os_error_text(error) == ("cannot write sample 'a' to runs/r/samples.jsonl: No space left on device; this "
                                    "write was undone (what was written before it is kept), free some space and run "
                                    "again")


def test_a_full_runs_folder_during_a_run_says_the_samples_are_kept_and_the_command_resumes(monkeypatch, tmp_path):
    from graftbench.cli.app import app

    def full(*args, **kwargs):
        raise storage_error(OSError(errno.ENOSPC, "No space left on device"), "sample 'mod-1'")

    monkeypatch.setattr("graftbench.scale.eval_job._executor", lambda *args: full)
    result = runner.invoke(app, ["solve", "--problems", "builtin:1", "--limit", "2", "--run", "full",
                                 "--runs-dir", str(tmp_path)])
    message = " ".join(result.output.split())
    assert result.exit_code == 2
    assert (f"the samples finished so far are kept in {tmp_path / 'full'} and the same command resumes the run"
            in message)


def test_a_read_only_file_system_is_named_not_shown_as_a_raw_errno(monkeypatch, tmp_path):
    refused = OSError(errno.EROFS, "Read-only file system", "gs/write.lock")
    assert os_error_text(refused, "the store gs") == (
        "the store gs cannot be written: Read-only file system (gs/write.lock); nothing was written. Pass a place "
        "this process can write (a store or runs folder elsewhere), or make it writable")
    assert os_error_text(StorageError(errno.ENOSPC, "cannot write x")) == "cannot write x"  # no "[Errno 28]"
    store = Store(tmp_path / "ro")
    store.put(kv_artifact("mod-0", "c" * 64))

    def read_only(folder, follow=True):
        raise OSError(errno.EROFS, "Read-only file system", str(folder))

    monkeypatch.setattr("graftbench.store.folder.clean_temporaries", read_only)
    opened = open_graft_store(store.root)  # a graft only reads: the store opens read-only
    assert opened.readonly and opened.ids() == store.ids()


def test_verify_manifest_refuses_a_store_that_is_a_file(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = runner.invoke(app, ["verify-manifest", str(GRAFTED), "--store", str(afile)])
    assert result.exit_code == 2 and "is not a store: it is a file, not a folder" in " ".join(result.output.split())


def test_the_problem_file_format_is_documented_with_its_default_columns():
    from graftbench.cli import panels
    from graftbench.cli.app import solve

    page = (ROOT / "docs" / "problem-sets.md").read_text()
    defaults = {name: p.default for name, p in inspect.signature(solve).parameters.items()}
    fields = [(flag, defaults[flag[2:].replace("-", "_")]) for flag, _ in panels.options(solve)
              if flag.endswith("-field")]
    assert len(fields) == 4
    for flag, default in fields:
        assert f"`{default}`" in page and flag in page
    assert '{"id": ' in page  # an example row


# ---- with a model: a finished run is left as it is; a graft run's checks import no torch ----


@pytest.fixture(scope="module")
def finished(session, tmp_path_factory):
    from graftbench.settings import EvalSettings
    from graftbench.eval.eval_run import run_eval

    runs = tmp_path_factory.mktemp("runs")
    problems = load_problems("builtin:1", limit=1)
    result = run_eval(session, problems, "builtin:1", "rr", EvalSettings(max_new_tokens=4), command="solve",
                      runs_root=runs)
    return runs, result


def test_a_finished_run_run_again_changes_nothing_and_loads_no_model(finished, monkeypatch):
    from graftbench.cli.app import app

    runs, result = finished
    before = {p.name: p.read_bytes() for p in result.run.path.iterdir()}
    monkeypatch.setattr("graftbench.scale.eval_job._executor", lambda *args: pytest.fail("a finished run loaded a model"))
    args = ["solve", "--problems", "builtin:1", "--limit", "1", "--max-new-tokens", "4", "--run", "rr",
            "--runs-dir", str(runs), "--chunk-size", str(result.manifest["config"]["chunk_size"])]
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "run 'rr' is already complete" in " ".join(again.output.split())
    assert {p.name: p.read_bytes() for p in result.run.path.iterdir()} == before


def test_an_unfinished_run_is_not_taken_for_a_finished_one(finished, tmp_path):
    import shutil

    from graftbench.results.finished import Request, finished_run
    from graftbench.settings import EvalSettings

    runs, result = finished
    copy = tmp_path / "rr"
    shutil.copytree(result.run.path, copy)
    config = result.manifest["config"]
    request = Request("solve", "smollm2-135m", config["dtype"], config["chunk_size"], config["isa"],
                      EvalSettings(max_new_tokens=4))
    problems = load_problems("builtin:1", limit=1)
    assert finished_run(tmp_path, "rr", request, problems).mismatches == []
    for other in (replace(request, dtype="bfloat16"), replace(request, chunk_size=config["chunk_size"] + 1),
                  replace(request, settings=EvalSettings(max_new_tokens=5))):
        assert finished_run(tmp_path, "rr", other, problems) is None  # another run: it runs or is refused as before
    manifest = copy / "manifest.json"
    text = manifest.read_text()
    manifest.write_text(text.replace(result.manifest["created_utc"], "2000-01-01T00:00:00+00:00"))
    assert finished_run(tmp_path, "rr", request, problems).mismatches  # finished, but edited: the CLI exits 1
    (copy / "samples.jsonl").write_bytes(b"")
    assert finished_run(tmp_path, "rr", request, problems) is None


def test_verify_manifest_and_store_verify_of_a_grafted_run_import_no_torch(session, tmp_path):
    from graftbench.settings import EvalSettings
    from graftbench.eval.deposit_plan import deposit_job
    from graftbench.eval.eval_run import run_eval

    problems = load_problems("builtin:1", limit=1)
    store = tmp_path / "store"
    assert deposit_job(session, store, problems, references=True).deposited
    result = run_eval(session, problems, "builtin:1", "g", EvalSettings(max_new_tokens=4, graft=True),
                      runs_root=tmp_path / "runs", store_root=store)
    assert result.samples[0].route == "exact"
    done = run_without_torch(tmp_path, "verify-manifest", str(result.run.manifest_path), "--store", str(store),
                           "--require-artifacts")
    assert done.returncode == 0 and "1 artifact payloads checked" in done.stdout, done.stdout + done.stderr
    done = run_without_torch(tmp_path, "store", "verify", "--store", str(store))
    assert done.returncode == 0 and "every artifact in" in done.stdout, done.stdout + done.stderr
