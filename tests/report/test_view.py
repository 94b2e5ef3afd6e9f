"""graftbench view without a browser: the embedding cannot break out of its script element, the policy hashes the
page's own script and style, the committed AIME 2024 runs give the page's data, a failed manifest is shown as
failed and never with metrics, an unsealed run folder is read from its samples, and the command writes the page.
The page in a real browser: tests/report/test_view_browser.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graftbench.cli.app import app
from graftbench.problems.loading import load_problems
from graftbench.report.view import (ViewError, csp_hash, embed_json, read_run, render_page, view_data,
                                    write_view)
from graftbench.results.manifest import seal_sha256

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests" / "amd-epyc-avx512"
BASELINE = MANIFESTS / "aime2024-qwen2.5-coder-0.5b-baseline.json"
RECURRING = MANIFESTS / "aime2024-qwen2.5-coder-0.5b-recurring.json"
AIME2024 = ROOT.parent / "shared" / "data" / "aime2024.jsonl"
HOSTILE = "</script><script>window.pwned=1</script><!-- \u2028\u2029 & <img src=x onerror=alert(1)> javascript:alert(1)"


def _aime():
    if not AIME2024.is_file():
        pytest.skip(f"the AIME 2024 problem file is not at {AIME2024} (shared/data)")
    return load_problems(str(AIME2024))


def test_embedding_holds_no_markup_and_parses_back():
    data = {"text": HOSTILE, "nested": [HOSTILE, {"k": "\u2028"}]}
    embedded = embed_json(data)
    for forbidden in ("<", ">", "&", "\u2028", "\u2029"):
        assert forbidden not in embedded
    assert "</script" not in embedded.lower() and "<!--" not in embedded
    assert json.loads(embedded) == data


def test_policy_allows_only_the_pages_own_script_and_style():
    page = render_page({"runs": [], "problems": [], "examples": {}, "problem_file": False})
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert len(scripts) == 1 and len(styles) == 1
    assert f"script-src {csp_hash(scripts[0])};" in policy
    assert f"style-src {csp_hash(styles[0])};" in policy
    assert policy.startswith("default-src 'none';") and "unsafe-inline" not in policy and "unsafe-eval" not in policy
    # The page's script writes no markup from data: no innerHTML, outerHTML, insertAdjacentHTML, document.write.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(", "setAttribute"):
        assert sink not in scripts[0], sink
    # The one link it makes is the CSV download, to a Blob URL it created itself.
    assert re.findall(r"\w*\.href\b[^;]*;", scripts[0]) == ["link.href = url;"]
    assert "var url = URL.createObjectURL(new Blob(" in scripts[0]


def test_committed_recurring_runs_give_thirty_problems_each():
    runs = [read_run(BASELINE), read_run(RECURRING)]
    # The graft run's artifacts are not committed, so its payloads were not checked: shown as such, not as "ok".
    assert [r.status for r in runs] == ["verified", "partial"]
    assert "not checked" in runs[1].notes[0] and not runs[1].mismatches
    data = view_data(runs, _aime())
    assert len(data["problems"]) == 30
    assert all(len(p["runs"][0]) == 1 and len(p["runs"][1]) == 1 for p in data["problems"])
    assert sum(p["runs"][0][0]["correct"] for p in data["problems"]) == 0
    assert sum(p["runs"][1][0]["correct"] for p in data["problems"]) == 30
    assert all(p["text"] and p["text_matches"] is True for p in data["problems"])
    headers = data["runs"]
    assert headers[0]["metrics"]["correct"] == 0 and headers[1]["metrics"]["correct"] == 30
    assert headers[1]["metrics"]["interval"][0] > 0.8  # Wilson over 30 problems, not a degenerate bootstrap
    first = data["problems"][0]["runs"][1][0]
    start, end = first["answer_span"]
    assert first["output"][start:end].strip() == first["extracted"]


def test_each_run_is_labelled_with_the_engine_its_pin_is_of():
    from graftbench.engine import pin_terms
    from graftbench.results import pin_engine

    llama = MANIFESTS / "aime2024-qwen2.5-coder-1.5b-llama-f16-baseline.json"
    headers = view_data([read_run(BASELINE), read_run(llama)])["runs"]
    assert [h["engine"] for h in headers] == ["torch", "llama.cpp"]  # a pin without an engine section is torch's
    assert pin_terms.engine_of is pin_engine.engine_of and pin_terms.TORCH == pin_engine.ENGINE_WITHOUT_SECTION
    assert [pin_engine.engine_of(pin) for pin in ({}, {"engine": {}}, {"engine": {"n_ctx": 1}}, {"engine": "x"})] == [
        "torch", "torch", "?", "torch"]


def test_grafted_example_text_is_rebuilt_from_the_problem_file():
    data = view_data([read_run(RECURRING)], _aime())
    sample = data["problems"][1]["runs"][0][0]
    example = data["examples"][sample["artifact_id"]]
    assert example["problem_id"] == sample["example_id"]
    assert example["text"].startswith("Problem: ") and "Final answer: " + sample["example_answer"] in example["text"]


def _tampered(tmp_path: Path) -> Path:
    manifest = json.loads(RECURRING.read_text())
    manifest["run"] = HOSTILE
    manifest["samples"][0]["output"] = HOSTILE  # its output_sha256 no longer matches
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    manifest["manifest_sha256"] = seal_sha256(body)
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(manifest))
    return path


def test_a_failed_manifest_is_shown_failed_without_metrics(tmp_path):
    run = read_run(_tampered(tmp_path))
    assert run.status == "failed" and run.mismatches
    header = view_data([run])["runs"][0]
    assert header["status"] == "failed" and header["metrics"] is None
    assert any("output_sha256" in line for line in header["mismatches"])


def test_an_unsealed_run_folder_is_read_from_its_samples(tmp_path):
    folder = tmp_path / "runs" / "partial"
    folder.mkdir(parents=True)
    samples = json.loads(RECURRING.read_text())["samples"][:3]
    text = "".join(json.dumps(s) + "\n" for s in samples) + '{"torn": '  # a killed writer's last line
    (folder / "samples.jsonl").write_text(text)
    run = read_run(folder)
    assert run.status == "unsealed" and len(run.samples) == 3 and len(run.problems) == 3
    assert view_data([run])["runs"][0]["metrics"] is None


def test_an_unsealed_runs_samples_linked_out_of_its_folder_or_too_large_are_refused_unread(tmp_path, monkeypatch):
    """The page embeds what samples.jsonl holds: a link out of the run's folder (another run's or any JSON-lines
    file) is not followed, and a file over the cap is refused from its size, before it is read into memory."""
    import graftbench.report.view as view

    samples = json.loads(RECURRING.read_text())["samples"][:3]
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("".join(json.dumps(s) + "\n" for s in samples))
    folder = tmp_path / "runs" / "linked"
    folder.mkdir(parents=True)
    (folder / "samples.jsonl").symlink_to(elsewhere)
    with pytest.raises(ViewError, match="samples.jsonl .* is refused: it resolves to .*outside"):
        read_run(folder)
    (folder / "samples.jsonl").unlink()
    (folder / "samples.jsonl").write_bytes(elsewhere.read_bytes())
    monkeypatch.setattr(view, "MAX_SAMPLES_FILE_BYTES", 100)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"{self} read whole"))
    with pytest.raises(ViewError, match="is refused: it is .* bytes, more than the 100 bytes read at most"):
        read_run(folder)


def test_what_is_not_a_run_is_refused_by_name(tmp_path):
    with pytest.raises(ViewError, match="does not exist"):
        read_run(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ViewError, match="holds no manifest.json"):
        read_run(tmp_path / "empty")
    (tmp_path / "x.json").write_text("[1]")
    with pytest.raises(ViewError, match="neither a run folder nor a run manifest"):
        read_run(tmp_path / "x.json")
    with pytest.raises(ViewError, match="is a folder"):
        write_view([RECURRING], tmp_path)


def test_view_command_writes_one_self_contained_page(tmp_path):
    out = tmp_path / "page.html"
    result = CliRunner().invoke(app, ["view", str(BASELINE), str(RECURRING), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output.replace("\n", "")
    page = out.read_text()
    markup = re.sub(r"<script>.*?</script>", "", page, flags=re.S)  # the page's elements, less its own script
    assert not re.search(r"\b(?:src|href)\s*=", markup)  # nothing is fetched, nothing links out
    assert "http://" not in page and "https://" not in page


def test_view_command_names_a_bad_input(tmp_path):
    result = CliRunner().invoke(app, ["view", str(tmp_path / "missing"), "--out", str(tmp_path / "p.html")])
    assert result.exit_code != 0 and "does not exist" in result.output
    assert not (tmp_path / "p.html").exists()


def test_docs_screenshot_is_a_committed_png():
    shot = ROOT / "docs" / "view.png"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "view.png" in (ROOT / "docs" / "view.md").read_text()


def test_the_page_holds_the_package_assets_verbatim():
    page = render_page({"runs": [], "problems": [], "examples": {}, "problem_file": False})
    assets = ROOT / "graftbench" / "report" / "view_page"
    assert (assets / "view.js").read_text() in page and (assets / "view.css").read_text() in page


def test_a_store_that_cannot_be_opened_is_named(tmp_path):
    with pytest.raises(ViewError, match="--store"):
        write_view([RECURRING], tmp_path / "p.html", store=tmp_path / "no-store")


def test_the_grafted_example_is_read_from_the_store_and_checked(tmp_path):
    import torch

    from graftbench.store.codec import encode_artifact
    from graftbench.store.folder import Store
    from graftbench.util.hashing import sha256_text

    problems = _aime()
    example = next(p for p in problems if p.id == "2024-I-2")
    manifest = json.loads(RECURRING.read_text())
    text = manifest["config"]["layout"]["deposit"].format(problem=example.problem, answer=example.answer,
                                                          solution=example.solution)
    layers = [(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))]
    header = {"config_fingerprint": "c" * 64, "positions": [0, 3], "dtype": "float32", "kv_heads": 1, "head_dim": 2,
              "layers": [{"kind": "full", "seen": 3, "kept": 3}], "parent": None, "problem_key": "k",
              "problem_text": example.problem, "answer": example.answer, "source": "reference",
              "problem_id": example.id, "text_sha256": sha256_text(text)}
    artifact_id = Store(tmp_path / "store").put(encode_artifact(header, torch.arange(3), layers))
    # The committed graft run, its sample of 2024-I-2 pointed at this artifact (its seal then fails; the example
    # is looked up all the same, with the run's recorded deposit layout).
    next(s for s in manifest["samples"] if s["problem_id"] == example.id)["artifact_id"] = artifact_id
    path = tmp_path / "graft.json"
    path.write_text(json.dumps(manifest))
    data = view_data([read_run(path)], problems, tmp_path / "store")
    shown = data["examples"][artifact_id]
    assert (shown["problem_id"], shown["answer"], shown["source"]) == (example.id, example.answer, "reference")
    assert shown["text"] == text and "equals the artifact's text_sha256" in shown["note"]
