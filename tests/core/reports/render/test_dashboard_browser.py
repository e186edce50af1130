"""The dashboard in a real headless Chromium (Debian `chromium` + `chromium-driver`), static and live.

The same store (the demo's real traces of 5 teachers, one trace full of script payloads, and one whose
student drops, its step events stored by the step_events stage) is shown twice: `index.html` written by
`legival report`'s code path, and the page of `legival serve` started as a subprocess on a free port. Every check runs on both pages, and a test compares what both offer.
Skipped with a message only when /usr/bin/chromium is absent; CI installs it. Screenshots are saved
under artifacts/ (git-ignored) for a human to look at.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from legival_core.reports.render.dashboard import CONTINUATION_CHARS, truncated
from legival_core.reports.stage import ReportConfig, build_reports
from legival_core.stages.step_events import compute_step_events
from legival_core.store import Store
from tests._cli import legival
from tests.conftest import REPO
from tests.core.reports.render.test_serve import serving
from tests.core.reports.test_demo_snapshot import load_demo_store

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = REPO / "artifacts"
RESAMPLES = 100
XSS_REASONING = (
    'First we add. <script>window.__xss=1</script> Then <img src=x onerror="window.__xss=2"> we check. '
    "Finally </script><!-- the answer is 4."
)
KINDS = ("static", "live")
REBOUND = "rebind.example"
"""A name the browser resolves to 127.0.0.1 (`--host-resolver-rules`): what a DNS-rebinding attack
makes of the attacker's own domain."""

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


DROP_STEPS = ("Start: 3 + 4 = 7.", 'Wait, <script>window.__xss=11</script> maybe <img src=x onerror="window.__xss=12"> 3 * 4 = 12?',
              "So the answer is 7.")
DROP_CONTINUATION = "</div><script>window.__xss=13</script> Then 3 * 4 is 7, " + "so the sum stays 7. " * 250
"""The continuation of the rollout that dropped: markup, and longer than the static file's cap."""


def _drop_trace(store: Store) -> str:
    """A trace (graded wrong: it takes no part in the transfer numbers) whose student is right after
    step 1 and wrong after step 2: the step_events stage stores a drop over step 2. Its text and the
    continuation carry script payloads; depth 3 overflowed; the answer at depth 0 was forced."""
    from legival_core.segment import SEGMENTER_VERSION

    tid, text = "drop-trace", " ".join(DROP_STEPS)
    store.insert_rows("problems", [{"dataset": "gsm8k", "problem_id": "p-drop", "question": "3 times 4?", "gold": "12"}])
    store.insert_rows("traces", [{"trace_id": tid, "teacher": "alpha", "dataset": "gsm8k", "problem_id": "p-drop",
                                  "reasoning": text, "answer_text": "7", "truncated": False}])
    starts = [text.index(sentence) for sentence in DROP_STEPS]
    store.insert_rows("steps", [{"trace_id": tid, "segmenter": SEGMENTER_VERSION, "idx": i, "start_char": a,
                                 "end_char": a + len(sentence)}
                                for i, (a, sentence) in enumerate(zip(starts, DROP_STEPS, strict=True), start=1)])
    rows = [(0, "ok", False, True, "7", "I think 7.", "The answer is 7."), (1, "ok", True, False, "12", "3 * 4 = 12.", None),
            (2, "ok", False, False, "7", DROP_CONTINUATION, None), (3, "overflow", None, False, None, None, None)]
    store.insert_rows("rollouts", [
        {"trace_id": tid, "student_key": "key-student-a", "k": k, "sample": 0, "m": 3, "bin": 17 * k, "status": status,
         "correct": correct, "forced": forced, "extracted": extracted, "grade_status": "ok" if status == "ok" else None,
         "continuation": cont, "forced_continuation": forced_cont}
        for k, status, correct, forced, extracted, cont, forced_cont in rows])
    return tid


MONITOR_XSS = '<img src=x onerror="window.__xss=21">'


def _monitorability_rows(store: Store) -> None:
    """Hint interventions of one teacher (3 problems x 2 arms x 3 samples) read by two monitors, one
    named with a script payload; and early answers of a reader on the demo's transfer traces (its
    rows copied from a student's rollouts: correct at full length, wrong before)."""
    from tests._sql import rows

    samples = []
    for p in range(3):
        for arm in (0, 1):
            for i in range(3):
                hit = arm == 1 and (p < 2 or i == 0)
                samples.append({"unit_key": f"u{p}{arm}{i}", "teacher": "alpha", "dataset": "gsm8k",
                                "problem_id": f"p{p}", "cue": "sycophancy" if arm else "", "arm": arm, "sample": i,
                                "target": "7", "gold": "5", "question": "q", "prompt": "p", "reasoning": "r",
                                "answer_text": "a", "extracted": "7" if hit else "5", "hit_target": hit,
                                "correct": not hit, "finish_reason": "stop", "model": "m", "decoding": "{}"})
    store.insert_rows("intervention_traces", samples)
    store.insert_rows("hint_verdicts", [
        {"verdict_key": f"{m}:{s['unit_key']}", "unit_key": s["unit_key"], "monitor": m, "monitor_key": m,
         "cue": "sycophancy", "scope": "cot", "verdict": bool(s["hit_target"]) and (m == "lexical" or s["sample"] > 0),
         "status": "ok", "response": None} for m in ("lexical", MONITOR_XSS) for s in samples])
    key = rows(store, "SELECT min(student_key) FROM rollouts")[0][0]
    rows(store, "INSERT INTO early_answers SELECT * REPLACE ('key-early' AS student_key, k = m AS correct, "
                "true AS forced, '' AS continuation) FROM rollouts WHERE student_key = ?", [key])
    store.insert_rows("students", [{"student_key": "key-early", "name": "early-reader", "model": "m",
                                    "decoding": "{}", "prompt_version": "v", "profile": "spec"}])


@pytest.fixture(scope="module")
def pages() -> Iterator[dict[str, str]]:
    """The two pages of one store: {"static": file URL of index.html, "live": legival serve's URL, "db"}."""
    tmp = Path(tempfile.mkdtemp(prefix="legival-dash-"))
    db = tmp / "s.duckdb"
    load_demo_store(db)
    with Store(db) as store:
        _xss_trace(store)
        _drop_trace(store)
        _monitorability_rows(store)
    # grades under the current grader version (the demo's tables may predate a grader bump)
    r = legival("grade", "--db", str(db), cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    with Store(db) as store:  # the step events, as `legival step-events --db DB` stores them
        compute_step_events(store)
    try:
        with serving(db, "--resamples", str(RESAMPLES)) as live:  # builds while the static page is written
            with Store(db, read_only=True) as store:
                build_reports(store, tmp / "out", ReportConfig(resamples=RESAMPLES))
            yield {"static": (tmp / "out" / "index.html").as_uri(), "live": live + "/", "db": str(db)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="legival-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,900",
                 f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _open(d: Any, url: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d.set_window_size(1280, 900)
    d.get_log("browser")  # each check starts with an empty console and sees the page load's messages
    d.get(url)
    WebDriverWait(d, 30).until(lambda x: x.find_elements(By.CSS_SELECTOR, "#rank-table tbody tr")
                               and x.find_elements(By.CSS_SELECTOR, "#trace-view .legend"))


def _severe(d: Any) -> list[dict[str, object]]:
    return [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]


def _data(d: Any) -> dict[str, Any]:
    out: dict[str, Any] = d.execute_script("return JSON.parse(document.getElementById('legival-data').textContent)")
    return out


def _offers(d: Any) -> dict[str, Any]:
    """What the page shows and offers, read from the DOM."""
    return d.execute_script("""
        const keys = (sel) => Array.from(document.querySelectorAll(sel)).map((e) => e.getAttribute('data-key'));
        return {
          rank_columns: keys('#rank-table thead th'),
          pareto_x: Array.from(document.querySelectorAll('#px option')).map((o) => o.value),
          pareto_y: Array.from(document.querySelectorAll('#py option')).map((o) => o.value),
          corr_shown: keys('#corr-grid thead th[data-key]'),
          corr_extra: Array.from(document.querySelectorAll('#corr-picker input')).map((i) => i.value),
          td_columns: keys('#td-table thead th'),
          coverage_rows: document.querySelectorAll('#coverage-table tbody tr').length,
          coverage_stages: Array.from(document.querySelectorAll('#coverage-table thead th')).map((t) => t.textContent),
          curves: Array.from(document.querySelectorAll('#curve-toggles label')).map((l) => l.getAttribute('data-teacher')),
        };""")


LABEL_OVERLAPS = """
    const px = document.getElementById('px'), py = document.getElementById('py');
    const opts = Array.from(px.options).map((o) => o.value), pairs = arguments[0], bad = [];
    let checked = 0;
    for (const [i, j] of pairs) {
      if (i >= opts.length || j >= opts.length) continue;
      px.value = opts[i]; px.dispatchEvent(new Event('change'));
      py.value = opts[j]; py.dispatchEvent(new Event('change'));
      const svg = document.querySelector('#pareto-plot svg');
      if (!svg) continue;
      const frame = svg.getBoundingClientRect();
      const boxes = Array.from(svg.querySelectorAll('text.plabel')).map((t) => [t.textContent, t.getBoundingClientRect()]);
      checked += 1;
      boxes.forEach(([name, b], k) => {
        if (b.left < frame.left - 0.5 || b.right > frame.right + 0.5 || b.top < frame.top - 0.5 || b.bottom > frame.bottom + 0.5)
          bad.push(opts[i] + ' x ' + opts[j] + ': ' + name + ' clipped');
        boxes.slice(k + 1).forEach(([other, c]) => {
          const w = Math.min(b.right, c.right) - Math.max(b.left, c.left), h = Math.min(b.bottom, c.bottom) - Math.max(b.top, c.top);
          if (w > 0.5 && h > 0.5) bad.push(opts[i] + ' x ' + opts[j] + ': ' + name + ' overlaps ' + other);
        });
      });
    }
    return {checked, bad};"""


def _hover_tip(d: Any, element: Any) -> dict[str, Any]:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(d).move_to_element(element).perform()
    return d.execute_script("""
        const t = document.getElementById('tip'), r = t.getBoundingClientRect();
        return {shown: getComputedStyle(t).display !== 'none', left: r.left, right: r.right, top: r.top,
                bottom: r.bottom, vw: document.documentElement.clientWidth, vh: document.documentElement.clientHeight,
                text: t.textContent};""")


def _inside(tip: dict[str, Any]) -> bool:
    return bool(tip["shown"]) and tip["left"] >= 0 and tip["top"] >= 0 and tip["right"] <= tip["vw"] and tip["bottom"] <= tip["vh"]


@pytest.mark.parametrize("kind", KINDS)
def test_page_renders_tables_plots_and_panels(driver: Any, pages: dict[str, str], kind: str) -> None:
    from selenium.webdriver.common.by import By

    d = driver
    _open(d, pages[kind])
    data = _data(d)
    assert data["meta"]["live"] is (kind == "live")
    n_teachers = len(data["teachers"])
    assert len(d.find_elements(By.CSS_SELECTOR, "#rank-table tbody tr")) == n_teachers == 6
    offers = _offers(d)
    assert offers["rank_columns"][0] == "teacher" and {"accuracy", "fotu", "token_len_median"} <= set(offers["rank_columns"])
    # the paper's metrics are shown first, the others can be added; no metric without a value
    corr = data["correlations"]
    assert offers["corr_shown"] == corr["default"] and "fotu" in corr["default"]
    assert set(offers["corr_extra"]) == set(corr["metrics"]) - set(corr["default"])
    assert "n_dimensions" not in corr["metrics"]
    for m in corr["metrics"]:
        i = corr["metrics"].index(m)
        assert any(v is not None for v in (t.get(m) for t in data["teachers"])), m
        if m in corr["constant"]:
            assert corr["rho"][i][i] is None
    constant_shown = [m for m in corr["default"] if m in corr["constant"]]
    assert constant_shown  # the demo's regression rate is 0 for every teacher
    diag = d.execute_script("""
        const rows = Array.from(document.querySelectorAll('#corr-grid tbody tr'));
        return rows.map((r, i) => r.children[i + 1].textContent);""")
    for m, cell in zip(offers["corr_shown"], diag, strict=True):
        assert cell == ("const" if m in corr["constant"] else "1.00"), (m, cell)
    if offers["corr_extra"]:
        d.execute_script("document.querySelector('#corr-picker details').open = true;"
                         "document.querySelector('#corr-picker input').click()")
        assert len(_offers(d)["corr_shown"]) == len(corr["default"]) + 1

    # the five figures, the curves with their bands
    imgs = d.find_elements(By.CSS_SELECTOR, "#figs img")
    assert {i.get_attribute("data-name") for i in imgs} == {
        "pareto.png", "correlations.png", "tu_curves.png", "redundancy_elbow.png", "rank_table.png"}
    assert all(d.execute_script("return arguments[0].naturalWidth", i) > 100 for i in imgs)
    # the demo's five teachers and alpha, whose xss-trace is graded correct and, once the step_events stage's
    # segment requirement has counted its steps, is a transfer trace with depths 0 and m
    assert len(d.find_elements(By.CSS_SELECTOR, "#curve-plot svg polyline")) == len(data["curves"]) == 6

    # one number format per column of the rank and teacher x dataset tables
    decimals = d.execute_script("""
        const out = {};
        for (const id of ['rank-table', 'td-table']) {
          const t = document.getElementById(id), heads = Array.from(t.querySelectorAll('thead th'));
          heads.forEach((h, c) => {
            const ds = new Set();
            t.querySelectorAll('tbody tr').forEach((r) => {
              const node = r.children[c].firstChild, s = node && node.nodeType === 3 ? node.nodeValue : '';
              if (/^-?[0-9]+([.][0-9]+)?$/.test(s)) ds.add(s.includes('.') ? s.split('.')[1].length : 0);
            });
            out[id + ':' + h.getAttribute('data-key')] = Array.from(ds);
          });
        }
        return out;""")
    assert all(len(v) <= 1 for v in decimals.values()), {k: v for k, v in decimals.items() if len(v) > 1}

    # sorting by a column orders the rows by rank
    d.execute_script("document.querySelector('#rank-table thead th[data-key=\"accuracy\"]').click()")
    first = d.find_element(By.CSS_SELECTOR, "#rank-table tbody tr td:nth-child(2) .rank")
    assert first.text == "1"

    # coverage panel: one row per teacher x dataset, the command of what was not run
    assert offers["coverage_rows"] == len({(r["teacher"], r["dataset"]) for r in data["coverage"]}) == 6
    assert {"grade", "transfer"} <= set(offers["coverage_stages"])
    assert "legival" in d.find_element(By.CSS_SELECTOR, "#coverage-missing code").text
    assert _severe(d) == []


@pytest.mark.parametrize("kind", KINDS)
def test_pareto_labels_never_overlap(driver: Any, pages: dict[str, str], kind: str) -> None:
    d = driver
    _open(d, pages[kind])
    pairs = [(i, j) for i in range(7) for j in range(7) if i != j]
    res = d.execute_script(LABEL_OVERLAPS, pairs)
    assert res["checked"] >= 20 and res["bad"] == []
    # non-negative metrics: no tick below 0; the plot fills its card's width, also after a resize
    d.execute_script("""const px = document.getElementById('px'), py = document.getElementById('py');
        px.value = 'token_len_median'; px.dispatchEvent(new Event('change'));
        py.value = 'fotu'; py.dispatchEvent(new Event('change'));""")
    ticks = d.execute_script("return Array.from(document.querySelectorAll('#pareto-plot svg text:not(.plabel)'))"
                             ".map((t) => t.textContent).filter((s) => /^-?[0-9.]+$/.test(s)).map(Number)")
    assert ticks and min(ticks) == 0
    for width in (1280, 900):
        d.set_window_size(width, 900)
        d.execute_script("return new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
        fill = d.execute_script("const h = document.getElementById('pareto-plot'), s = h.querySelector('svg');"
                                "return [s.getBoundingClientRect().width, h.clientWidth]")
        assert abs(fill[0] - fill[1]) <= 2, (width, fill)
        assert d.execute_script(LABEL_OVERLAPS, [(0, 5)])["bad"] == []
    assert _severe(d) == []


@pytest.mark.parametrize("kind", KINDS)
def test_layout_tooltips_and_sample_sizes(driver: Any, pages: dict[str, str], kind: str) -> None:
    from selenium.webdriver.common.by import By

    d = driver
    _open(d, pages[kind])
    # the rank table scrolls sideways under a sticky teacher column
    d.execute_script("document.getElementById('ranks').scrollIntoView()")
    geo = d.execute_script("""
        const box = document.querySelector('#ranks .scroll'); box.scrollLeft = box.scrollWidth;
        const cell = document.querySelector('#rank-table tbody td');
        return [box.scrollWidth > box.clientWidth, cell.getBoundingClientRect().left - box.getBoundingClientRect().left,
                getComputedStyle(cell).position];""")
    assert geo[0] and abs(geo[1]) <= 2 and geo[2] == "sticky"
    # a tooltip at the right edge stays inside the viewport
    last = d.find_elements(By.CSS_SELECTOR, "#rank-table tbody tr:first-child td")
    ci_cell = next(td for td in reversed(last) if td.find_elements(By.CSS_SELECTOR, ".rank"))
    d.execute_script("arguments[0].scrollIntoView({inline: 'end', block: 'center'})", ci_cell)
    tip = _hover_tip(d, ci_cell)
    assert _inside(tip) and "rank" in tip["text"], tip
    # the rightmost Pareto point
    pts = d.find_elements(By.CSS_SELECTOR, "#pareto-plot circle.pt")
    right = max(pts, key=lambda p: float(p.get_attribute("cx")))
    d.execute_script("arguments[0].scrollIntoView({block: 'end'})", right)
    tip = _hover_tip(d, right)
    assert _inside(tip) and right.get_attribute("data-teacher") in tip["text"], tip

    # n per cell; values resting on fewer than 10 traces are flagged, with a tooltip saying so
    data = _data(d)
    low = [r for r in data["coverage"] if r["status"] == "computed" and r["n"] < data["meta"]["min_n"]]
    assert any(r["metric"] == "fotu" for r in low)  # FOTU rests on 2 (trace, student) pairs per teacher
    td_n = d.find_elements(By.CSS_SELECTOR, "#td-table tbody .n")
    assert td_n and any("low" in (s.get_attribute("class") or "") for s in td_n)
    flagged = d.find_element(By.CSS_SELECTOR, "#td-table tbody .n.low")
    d.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", flagged)
    tip = _hover_tip(d, flagged.find_element(By.XPATH, ".."))
    assert _inside(tip) and "fewer than 10" in tip["text"], tip
    assert d.find_elements(By.CSS_SELECTOR, "#rank-table .lown")
    assert d.find_elements(By.CSS_SELECTOR, "#curve-toggles .n.low")

    # nav links land with the section heading below the sticky nav
    for target in ("corr", "coverage", "browser"):
        d.find_element(By.CSS_SELECTOR, f"nav a[href='#{target}']").click()
        top, nav_bottom = d.execute_script(
            "return [document.querySelector('#' + arguments[0] + ' h2').getBoundingClientRect().top,"
            " document.querySelector('nav').getBoundingClientRect().bottom]", target)
        assert top >= nav_bottom, (target, top, nav_bottom)
    assert _severe(d) == []


@pytest.mark.parametrize("kind", KINDS)
def test_trace_view_answer_and_xss(driver: Any, pages: dict[str, str], kind: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = driver
    _open(d, pages[kind])
    # a demo trace (no response text in its file): the extracted answer, its grade and the gold
    _pick_teacher(d, "gpt-oss-20b")
    tid, answer = d.execute_script("""
        const sel = document.getElementById('bt-trace');
        return [sel.value, document.getElementById('answer-box').textContent];""")
    assert tid and "extracted answer:" in answer and "(none found)" not in answer
    assert ("\u2713 correct" in answer or "\u2717 incorrect" in answer) and "grader gsm8k@" in answer
    assert "gold answer:" in answer
    assert d.find_elements(By.CSS_SELECTOR, "#trace-view .steps li")
    # a trace with rollouts: the students' answers per depth
    d.execute_script("""const s = document.getElementById('bt-trace');
        s.value = Array.from(s.options).find((o) => o.textContent.includes('rollouts')).value;
        s.dispatchEvent(new Event('change'));""")
    WebDriverWait(d, 20).until(lambda x: "k = 0" in x.find_element(By.ID, "trace-view").text)

    d.execute_script("return window.legivalShowTrace('xss-trace')")
    WebDriverWait(d, 20).until(lambda x: "xss-trace" in x.find_element(By.ID, "trace-view").text)
    view = d.find_element(By.ID, "trace-view")
    text = view.text
    assert "<script>window.__xss=1</script>" in text
    assert 'onerror="window.__xss=2"' in text
    assert "</script><!-- the answer is 4." in text
    assert "<script>window.__xss=3</script>" in text  # the question
    assert '<img src=x onerror="window.__xss=4">' in text  # the response
    assert '<svg onload="window.__xss=5">' in text  # a student's answer at a prefix
    assert "grade:" in text and "gold answer:" in text
    assert len(view.find_elements(By.CSS_SELECTOR, ".steps li")) == 3
    assert not view.find_elements(By.TAG_NAME, "img") and not view.find_elements(By.TAG_NAME, "script")
    assert not view.find_elements(By.TAG_NAME, "svg")
    assert d.execute_script("return typeof window.__xss") == "undefined"
    assert _severe(d) == []

    if kind == "static":
        _pick_teacher(d, "gpt-oss-20b")
        _screenshots(d)


@pytest.mark.parametrize("kind", KINDS)
def test_step_explorer_drop_marker_keyboard_and_step_effects(driver: Any, pages: dict[str, str], kind: str) -> None:
    """Issue 41: a click on the drop marker shows that rollout's continuation (capped in the static
    file, whole in the live one), Enter on the focused marker does the same, the steps that caused the
    drop say so in text, payloads in the trace and the continuation stay text; the step-effects section
    lists every (scope, feature) with its status and the caveat."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    d = driver
    _open(d, pages[kind])
    with Store(pages["db"], read_only=True) as store:
        stored = store._query("SELECT continuation FROM rollouts WHERE trace_id = 'drop-trace' AND k = 2")["continuation"][0]
    assert stored == DROP_CONTINUATION
    want = stored if kind == "live" else truncated(stored, CONTINUATION_CHARS)
    assert kind == "live" or want != stored

    d.execute_script("return window.legivalShowTrace('drop-trace')")
    WebDriverWait(d, 20).until(lambda x: x.find_elements(By.CSS_SELECTOR, "#trace-view button.marker"))
    view = d.find_element(By.ID, "trace-view")
    markers = view.find_elements(By.CSS_SELECTOR, "button.marker")
    labels = [m.get_attribute("aria-label") for m in markers]
    assert labels == ["student key-student-a, depth 0: wrong, forced",
                      "student key-student-a, depth 1: correct, rise from depth 0",  # a rise is said like a drop
                      "student key-student-a, depth 2: wrong, drop from depth 1",
                      "student key-student-a, depth 3: overflow (the prompt did not fit the student's context)"]
    drop = view.find_element(By.CSS_SELECTOR, "button.marker.drop")
    assert drop.get_attribute("data-k") == "2" and "drop" in drop.text  # a cue in text, not colour alone
    # the drop is on the segment that caused it (step 2), in words
    steps = view.find_elements(By.CSS_SELECTOR, ".steps li")
    assert ["drop" in (li.get_attribute("class") or "").split() for li in steps] == [False, True, False]
    assert "\u25bc drop: key-student-a 1.00\u21920.00 (step 2)" in steps[1].text

    def panel() -> tuple[bool, str, str]:
        return d.execute_script("""const p = document.getElementById('rollout-panel');
            const c = p && p.querySelector('.continuation');
            return [!!p && !p.hidden, c ? c.textContent : '', p ? p.textContent : ''];""")

    drop.click()
    shown, continuation, text = panel()
    assert shown and continuation == want
    assert "extracted answer:" in text and "\u2717 7" in text
    assert "drop: correctness 1.00 at depth 1 \u2192 0.00 here, over step 2" in text
    assert "Step events: 2 segments, 1 drop, 1 rise" in view.text
    assert drop.get_attribute("aria-pressed") == "true"
    assert "key-student-a, depth 2" in d.find_element(By.ID, "explorer-status").get_attribute("textContent")
    drop.click()  # pressed again: closed
    assert not panel()[0] and drop.get_attribute("aria-pressed") == "false"
    # the keyboard: the marker takes the focus, Enter opens it
    markers[1].click()
    assert panel()[1] == "3 * 4 = 12."
    d.execute_script("arguments[0].focus()", drop)
    assert d.execute_script("return document.activeElement") == drop
    d.switch_to.active_element.send_keys(Keys.ENTER)
    shown, continuation, _ = panel()
    assert shown and continuation == want and drop.get_attribute("aria-pressed") == "true"
    assert markers[1].get_attribute("aria-pressed") == "false"
    # Escape closes the panel and gives the focus back to its marker
    d.switch_to.active_element.send_keys(Keys.ESCAPE)
    assert not panel()[0] and drop.get_attribute("aria-pressed") == "false"
    assert d.execute_script("return document.activeElement") == drop
    # valid list markup: every child of the steps list is an <li>, the depth groups inside them
    assert d.execute_script("return [...document.querySelectorAll('#trace-view ul.steps > *')]"
                            ".every((e) => e.tagName === 'LI')")
    # the forced answer at depth 0 is shown apart from the continuation
    markers[0].click()
    assert "The answer is 7." in d.find_element(By.CSS_SELECTOR, "#rollout-panel .forced-continuation").text
    # escaped: the payloads are text
    assert "<script>window.__xss=11</script>" in steps[1].text and 'onerror="window.__xss=12"' in steps[1].text
    drop.click()
    assert "<script>window.__xss=13</script>" in panel()[1]
    assert not view.find_elements(By.TAG_NAME, "img") and not view.find_elements(By.TAG_NAME, "script")
    assert d.execute_script("return typeof window.__xss") == "undefined"

    # the step-effects section: every (scope, feature), a status where a number is missing, the caveat
    effects = _data(d)["step_effects"]
    assert effects["ran"] is True and not d.find_elements(By.ID, "step-not-run")
    rows = d.find_elements(By.CSS_SELECTOR, "#step-effects-table tbody tr")
    assert len(rows) == len(effects["scopes"]) * len({e["feature"] for e in effects["effects"]}) > 0
    statuses = d.execute_script("return Array.from(document.querySelectorAll('#step-effects-table td[data-status]'))"
                                ".map((t) => [t.getAttribute('data-status'), t.textContent])")
    assert len(statuses) == len(effects["effects"])
    assert all(text == status for status, text in statuses if status != "computed")
    assert {s for s, _ in statuses} >= {"too few events: no segment"}
    assert "Association, not causation." in d.find_element(By.ID, "step-caveat").text
    assert _severe(d) == []


def _pick_teacher(d: Any, teacher: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d.execute_script("const s = document.getElementById('bt-teacher'); s.value = arguments[0];"
                     "s.dispatchEvent(new Event('change'));", teacher)
    WebDriverWait(d, 20).until(lambda x: teacher + " \u00b7" in x.find_element(By.ID, "trace-view").text
                               and x.find_elements(By.ID, "answer-box"))


def _screenshots(d: Any) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    d.set_window_size(1400, 1000)
    for name, section in (("dashboard_top", None), ("dashboard_plots", "pareto"), ("dashboard_correlations", "corr"),
                          ("dashboard_coverage", "td"), ("dashboard_trace_browser", "browser")):
        d.execute_script("arguments[0] ? document.getElementById(arguments[0]).scrollIntoView() : window.scrollTo(0, 0)",
                         section)
        d.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    assert (ARTIFACTS / "dashboard_top.png").stat().st_size > 10_000


def test_a_rebound_name_reads_nothing_from_the_live_server(driver: Any, pages: dict[str, str]) -> None:
    """DNS rebinding (issue 38 item 1): the attacker's page, at a name that now resolves to 127.0.0.1,
    is same-origin with the dashboard's port as far as the browser knows; the server refuses it for its
    Host, so neither the page nor its API give away a trace. The user's own names still work."""
    from urllib.parse import urlparse

    from selenium.webdriver.common.by import By

    d = driver
    port = urlparse(pages["live"]).port
    d.get(f"http://{REBOUND}:{port}/")
    assert "refused" in d.find_element(By.TAG_NAME, "body").text
    assert not d.find_elements(By.ID, "legival-data")
    got = d.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/api/traces?teacher=alpha&dataset=gsm8k').then(async (r) => done([r.status, await r.text()]))
          .catch((e) => done(['error', String(e)]));""")
    assert got[0] == 400 and "trace_id" not in got[1], got
    _open(d, f"http://localhost:{port}/")  # the same server under the user's own name
    assert _data(d)["meta"]["live"] is True


def test_static_and_live_pages_offer_the_same(driver: Any, pages: dict[str, str]) -> None:
    seen = {}
    for kind in KINDS:
        _open(driver, pages[kind])
        seen[kind] = _offers(driver)
        assert _severe(driver) == []
    assert seen["static"] == seen["live"]
    assert seen["static"]["pareto_x"] == seen["static"]["pareto_y"] and len(seen["static"]["pareto_x"]) >= 7


def test_pareto_png_names_do_not_overlap(pages: dict[str, str]) -> None:
    """pareto.png places the names by the page's rule: no two overlap, none leaves its axes, no axis
    of a non-negative metric goes below 0; the rule itself separates even coincident points."""
    from legival_core.reports.compute.build import compute_report
    from legival_core.reports.compute.pareto import place_labels
    from legival_core.reports.render.plots import pareto_figure

    boxes = [b for b, _ in place_labels([(100.0, 100.0)] * 6, [(90.0, 12.0)] * 6, (0, 0, 400, 300))]
    assert all(not _overlaps(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    with Store(pages["db"], read_only=True) as store:
        data = compute_report(store, ReportConfig(resamples=0))
    fig = pareto_figure(data)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        names = [t for t in ax.texts if t.get_text() in set(data.teacher_metrics["teacher"].to_list())]
        assert len(names) >= 4
        ext = [t.get_window_extent(renderer) for t in names]
        box = ax.bbox
        for i, e in enumerate(ext):
            assert e.x0 >= box.x0 - 1 and e.x1 <= box.x1 + 1 and e.y0 >= box.y0 - 1 and e.y1 <= box.y1 + 1
            assert all(not _overlaps((e.x0, e.y0, e.x1, e.y1), (f.x0, f.y0, f.x1, f.y1)) for f in ext[i + 1:])
        assert ax.get_xlim()[0] >= 0 and ax.get_ylim()[0] >= 0


def _overlaps(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


# --- a 300-character teacher name ---------------------------------------------------------------------

LONG_NAMES = ("Qwen/" + "x" * 280 + "-distilled-teacher-A", "Qwen/" + "x" * 280 + "-distilled-teacher-B",
              "<img src=x onerror=\"window.__xss=7\">" + "y" * 60, "alpha")
"""Two 300-character names that differ only at their end, a long one that is markup, a short one."""


@pytest.fixture(scope="module")
def long_names_page() -> Iterator[str]:
    """The static page of a synthetic store (every stage's rows, curves too) with `LONG_NAMES`."""
    from tests.synthetic import fill_synthetic

    tmp = Path(tempfile.mkdtemp(prefix="legival-dash-long-"))
    try:
        with Store(tmp / "s.duckdb") as store:
            fill_synthetic(store, teachers=LONG_NAMES, traces_per_cell=4, seed=2)
            build_reports(store, tmp / "out", ReportConfig(resamples=0))
        yield (tmp / "out" / "index.html").as_uri()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_300_character_teacher_is_drawn_by_its_short_label(driver: Any, long_names_page: str) -> None:
    """The Pareto labels and the curve toggles draw the figures' short label (at most 32 columns, the
    same as the PNGs'), as text, never markup; the tooltips keep the full name; no label overlaps
    another or leaves the plot."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from legival_core.reports.render.labels import WIDTH, short_labels, width_of

    d = driver
    d.set_window_size(1280, 900)
    d.get_log("browser")
    d.get(long_names_page)
    WebDriverWait(d, 30).until(lambda x: x.find_elements(By.CSS_SELECTOR, "#pareto-plot text.plabel")
                               and x.find_elements(By.CSS_SELECTOR, "#curve-toggles label"))
    labels = _data(d)["labels"]
    assert labels == short_labels(LONG_NAMES) and len(set(labels.values())) == len(LONG_NAMES)
    drawn = d.execute_script("""return Array.from(document.querySelectorAll('#pareto-plot text.plabel'))
        .map((t) => [t.getAttribute('data-teacher'), t.textContent, t.children.length]);""")
    assert sorted(t for t, _, _ in drawn) == sorted(LONG_NAMES)
    for teacher, text, children in drawn:
        assert text == labels[teacher] and width_of(text) <= WIDTH and children == 0, (teacher[:40], text)
    toggles = d.execute_script("""return Array.from(document.querySelectorAll('#curve-toggles label')).map((l) =>
        [l.getAttribute('data-teacher'), Array.from(l.childNodes).filter((n) => n.nodeType === 3).map((n) => n.nodeValue)]);""")
    assert sorted(t for t, _ in toggles) == sorted(LONG_NAMES)
    assert all(texts == [labels[t]] for t, texts in toggles), toggles
    # the full name where the user asks for it: the tooltips of a label, a point and a toggle
    long = LONG_NAMES[0]
    for selector in (f"#pareto-plot text.plabel[data-teacher='{long}']", f"#pareto-plot circle.pt[data-teacher='{long}']",
                     f"#curve-toggles label[data-teacher='{long}']"):
        node = d.find_element(By.CSS_SELECTOR, selector)
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", node)
        assert _hover_tip(d, node)["text"].startswith(long), selector
    res = d.execute_script(LABEL_OVERLAPS, [(i, j) for i in range(4) for j in range(4) if i != j])
    assert res["checked"] >= 6 and res["bad"] == []
    assert d.execute_script("return typeof window.__xss") == "undefined"
    assert not d.find_elements(By.CSS_SELECTOR, "#pareto-plot img, #curve-toggles img")
    assert _severe(d) == []


@pytest.mark.parametrize("kind", KINDS)
def test_monitorability_and_early_answering_sections(driver: Any, pages: dict[str, str], kind: str) -> None:
    """g-mean² per teacher x cue with its interval, the F1 table beside it, the monitors' agreement (a
    monitor named with a script payload shown as text), and early answering: its figure drawn and its
    areas beside the students' FOTU."""
    from selenium.webdriver.common.by import By

    d = driver
    _open(d, pages[kind])
    mon = d.find_element(By.ID, "pf-monitorability")
    heads = [h.text for h in mon.find_elements(By.CSS_SELECTOR, 'table[data-file="monitorability.csv"] thead th')]
    assert {"gmean2_mean", "gmean2_ci_low", "gmean2_ci_high", "status"} <= set(heads)
    cells = [c.text for c in mon.find_elements(By.CSS_SELECTOR, 'table[data-file="monitorability.csv"] tbody td')]
    assert "alpha" in cells and "sycophancy" in cells
    assert mon.find_elements(By.CSS_SELECTOR, 'table[data-file="teacher_metrics.csv"]')
    agree = mon.find_element(By.CSS_SELECTOR, 'table[data-file="agreement.csv"]')
    assert MONITOR_XSS in agree.text and d.execute_script("return window.__xss") is None
    early = d.find_element(By.ID, "pf-early")
    img = early.find_element(By.CSS_SELECTOR, 'img[data-name="early_answering.png"]')
    assert d.execute_script("return arguments[0].naturalWidth", img) > 100
    kinds = {c.text for c in early.find_elements(By.CSS_SELECTOR, "tbody td")}
    assert {"early_answer", "transfer", "early-reader"} <= kinds
    assert d.find_element(By.CSS_SELECTOR, 'a[href="#pf-early"]')
    assert _severe(d) == []
