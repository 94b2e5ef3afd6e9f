"""docs/api.md's examples run as written: every ``python`` block of the page, in order, from a fresh working folder
holding a link to the checkout's ``manifests/``. The blocks of the section without a model run in a fresh process that
must not import torch or transformers; the whole page runs with the default model (``model`` marker)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PAGE = ROOT / "docs" / "api.md"
TORCH_FREE_SECTION = "Without a model (no torch)"
MODEL_SECTION = "With a model"


def blocks_by_section(text: str) -> dict[str, list[str]]:
    """The page's fenced ``python`` blocks under each ``## `` heading, in order."""
    sections: dict[str, list[str]] = {}
    for part in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = part.partition("\n")
        sections[heading.strip()] = re.findall(r"^```python\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)
    return sections


def _work_folder(folder: Path) -> Path:
    (folder / "manifests").symlink_to(ROOT / "manifests", target_is_directory=True)
    return folder


def test_the_page_has_examples_without_and_with_a_model():
    sections = blocks_by_section(PAGE.read_text(encoding="utf-8"))
    assert len(sections[TORCH_FREE_SECTION]) >= 1 and len(sections[MODEL_SECTION]) >= 3
    every = "\n".join(code for blocks in sections.values() for code in blocks)
    for name in ("solve", "deposit", "evaluate", "certify", "verify_manifest", "load_runs", "load_samples"):
        assert f"api.{name}(" in every, f"docs/api.md shows no example of api.{name}"


def test_the_examples_without_a_model_run_and_import_no_torch(tmp_path):
    code = "\n".join(blocks_by_section(PAGE.read_text(encoding="utf-8"))[TORCH_FREE_SECTION])
    code += "\nimport sys\nprint('imported:', sorted({'torch', 'transformers'} & set(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=_work_folder(tmp_path), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "imported: []"


def test_every_example_runs_in_order(session, tmp_path, monkeypatch):
    """``session`` puts the default model in the test cache first, so the page's ``open_model`` loads it from there."""
    monkeypatch.chdir(_work_folder(tmp_path))
    namespace: dict = {"__name__": "docs_api_examples"}
    for heading, blocks in blocks_by_section(PAGE.read_text(encoding="utf-8")).items():
        for number, code in enumerate(blocks, start=1):
            exec(compile(code, f"docs/api.md ({heading}, example {number})", "exec"), namespace)
    assert (tmp_path / "runs" / "api-graft" / "manifest.json").is_file()
    assert namespace["exactness"]["totals"]["exact_pairs"] == 2
