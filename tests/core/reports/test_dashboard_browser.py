"""The dashboard in a real headless Chromium (Debian `chromium` + `chromium-driver`).

Skipped with a message only when /usr/bin/chromium is absent; CI installs it. A screenshot of the page
is saved under artifacts/ (git-ignored) for a human to look at.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from legival_core.reports.stage import ReportConfig, build_reports
from legival_core.reports.synthetic import fill_synthetic
from legival_core.store import Store
from tests.conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = REPO / "artifacts"
XSS_REASONING = (
    'First we add. <script>window.__xss=1</script> Then <img src=x onerror="window.__xss=2"> we check. '
    "Finally </script><!-- the answer is 4."
)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists() or not CHROMEDRIVER.exists(),
    reason="needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)",
)


def _xss_trace(store: Store) -> str:
    """A trace whose text, steps, question and answers carry script payloads."""
    from legival_core.segment import SEGMENTER_VERSION

    tid = "xss-trace"
    store.insert_rows("problems", [{"dataset": "gsm8k", "problem_id": "p-xss",
                                    "question": "<b>bold?</b><script>window.__xss=3</script>", "gold": "4"}])
    store.insert_rows("traces", [{"trace_id": tid, "teacher": "alpha", "dataset": "gsm8k", "problem_id": "p-xss",
                                  "reasoning": XSS_REASONING, "answer_text": '<img src=x onerror="window.__xss=4">',
                                  "truncated": False}])
    spans, pos = [], 0
    for sentence in ("First we add.", '<script>window.__xss=1</script> Then <img src=x onerror="window.__xss=2"> we check.',
                     "Finally </script><!-- the answer is 4."):
        start = XSS_REASONING.index(sentence, pos)
        spans.append((start, start + len(sentence)))
        pos = start + len(sentence)
    store.insert_rows("steps", [{"trace_id": tid, "segmenter": SEGMENTER_VERSION, "idx": i, "start_char": a,
                                 "end_char": b} for i, (a, b) in enumerate(spans, start=1)])
    store.insert_rows("rollouts", [
        {"trace_id": tid, "student_key": "key-student-a", "k": k, "sample": 0, "m": 3, "bin": b, "status": "ok",
         "correct": k == 3, "forced": False, "extracted": '<svg onload="window.__xss=5">', "grade_status": "ok",
         "continuation": "</script><script>window.__xss=6</script>"}
        for k, b in ((0, 0), (3, 50))
    ])
    return tid


@pytest.fixture(scope="module")
def report_dir() -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="legival-dash-"))
    with Store(tmp / "s.duckdb") as store:
        fill_synthetic(store, teachers=("alpha", "beta", "gamma", "delta"), traces_per_cell=12, seed=3)
        _xss_trace(store)
        build_reports(store, tmp / "out", ReportConfig(resamples=200))
    yield tmp / "out"
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def driver() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="legival-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,2400"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _severe(driver: object) -> list[dict[str, object]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]  # type: ignore[attr-defined]


def test_dashboard_renders_without_errors(driver: object, report_dir: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = driver
    d.get((report_dir / "index.html").as_uri())  # type: ignore[attr-defined]
    WebDriverWait(d, 20).until(lambda x: len(x.find_elements(By.CSS_SELECTOR, "#rank-table tbody tr")) == 4)
    assert _severe(d) == []
    header = [th.text for th in d.find_elements(By.CSS_SELECTOR, "#rank-table thead th")]  # type: ignore[attr-defined]
    assert header[0] == "teacher" and "fotu" in header and "accuracy" in header
    assert d.find_elements(By.CSS_SELECTOR, "#pareto-plot svg circle")  # type: ignore[attr-defined]
    assert len(d.find_elements(By.CSS_SELECTOR, "#curve-plot svg polyline")) == 4  # type: ignore[attr-defined]
    assert len(d.find_elements(By.CSS_SELECTOR, "#curve-plot svg polygon")) == 4  # bootstrap bands  # type: ignore[attr-defined]
    imgs = d.find_elements(By.CSS_SELECTOR, "#figs img")  # type: ignore[attr-defined]
    assert {i.get_attribute("data-name") for i in imgs} == {
        "pareto.png", "correlations.png", "tu_curves.png", "redundancy_elbow.png", "rank_table.png"}
    assert all(d.execute_script("return arguments[0].naturalWidth", i) > 100 for i in imgs)  # type: ignore[attr-defined]
    # sorting by a column reorders the rows by rank
    th = next(t for t in d.find_elements(By.CSS_SELECTOR, "#rank-table thead th") if t.text == "accuracy")  # type: ignore[attr-defined]
    th.click()
    first = d.find_element(By.CSS_SELECTOR, "#rank-table tbody tr td .rank")  # type: ignore[attr-defined]
    assert first.text == "1"


def test_trace_browser_shows_trace_and_blocks_xss(driver: object, report_dir: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = driver
    d.get((report_dir / "index.html").as_uri())  # type: ignore[attr-defined]
    WebDriverWait(d, 20).until(lambda x: x.find_elements(By.CSS_SELECTOR, "#trace-view .steps li"))
    d.execute_script("return window.legivalShowTrace('xss-trace')")  # type: ignore[attr-defined]
    WebDriverWait(d, 20).until(lambda x: "xss-trace" in x.find_element(By.ID, "trace-view").text)
    view = d.find_element(By.ID, "trace-view")  # type: ignore[attr-defined]
    text = view.text
    assert "<script>window.__xss=1</script>" in text
    assert 'onerror="window.__xss=2"' in text
    assert "</script><!-- the answer is 4." in text
    assert "<script>window.__xss=3</script>" in text  # the question
    assert '<svg onload="window.__xss=5">' in text  # a student's answer at a prefix
    assert len(view.find_elements(By.CSS_SELECTOR, ".steps li")) == 3
    assert not view.find_elements(By.TAG_NAME, "img") and not view.find_elements(By.TAG_NAME, "script")
    assert d.execute_script("return typeof window.__xss") == "undefined"  # type: ignore[attr-defined]
    assert _severe(d) == []

    # a normal trace: steps, redundancy/backtracking badges and the students' answers per depth
    tid = d.execute_script(  # type: ignore[attr-defined]
        "return JSON.parse(document.getElementById('legival-data').textContent)"
        ".traces.find(t => t.teacher === 'beta' && t.n_rollouts > 0).trace_id")
    d.execute_script("return window.legivalShowTrace(arguments[0])", tid)  # type: ignore[attr-defined]
    WebDriverWait(d, 20).until(lambda x: tid in x.find_element(By.ID, "trace-view").text)
    view = d.find_element(By.ID, "trace-view")  # type: ignore[attr-defined]
    assert view.find_elements(By.CSS_SELECTOR, ".steps li")
    assert "k = 0" in view.text
    ARTIFACTS.mkdir(exist_ok=True)
    d.execute_script("window.scrollTo(0, 0)")  # type: ignore[attr-defined]
    d.save_screenshot(str(ARTIFACTS / "dashboard_top.png"))  # type: ignore[attr-defined]
    d.execute_script("document.getElementById('browser').scrollIntoView()")  # type: ignore[attr-defined]
    d.save_screenshot(str(ARTIFACTS / "dashboard_trace_browser.png"))  # type: ignore[attr-defined]
    d.execute_script("document.getElementById('pareto').scrollIntoView()")  # type: ignore[attr-defined]
    d.save_screenshot(str(ARTIFACTS / "dashboard_plots.png"))  # type: ignore[attr-defined]
    assert (ARTIFACTS / "dashboard_top.png").stat().st_size > 10_000
