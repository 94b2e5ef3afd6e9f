"""Strict JSON reading (graftbench.util.strict_json) and every manifest reader that uses it: run manifests, exactness
manifests, verify-manifest's schema dispatch and the replay log. A committed document that parsers may read
differently (a repeated key, a lone surrogate, NaN, a float that overflows) is refused, naming the file and the key
or place, never a traceback and never a silent 'ok'. No model is loaded: the committed manifests are edited."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.results.exact_manifest import load_expectation, read_replay_log
from graftbench.results.layout import manifest_folders
from graftbench.results.manifest import ManifestError, load_manifest, verify_manifest
from graftbench.results.check import check_manifest
from graftbench.util.strict_json import StrictJSONError, load_strict, loads_strict
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
RUN_MANIFEST = REFERENCE_MANIFESTS / "aime2024-smollm2-135m-baseline.json"
EXACT_MANIFEST = REFERENCE_MANIFESTS / "exact-smollm2-135m.json"
REPLAY_LOG = REFERENCE_MANIFESTS.parent / "replays.jsonl"  # manifests/replays.jsonl
runner = CliRunner()


def edited(source: Path, tmp_path: Path, marker: str, insert: str, *, after: bool = True) -> Path:
    """A copy of ``source`` with ``insert`` put just after (or before) the first ``marker``."""
    text = source.read_text(encoding="utf-8")
    at = text.index(marker) + (len(marker) if after else 0)
    path = tmp_path / source.name
    path.write_text(text[:at] + insert + text[at:], encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- the reader itself


def test_plain_json_reads_as_json_loads():
    text = '{"a": [1, 2.5, "é", "\\ud83d\\ude00", null, true], "b": {"c": -0.0}}'
    assert loads_strict(text) == json.loads(text)
    assert loads_strict(text.encode("utf-8")) == json.loads(text)


@pytest.mark.parametrize("text, reason", [
    ('{"a": 1, "a": 2}', "is refused: the object at the top level repeats the key 'a'"),
    ('{"x": [{"id": 1}, {"k": {"correct": true, "correct": false}}]}',
     "is refused: the object at x[1].k repeats the key 'correct'"),
    ('[{"a": 1}, {"b": 1, "c": 2, "b": 1}]', "is refused: the object at [1] repeats the key 'b'"),
    ('{"s": ["ok", "\\ud800"]}', "is refused: the string at s[1] holds a lone surrogate (\\ud800)"),
    ('{"s": "\\udc00x"}', "is refused: the string at s holds a lone surrogate (\\udc00)"),
    ('{"\\ud800": 1}', "is refused: a key of the object at the top level holds a lone surrogate (\\ud800)"),
    ('{"x": NaN}', "is not valid JSON (NaN is not a JSON number)"),
    ('{"x": -Infinity}', "is not valid JSON (-Infinity is not a JSON number)"),
    ('{"x": 1e400}', "is refused: the number 1e400 is too large for a float"),
    ('{"x": 1', "is not valid JSON (Expecting ',' delimiter: line 1 column 8)"),
    ("[" * 100_000 + "]" * 100_000, "is not valid JSON (nested too deeply)"),
    ('{"x": ' + "9" * 5000 + "}", "is not valid JSON (Exceeds the limit"),
])
def test_refused_documents_name_the_source_and_the_place(text, reason):
    with pytest.raises(StrictJSONError) as info:
        loads_strict(text, source="doc.json")
    assert str(info.value).startswith("doc.json " + reason), str(info.value)
    assert info.value.source == "doc.json" and str(info.value) == f"doc.json {info.value.reason}"


def test_the_first_problem_in_document_order_is_named():
    text = '{"a": {"k": 1, "k": 2}, "b": "\\ud800", "c": {"j": 1, "j": 1}}'
    with pytest.raises(StrictJSONError, match=re.escape("the object at a repeats the key 'k'")):
        loads_strict(text)


def test_invalid_utf8_is_refused():
    with pytest.raises(StrictJSONError, match=re.escape("x is not valid JSON (not UTF-8 at byte 7)")):
        loads_strict(b'{"a": "\xff"}', source="x")


def test_parse_float_keeps_the_literal():
    assert loads_strict('{"a": 9007199254740993.0}', parse_float=Decimal) == {"a": Decimal("9007199254740993.0")}
    assert loads_strict('{"a": 1e400}', parse_float=Decimal) == {"a": Decimal("1e400")}
    out_of_range = "x is not valid JSON (a number whose exponent is out of range)"
    with pytest.raises(StrictJSONError, match=re.escape(out_of_range)):
        loads_strict('{"a": 1e99999999999999999999}', source="x", parse_float=Decimal)


def test_load_strict_names_the_path_and_passes_os_errors(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"k": 1, "k": 1}', encoding="utf-8")
    reason = "is refused: the object at the top level repeats the key 'k'"
    with pytest.raises(StrictJSONError, match=re.escape(f"{path} {reason}")):
        load_strict(path)
    with pytest.raises(FileNotFoundError):
        load_strict(tmp_path / "missing.json")


# ----------------------------------------------------------------------------- run manifests


def test_committed_manifests_still_read():
    """Every committed manifest of every kind of machine (not an empty glob: each kind's folder holds some)."""
    folders = manifest_folders(REFERENCE_MANIFESTS.parents[1])
    paths = sorted(path for folder in folders for path in folder.glob("*.json"))
    assert REFERENCE_MANIFESTS in folders and {path.parent for path in paths} == set(folders), folders
    for path in paths:
        assert load_strict(path) == json.loads(path.read_text(encoding="utf-8")), path


def test_lone_surrogate_in_a_run_manifest_is_refused_not_a_traceback(tmp_path):
    # Before: sha256_json of the body raised UnicodeEncodeError out of verify_manifest (a traceback in the CLI).
    path = edited(RUN_MANIFEST, tmp_path, '"output":"', "\\ud800")
    with pytest.raises(ManifestError) as info:
        verify_manifest(path)
    assert str(info.value) == (f"manifest '{path}' is refused: the string at samples[0].output holds a lone "
                               "surrogate (\\ud800); JSON parsers may read it differently")
    result = runner.invoke(app, ["verify-manifest", str(path)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "holds a lone surrogate" in result.output and path.name in result.output


def test_a_valid_surrogate_pair_is_an_ordinary_edit(tmp_path):
    # An escaped pair is one character (U+1F600): not refused; the edit is a mismatch, exit 1.
    path = edited(RUN_MANIFEST, tmp_path, '"output":"', "\\ud83d\\ude00")
    mismatches, _ = verify_manifest(path)
    assert "manifest_sha256 does not match the manifest's content" in mismatches
    result = runner.invoke(app, ["verify-manifest", str(path)])
    assert result.exit_code == 1 and "output_sha256 does not match" in result.output


def test_repeated_key_in_a_run_manifest_is_refused(tmp_path):
    # The baseline's samples are all incorrect; a first-wins parser would read this sample as correct. Before, the
    # last value won and the manifest verified as ok.
    text = RUN_MANIFEST.read_text(encoding="utf-8")
    assert '"correct":false' in text
    path = edited(RUN_MANIFEST, tmp_path, '"correct":false', '"correct":true,', after=False)
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(text)  # what Python's json reads: unchanged
    with pytest.raises(ManifestError) as info:
        verify_manifest(path)
    assert str(info.value) == (f"manifest '{path}' is refused: the object at samples[0] repeats the key 'correct'; "
                               "JSON parsers may read it differently")
    result = runner.invoke(app, ["verify-manifest", str(path)])
    assert result.exit_code == 1 and "repeats the key 'correct'" in result.output


def test_repeated_key_at_the_top_level_and_in_sealed_fields(tmp_path):
    path = edited(RUN_MANIFEST, tmp_path, "{", '"schema":"x",')
    with pytest.raises(ManifestError, match="the object at the top level repeats the key 'schema'"):
        load_manifest(path)
    text = RUN_MANIFEST.read_text(encoding="utf-8")
    sealed = text.index('"sealed_fields":')
    marker = text[text.index('"correct":"', sealed):][:len('"correct":"') + 16 + 1]
    path.write_text(text[:sealed] + text[sealed:].replace(marker, marker + "," + marker, 1), encoding="utf-8")
    place = r"the object at sealed_fields\.samples\.2024-I-1 repeats the key 'correct'"
    with pytest.raises(ManifestError, match=place):
        load_manifest(path)


def test_nan_and_overflowing_numbers_are_refused(tmp_path):
    for value, reason in (("NaN", "is not valid JSON (NaN is not a JSON number)"),
                          ("1e999", "is refused: the number 1e999 is too large for a float")):
        path = edited(RUN_MANIFEST, tmp_path, '"wall_s":', value + ',"x":')
        with pytest.raises(ManifestError, match=re.escape(f"manifest '{path}' {reason}")):
            verify_manifest(path)


# ----------------------------------------------------------------------------- exactness manifests and replays


def test_lone_surrogate_in_an_exactness_manifest_is_refused(tmp_path):
    # Before: verify_exactness_manifest hashed the text and raised UnicodeEncodeError.
    path = edited(EXACT_MANIFEST, tmp_path, '"id":"', "\\udfff")
    with pytest.raises(ManifestError, match=r"the string at pairs\[0\]\.id holds a lone surrogate \(\\udfff\)"):
        check_manifest(path)
    result = runner.invoke(app, ["verify-manifest", str(path)])
    assert result.exit_code == 1 and "holds a lone surrogate" in result.output


def test_repeated_key_in_an_exactness_manifest_is_refused(tmp_path):
    path = edited(EXACT_MANIFEST, tmp_path, '"pairs":[{', '"id":"another",')
    with pytest.raises(ManifestError, match=r"the object at pairs\[0\] repeats the key 'id'"):
        load_expectation(path)
    with pytest.raises(ManifestError, match="repeats the key 'id'"):
        check_manifest(path)


def test_schema_dispatch_reads_strictly(tmp_path):
    # A second "schema" naming the run kind: json.loads read the last one and dispatched to the run-manifest
    # check; now the file is refused whatever its schema says.
    path = edited(EXACT_MANIFEST, tmp_path, "{", '"schema":"graftbench.manifest/1",')
    with pytest.raises(ManifestError, match="the object at the top level repeats the key 'schema'"):
        check_manifest(path)


def test_replay_log_is_read_strictly(tmp_path):
    assert len(read_replay_log(REPLAY_LOG)) == len(REPLAY_LOG.read_text(encoding="utf-8").splitlines())
    path = tmp_path / "replays.jsonl"
    shutil.copy(REPLAY_LOG, path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"compared": 5, "equal": 0, "equal": 5}\n')
    number = len(path.read_text(encoding="utf-8").splitlines())
    with pytest.raises(StrictJSONError, match=re.escape(f"{path} line {number} is refused: the object at the top "
                                                        "level repeats the key 'equal'")):
        read_replay_log(path)


def test_the_strict_reader_keeps_verify_manifest_torch_free():
    code = ("import sys\n"
            "from graftbench.results.check import check_manifest\n"
            f"mismatches, notes = check_manifest({str(RUN_MANIFEST)!r})\n"
            "assert notes and isinstance(mismatches, list)\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr


# ----------------------------------------------------------------------------- artifact headers and run folders


def test_artifact_headers_repeating_a_key_are_refused():
    from graftbench.store.codec import FORMAT, HEADER_KEY, ArtifactError, header_from_metadata
    from graftbench.store.reader import LayoutError, parse_table

    text = f'{{"format": "{FORMAT}", "answer": "7", "answer": "8"}}'
    with pytest.raises(ArtifactError, match="repeats the key 'answer'") as info:
        header_from_metadata("a" * 64, {HEADER_KEY: text})
    assert info.value.check == "header"
    with pytest.raises(LayoutError, match="the safetensors header is refused: the object at the top level repeats"):
        parse_table(b'{"k": {"dtype": "F32"}, "k": {"dtype": "I64"}}')


def test_run_settings_and_samples_repeating_a_key_are_refused(tmp_path):
    from graftbench.results.runs import RunDir, RunError

    run = RunDir(tmp_path, "r")
    with run:
        run.open({"model": "m"})
    run.settings_path.write_text('{"model": "m", "model": "n"}', encoding="utf-8")
    with pytest.raises(RunError, match="repeats the key 'model'"), run:
        run.open({"model": "m"})
    run.settings_path.write_text('{"model": "m"}', encoding="utf-8")
    run.samples_path.write_text('{"problem_id": "a", "correct": true, "correct": false}\n', encoding="utf-8")
    with pytest.raises(RunError, match="line 1 is not a sample"):
        run.read_samples()
