"""graftbench view's page in a real browser: Debian's Chromium, headless with its networking off, driven by selenium
through Debian's chromedriver (``make test`` installs both as root; elsewhere these tests are a named skip through
tests/prereqs.py, a failure where GRAFTBENCH_REQUIRE requires ``chromium``).

What is asserted on the rendered page: the committed recurring AIME 2024 baseline and graft of qwen2.5-coder-0.5b
render 30 problems per run, their 30 disagreements are one filter away, an opened problem shows both outputs with
the extracted answer marked; and a page built from hostile runs and problems (``</script>``, ``<!--``, U+2028,
``javascript:`` links, markup in outputs, ids and problem text) runs no script but its own: a sentinel global stays
unset and no dialog opens, while the same payload in a page without the policy does set it (the check has teeth).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.prereqs import need
from graftbench.problems.loading import load_problems
from graftbench.programs.sandbox import answer_line
from graftbench.report.view import read_run, render_page, view_data, write_view

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests" / "amd-epyc-avx512"
BASELINE = MANIFESTS / "aime2024-qwen2.5-coder-0.5b-baseline.json"
RECURRING = MANIFESTS / "aime2024-qwen2.5-coder-0.5b-recurring.json"
AIME2024 = ROOT.parent / "shared" / "data" / "aime2024.jsonl"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# Headless with nothing reaching out: this machine has no network, and a browser that tries hangs on it.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--window-size=1400,1000")
SENTINEL = "__graftbench_pwned"
# Set to 1 to write docs/view.png and docs/view-problem.png from the committed runs (docs/view.md shows them).
SCREENSHOT_ENV = "GRAFTBENCH_WRITE_VIEW_SCREENSHOTS"
PAYLOADS = (
    f"</script><script>window.{SENTINEL}=1</script>",
    f"<!-- <script>window.{SENTINEL}=2</script> -->",
    f"<img src=x onerror=\"window.{SENTINEL}=3;alert(3)\">",
    f"\u2028\u2029</script ><svg onload=\"window.{SENTINEL}=4\">",
    f"[click](javascript:window.{SENTINEL}=5) <a href=\"javascript:window.{SENTINEL}=6\">x</a> javascript:alert(7)",
    "<iframe srcdoc='<script>parent.alert(8)</script>'></iframe><style>body{display:none}</style>",
)
HOSTILE = " ".join(PAYLOADS)
STDOUT = HOSTILE + "\n" + PAYLOADS[0] + "\x1c42\n"  # a program's: its last line, as Python cuts lines, is 42


def _why_no_browser() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).is_file():
            return f"{path} is not installed (apt-get install chromium chromium-driver; `make browser-tools` as root)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the test extra: pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser():
    need("chromium", _why_no_browser())
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="graftbench-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + (f"--user-data-dir={profile}",):
        options.add_argument(flag)
    options.unhandled_prompt_behavior = "ignore"  # a dialog stays open, for the test to find it
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver, page: Path) -> None:
    driver.get(page.resolve().as_uri())


def _dialog(driver) -> str | None:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        alert = driver.switch_to.alert
        text = alert.text
        alert.dismiss()
        return text
    except NoAlertPresentException:
        return None


def _rows(driver) -> list:
    return driver.find_elements("css selector", "#problems tbody tr")


def _aime():
    assert AIME2024.is_file(), f"the AIME 2024 problem file is not at {AIME2024} (shared/data)"
    return load_problems(str(AIME2024))


def test_committed_recurring_runs_render_filter_and_open(browser, tmp_path):
    page, runs = write_view([BASELINE, RECURRING], tmp_path / "aime.html", _aime())
    _open(browser, page)
    assert browser.execute_script("return document.body.dataset.rendered") == "true"
    assert [r.status for r in runs] == ["verified", "partial"]
    headers = browser.find_elements("css selector", "#runs .run")
    assert len(headers) == 2 and "verify-manifest: ok" in headers[0].text
    assert "not everything was checked" in headers[1].text and "verify-manifest: ok" not in headers[1].text
    assert "0.0% (0/30)" in headers[0].text and "100.0% (30/30)" in headers[1].text
    assert len(_rows(browser)) == 30
    verdicts = [[c.text for c in row.find_elements("css selector", "td.verdict")] for row in _rows(browser)]
    assert all(v[0] in ("wrong", "no answer") and v[1] == "correct" for v in verdicts)
    browser.find_element("id", "filter-disagree").click()  # one filter: every disagreement
    assert len(_rows(browser)) == 30 and browser.find_element("id", "count").text.startswith("30 of 30")
    shots = ROOT / "docs" if os.environ.get(SCREENSHOT_ENV) == "1" else tmp_path
    browser.save_screenshot(str(shots / "view.png"))
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "filter-verdict")).select_by_value("0:correct")
    assert len(_rows(browser)) == 0 and browser.find_element("id", "count").text.startswith("0 of 30")
    Select(browser.find_element("id", "filter-verdict")).select_by_value("")
    row = next(r for r in _rows(browser) if r.get_attribute("data-problem") == "2024-I-2")
    row.click()
    detail = browser.find_element("id", "detail")
    assert detail.find_element("css selector", "h2").text.startswith("Problem 2024-I-2")
    assert "$xy$" in detail.find_element("css selector", "pre.problem-text").text
    outputs = detail.find_elements("css selector", ".run-output")
    assert len(outputs) == 2
    assert "To solve" in outputs[0].find_element("css selector", "pre.answer-text").text
    assert outputs[1].find_element("css selector", "mark.extracted").text.strip() == "25"
    assert detail.find_elements("css selector", "#diff pre.diff-text del")  # the baseline's text, removed
    detail.screenshot(str(shots / "view-problem.png"))
    assert all((shots / name).read_bytes()[:4] == b"\x89PNG" for name in ("view.png", "view-problem.png"))
    browser.find_element("css selector", "#problems thead th[data-column='tokens:0']").click()
    tokens = [int(r.find_elements("css selector", "td")[3].text) for r in _rows(browser)]
    assert tokens == sorted(tokens)


def test_csv_export_holds_the_filtered_rows(browser, tmp_path):
    page, _ = write_view([BASELINE, RECURRING], tmp_path / "aime.html")
    _open(browser, page)
    browser.find_element("id", "filter-id").send_keys("2024-II-")
    text = browser.execute_script("return window.graftbenchView.csv()")
    lines = text.strip().split("\r\n")
    assert lines[0].startswith("problem,family,verdict 1,decode tokens 1")
    assert len(lines) == 1 + 15 and all(line.startswith("2024-II-") for line in lines[1:])


def _hostile_runs(tmp_path: Path) -> tuple[list[Path], Path]:
    """An unsealed run folder whose samples carry the payloads everywhere a string is shown, a sealed manifest
    tampered with them (it fails verification: its mismatch lines carry them too), and a problem file with them
    in ids and text."""
    manifest = json.loads(RECURRING.read_text())
    samples = json.loads(json.dumps(manifest["samples"][:3]))  # copies: the manifest is tampered apart below
    for i, sample in enumerate(samples):
        sample.update(problem_id=f"p{i}-{PAYLOADS[i]}", output=HOSTILE + f"\nFinal answer: {i}\n", cue=PAYLOADS[3],
                      extracted=PAYLOADS[4], artifact_id=PAYLOADS[2], fallback=PAYLOADS[5], example_id=PAYLOADS[0],
                      route=PAYLOADS[1], key=PAYLOADS[4])
    samples[2].update(program=HOSTILE, stdout=STDOUT, stderr_tail=HOSTILE, exit_status=0,
                      stdout_sha256="0" * 64, program_s=0.1, stopped=None, isolation=PAYLOADS[5])
    folder = tmp_path / "runs" / "hostile"
    folder.mkdir(parents=True)
    (folder / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    manifest["run"] = HOSTILE
    manifest["samples"][0]["output"] = HOSTILE
    manifest["samples"][0]["problem_id"] = PAYLOADS[0]
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(manifest))
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": s["problem_id"], "problem": HOSTILE, "answer": "1"}) + "\n"
                                for s in samples))
    return [folder, tampered], problems


def _assert_no_script_ran(browser) -> None:
    assert browser.execute_script(f"return typeof window.{SENTINEL}") == "undefined"
    assert _dialog(browser) is None
    assert browser.find_elements("css selector", "img, svg, iframe, a[href^='javascript'], #app style, #app script") == []


def test_hostile_page_runs_no_script(browser, tmp_path):
    paths, problems_file = _hostile_runs(tmp_path)
    problems = load_problems(str(problems_file), integer_answers=False)
    page, runs = write_view(paths, tmp_path / "hostile.html", problems)
    assert [r.status for r in runs] == ["unsealed", "failed"]
    _open(browser, page)
    assert browser.execute_script("return document.body.dataset.rendered") == "true"
    _assert_no_script_ran(browser)
    failed = browser.find_elements("css selector", "#runs .run.status-failed")
    assert len(failed) == 1 and "FAILED" in failed[0].text and "accuracy" not in failed[0].text
    assert HOSTILE.split("\u2028")[0] in failed[0].find_element("css selector", "h2").text
    hostile_ids = [f"p{i}-{PAYLOADS[i]}" for i in range(3)]
    assert [r.get_attribute("data-problem") for r in _rows(browser)][:3] == hostile_ids
    for index in range(len(_rows(browser))):
        _rows(browser)[index].click()
        _assert_no_script_ran(browser)
        if index < 3:
            shown = browser.execute_script("return document.querySelector('#detail pre.problem-text').textContent")
            assert shown == HOSTILE  # the payload is shown as text, exactly
        if index == 2:  # the stdout line marked is the one the verifier judged, cut where Python cuts lines
            marked = browser.execute_script(
                "return document.querySelector('#detail pre.stdout mark.extracted').textContent")
            assert marked == answer_line(STDOUT) == "42"
    assert browser.execute_script("return window.graftbenchView.csv()").count("'=") == 0
    _assert_no_script_ran(browser)


def test_the_sentinel_check_has_teeth(browser, tmp_path):
    # The same payload in a page without the policy runs; with the policy added, an injected script does not.
    bare = tmp_path / "bare.html"
    bare.write_text(f"<!DOCTYPE html><html><body>{PAYLOADS[0]}</body></html>")
    _open(browser, bare)
    assert browser.execute_script(f"return window.{SENTINEL}") == 1
    page = render_page(view_data([read_run(BASELINE)]))
    injected = tmp_path / "injected.html"
    injected.write_text(page.replace("<div id=\"app\"></div>", f"<div id=\"app\"></div>{PAYLOADS[0]}"))
    _open(browser, injected)
    assert browser.execute_script("return document.body.dataset.rendered") == "true"  # the page's own script ran
    _assert_no_script_ran(browser)


def test_a_sampled_program_run_shows_pass_at_k_programs_and_pages(browser, tmp_path):
    flywheel = [MANIFESTS / f"flywheel-qwen2.5-coder-0.5b-program-r1-{arm}.json" for arm in ("baseline", "graft")]
    page, runs = write_view(flywheel, tmp_path / "program.html")
    _open(browser, page)
    headers = browser.find_elements("css selector", "#runs .run")
    assert all("pass@k" in h.text and "avg@N" in h.text and "maj@N" in h.text for h in headers)
    row = _rows(browser)[0]
    verdicts = [td.text for td in row.find_elements("css selector", "td.verdict")]
    assert len(verdicts) == 2 and all(re.fullmatch(r"(correct|wrong|no answer|mixed) [0-4]/4", v) for v in verdicts)
    row.click()
    samples = browser.find_elements("css selector", "#detail .run-output .sample")
    assert len(samples) == 8  # 4 samples of the problem in each run
    programs = browser.find_elements("css selector", "#detail .program")
    assert len(programs) == 8 and "print" in programs[0].find_element("css selector", "pre").text
    judged = browser.find_elements("css selector", "#detail .program pre.stdout mark.extracted")
    assert judged  # the stdout line the verifier judged is marked
    # Paging: 60 problems at 25 a page are three pages.
    page, _ = write_view([MANIFESTS / "transfer-smollm2-135m-baseline.json"], tmp_path / "paged.html")
    _open(browser, page)
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "page-size")).select_by_value("25")
    assert len(_rows(browser)) == 25 and "page 1 of 3" in browser.find_element("id", "count").text
    browser.find_element("id", "page-next").click()
    browser.find_element("id", "page-next").click()
    assert len(_rows(browser)) == 10 and "page 3 of 3" in browser.find_element("id", "count").text
    assert browser.find_element("id", "page-next").get_attribute("disabled") is not None
