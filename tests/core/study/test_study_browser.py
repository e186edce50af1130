"""A participant's whole session in a real headless Chromium (as tests/core/reports/render/
test_dashboard_browser.py drives it): consent, items answered by typing, the tab closed and the link
opened again in a new one (the session resumes at the next item), the end page. The stored answers
equal what was typed; no page source holds the gold or any text after the prefix; no script payload
in the trace text runs. Skipped with a message only when /usr/bin/chromium is absent."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from legival_core.store import Store
from legival_core.store import study as reads
from legival_core.study.served import ServedStudy
from legival_core.study.server import make_study_server
from tests.core.study.server_store import STUDY, Served, leaks, make_served_study

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists() or not CHROMEDRIVER.exists(),
    reason="needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)",
)


@pytest.fixture(scope="module")
def site() -> Iterator[tuple[Served, str]]:
    with tempfile.TemporaryDirectory(prefix="legival-study-browser-") as tmp:
        served = make_served_study(Path(tmp) / "s.duckdb", participants=2, per_participant=3, attention=1)
        with Store(served.db, read_only=True) as store:
            study = ServedStudy.load(store, STUDY)
        try:
            with make_study_server(study, served.key) as server:
                yield served, server.url.rstrip("/")
        finally:
            study.close()


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="legival-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1000,900"):
        opts.add_argument(flag)
    d = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _wait_for(d: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(d, 30).until(lambda x: x.find_elements(By.CSS_SELECTOR, css))[0]


def _at_item(d: Any, position: int) -> None:
    """Wait until the page shown is the item at `position` (the previous page may still be there)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(d, 30, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(
        lambda x: x.find_element(By.NAME, "position").get_attribute("value") == str(position))


def test_a_participant_session_in_chromium_with_a_closed_tab(driver: Any, site: tuple[Served, str, Store]) -> None:
    from selenium.webdriver.common.by import By

    served, base = site
    code = "P01"
    link = f"{base}/p/{served.token(code)}"
    total = sum(1 for r in served.plan if r["code"] == code)
    typed: dict[int, str] = {}
    driver.get(link)
    assert "Before you start" in driver.page_source
    _wait_for(driver, "#agree").click()
    for step in range(total):
        _at_item(driver, step)
        position = step
        src = driver.page_source
        assert leaks(served, code, position, src) == [], position
        assert driver.execute_script("return window.__xss") is None and "<script>" not in src
        bar = driver.find_element(By.ID, "progress")
        assert (bar.get_attribute("value"), bar.get_attribute("max")) == (str(position), str(total))
        assert bar.get_attribute("aria-label") == f"Progress: item {position + 1} of {total}"
        typed[position] = f"my answer {position}: <i>{position * 7}</i>"
        driver.find_element(By.ID, "answer").send_keys(typed[position])
        if position % 2 == 0:
            driver.find_element(By.CSS_SELECTOR, f'input[name="rating"][value="{position + 2}"]').click()
        driver.find_element(By.ID, "submit").click()
        if step == 0:  # close the tab after the first answer, open the link again in a new one
            _at_item(driver, 1)
            old = driver.current_window_handle
            driver.switch_to.new_window("tab")
            driver.switch_to.window(old)
            driver.close()
            driver.switch_to.window(driver.window_handles[0])
            driver.get(link)
            _at_item(driver, 1)  # resumed at the next item, no second consent
    _wait_for(driver, "#done")
    assert "Thank you" in driver.page_source
    driver.get(link)
    _wait_for(driver, "#done")
    with Store(served.db, read_only=True) as store:  # as `legival report` reads it while the server runs
        got = {r["item_id"]: r for r in reads.answers(store, STUDY).filter(code=code).to_dicts()}
    assert len(got) == total
    for position, text in typed.items():
        row = got[served.item(code, position)["item_id"]]
        assert row["answer"] == text
        assert row["rating"] == (position + 2 if position % 2 == 0 else None)
        assert row["seconds"] is not None and row["seconds"] >= 0
