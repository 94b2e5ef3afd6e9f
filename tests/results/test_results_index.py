"""The results index (docs/results.md) is generated from the committed files and equals what they say."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from graftbench.report import results_index
from graftbench.results.layout import manifest_folders
from tests.conftest import REFERENCE_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_index_equals_a_fresh_generation():
    assert (ROOT / results_index.PAGE).read_text() == results_index.render(ROOT), \
        "docs/results.md is out of date with the result files: run `make results-index` and commit it"


def _row(page: str, relative: str) -> list[str]:
    line = next(line for line in page.splitlines() if line.startswith(f"| [`{relative}`]"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_every_committed_manifest_has_one_row_with_its_own_figures():
    page = results_index.render(ROOT)
    paths = sorted(p for folder in manifest_folders(ROOT) for p in folder.rglob("*.json"))
    assert paths and page.count("| [`manifests/") == len(paths)  # not an empty glob: one row each, no other row
    for path in paths:
        relative = path.relative_to(ROOT).as_posix()
        assert page.count(f"| [`{relative}`]") == 1, relative
        manifest = json.loads(path.read_text())
        row = _row(page, relative)
        if manifest["schema"] == results_index.EXACTNESS_SCHEMA:
            assert row[5] == f"{manifest['totals']['exact_pairs']:,} / {manifest['totals']['pairs']:,}"
        else:
            assert row[7] == f"{manifest['totals']['correct']:,} / {manifest['totals']['samples']:,}", relative
            assert row[8] == f"{manifest['totals']['decode_tokens']:,}", relative


def test_the_recurring_aime_2024_row_reads_29_of_30_in_142_decode_tokens():
    row = _row(results_index.render(ROOT), "manifests/amd-epyc-avx512/aime2024-smollm2-135m-recurring.json")
    assert row[1:5] == ["eval", "smollm2-135m", "float32", "text"]
    assert row[7:10] == ["29 / 30", "142", "30"]


def test_rows_are_grouped_under_the_cpu_each_file_records():
    page = results_index.render(ROOT)
    intel = page.index("### Intel(R) Xeon(R) Processor (AVX512; amx")
    assert page.index("| [`manifests/intel-xeon-amx/exact-smollm2-135m.json`]") > intel
    assert page.index("| [`manifests/amd-epyc-avx512/exact-smollm2-135m.json`]") < intel


def _tiny_repo(tmp_path: Path, manifest: dict) -> Path:
    (tmp_path / "manifests" / "kind").mkdir(parents=True)
    (tmp_path / "results" / "kind" / "bench").mkdir(parents=True)
    (tmp_path / "manifests" / "kind" / "run.json").write_text(json.dumps(manifest))
    return tmp_path


def test_text_from_a_file_is_escaped_so_no_row_or_link_can_be_forged(tmp_path):
    committed = json.loads((REFERENCE_MANIFESTS / "aime2024-smollm2-135m-recurring.json").read_text())
    hostile = {**committed, "config": {**committed["config"], "model": "x | 1 / 1 |\n| [a](javascript:alert(1))"}}
    page = results_index.render(_tiny_repo(tmp_path, hostile))
    row = _row(page, "manifests/kind/run.json")
    assert len(row) == 11  # the model's pipes and line break did not add a column or a row
    assert "[a](javascript" not in page and "[a\\](javascript" in row[2] and "\\|" in row[2]


def test_a_result_file_that_is_not_a_json_object_is_named(tmp_path):
    root = _tiny_repo(tmp_path, {"schema": "graftbench.manifest/2"})
    (root / "results" / "kind" / "bench" / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"list\.json: a result file must hold a JSON object"):
        results_index.render(root)


def test_write_puts_the_page_under_docs(tmp_path):
    root = _tiny_repo(tmp_path, {"schema": "other"})
    shutil.copytree(ROOT / "docs", root / "docs", dirs_exist_ok=True)
    page = results_index.write(root)
    assert page == root / "docs" / "results.md"
    assert page.read_text().startswith("# Results index\n")
