"""The study app (legival_core/study/server.py) behind the real guard, through Starlette's test client:
consent, every item answered, the end page; nothing after the prefix and no gold in any response;
replays, forged forms, other participants' tokens, oversized and hostile answers refused or escaped."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from legival_core.safe_csv import read_csv
from legival_core.store import Store
from legival_core.store import study as reads
from legival_core.study.served import ServedStudy
from legival_core.study.server import ServerStats, study_app
from legival_core.web.guard import AllowedHosts, HostGuard
from tests.core.study.server_store import STUDY, XSS, Served, leaks, make_served_study

ORIGIN = {"origin": "http://127.0.0.1"}


class Client:
    """The app over a study read from the store once (as `legival study serve` does); `store` is a fresh
    read-only open of the store each time, which sees what the app committed to the journal (as
    `legival report` does while the server runs)."""

    def __init__(self, served: Served) -> None:
        from starlette.testclient import TestClient

        self.served, self.stats = served, ServerStats()
        self._store: Store | None = None
        self.now = [1_700_000_000.0]
        with Store(served.db, read_only=True) as store:
            self.study = ServedStudy.load(store, STUDY)
        app = study_app(self.study, served.key, stats=self.stats, clock=lambda: self.now[0])
        self.http = TestClient(HostGuard(app, AllowedHosts.for_server("127.0.0.1")), base_url="http://127.0.0.1",
                               follow_redirects=False)

    @property
    def store(self) -> Store:
        self.close()
        self._store = Store(self.served.db, read_only=True)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with tempfile.TemporaryDirectory(prefix="legival-study-") as tmp:
        served = make_served_study(Path(tmp) / "s.duckdb", participants=5, per_participant=3, attention=1)
        c = Client(served)
        try:
            yield c
        finally:
            c.close()
            c.study.close()


def field(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found, (name, page[:2000])
    return found.group(1)


def post(c: Client, path: str, data: dict[str, str], **kw: Any) -> Any:
    return c.http.post(path, data=data, headers={**ORIGIN, **kw.pop("headers", {})}, **kw)


def consent(c: Client, code: str) -> None:
    tok = c.served.token(code)
    page = c.http.get(f"/p/{tok}").text
    r = post(c, f"/p/{tok}/consent", {"csrf": field(page, "csrf")})
    assert r.status_code == 303 and r.headers["location"] == f"/p/{tok}"


def form(page: str) -> dict[str, str]:
    return {n: field(page, n) for n in ("csrf", "position", "shown_at")}


def test_a_participant_consents_answers_every_item_and_reaches_the_end(client: Client) -> None:
    c, code = client, "P01"
    tok = c.served.token(code)
    first = c.http.get(f"/p/{tok}")
    assert first.status_code == 200 and "Before you start" in first.text
    consent_text = reads.study_row(c.store, STUDY)["consent_text"]  # type: ignore[index]
    assert consent_text.splitlines()[0] in first.text
    assert "content-security-policy" in first.headers and first.headers["x-frame-options"] == "DENY"
    consent(c, code)
    total = sum(1 for r in c.served.plan if r["code"] == code)
    for position in range(total):
        r = c.http.get(f"/p/{tok}")
        assert r.status_code == 200 and f"Item {position + 1} of {total}" in r.text
        assert f'<progress id="progress" value="{position}" max="{total}"' in r.text
        assert leaks(c.served, code, position, r.text) == []
        assert "<script>" not in r.text and "&lt;script&gt;" in r.text  # the question's payload, escaped
        k = int(str(c.served.item(code, position)["k"]))
        tid = str(c.served.item(code, position)["trace_id"])
        if k:
            assert c.served.steps[tid][k - 1].split(" and go on")[0] in r.text
        else:
            assert 'id="no-prefix"' in r.text
        c.now[0] += 10 + position
        sent = post(c, f"/p/{tok}/answer", {**form(r.text), "answer": f"answer {position}", "rating": "4"})
        assert sent.status_code == 303, sent.text
        assert leaks(c.served, code, position, sent.text) == []
    end = c.http.get(f"/p/{tok}")
    assert "Thank you" in end.text and f'value="{total}" max="{total}"' in end.text
    got = reads.answers(c.store, STUDY).filter(code=code).sort("submitted_at")
    assert got["answer"].to_list() == [f"answer {p}" for p in range(total)]
    assert got["seconds"].to_list() == [10.0 + p for p in range(total)]
    assert got["rating"].to_list() == [4] * total


def test_replays_forged_forms_and_other_participants_are_refused_with_nothing_stored(client: Client) -> None:
    c = client
    consent(c, "P02")
    tok = c.served.token("P02")
    page = c.http.get(f"/p/{tok}").text
    good = {**form(page), "answer": "7"}
    before = reads.answers(c.store, STUDY).height
    cases = [
        ({k: v for k, v in good.items() if k != "csrf"}, tok, 403, "security token"),
        ({**good, "csrf": good["csrf"][:-2] + "AA"}, tok, 403, "security token"),
        ({**good, "csrf": field(c.http.get(f"/p/{c.served.token('P03')}").text, "csrf")}, tok, 403, "security token"),
        ({**good, "shown_at": "1." + good["shown_at"].split(".")[1]}, tok, 400, "damaged"),
        ({**good, "answer": "x" * 2001}, tok, 413, "at most 2,000 characters"),
        ({**good, "answer": "   "}, tok, 400, "Type an answer"),
        ({**good, "rating": "9"}, tok, 400, "1 to 5"),
        (good, "not-a-token", 404, "not valid"),
        (good, c.served.admin_token, 404, "not valid"),
    ]
    for data, path_token, status, says in cases:
        r = post(c, f"/p/{path_token}/answer", data)
        assert (r.status_code, says in r.text) == (status, True), (data.keys(), r.status_code, r.text)
        assert status != 404 or path_token not in r.text  # an unknown link is not echoed
    assert reads.answers(c.store, STUDY).height == before
    no_origin = c.http.post(f"/p/{tok}/answer", data=good)
    assert no_origin.status_code == 403 and "own pages" in no_origin.text
    elsewhere = c.http.post(f"/p/{tok}/answer", data=good, headers={"origin": "http://evil.example"})
    assert elsewhere.status_code == 403
    assert post(c, f"/p/{tok}/answer", good).status_code == 303
    replay = post(c, f"/p/{tok}/answer", {**good, "answer": "8"})
    assert replay.status_code == 409 and "already recorded" in replay.text
    mine = reads.answers(c.store, STUDY).filter(code="P02")
    assert mine["answer"].to_list() == ["7"]
    assert c.stats.answers >= 1 and c.stats.refused >= len(cases) + 1


def test_a_megabyte_answer_is_refused_by_size(client: Client) -> None:
    c = client
    consent(c, "P03")
    tok = c.served.token("P03")
    page = c.http.get(f"/p/{tok}").text
    r = post(c, f"/p/{tok}/answer", {**form(page), "answer": "y" * 1_000_000})
    assert r.status_code == 413 and "at most 2,000 characters" in r.text
    r = post(c, f"/p/{tok}/answer", {**form(page), "answer": "y" * (1 << 20)})
    assert r.status_code == 413 and "at most 1048576 bytes" in r.text
    assert reads.answers(c.store, STUDY).filter(code="P03").height == 0


def test_html_answer_is_stored_verbatim_and_escaped_on_the_admin_page_and_export(client: Client) -> None:
    c = client
    consent(c, "P04")
    tok = c.served.token("P04")
    page = c.http.get(f"/p/{tok}").text
    typed = f'{XSS}</td></table>"quoted" & more'
    assert post(c, f"/p/{tok}/answer", {**form(page), "answer": typed}).status_code == 303
    assert reads.answers(c.store, STUDY).filter(code="P04")["answer"].to_list() == [typed]
    admin = c.http.get(f"/admin/{c.served.admin_token}")
    assert admin.status_code == 200 and XSS not in admin.text and "<script>" not in admin.text
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in admin.text
    assert re.search(r"<td[^>]*>P04</td><td[^>]*>1/4</td>", admin.text)
    csv = c.http.get(f"/admin/{c.served.admin_token}/export.csv")
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert "P04" in csv.text and "window.__xss=1" in csv.text
    formula = '=HYPERLINK("http://x.invalid","click")'
    assert post(c, f"/p/{tok}/answer", {**form(c.http.get(f"/p/{tok}").text), "answer": formula}).status_code == 303
    exported = c.http.get(f"/admin/{c.served.admin_token}/export.csv").text
    assert "'" + formula.replace('"', '""') in exported and "\n" + formula not in exported
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a.csv").write_text(exported, encoding="utf-8")
        back = read_csv(Path(tmp) / "a.csv")
    assert sorted(back.filter(code="P04")["answer"].to_list()) == sorted([typed, formula])
    for path in (f"/admin/{c.served.token('P04')}", "/admin/nope", f"/admin/{c.served.token('P04')}/export.csv"):
        r = c.http.get(path)
        assert r.status_code == 404 and "nope" not in r.text and c.served.token("P04") not in r.text


def test_unknown_token_is_404_without_echo_and_other_hosts_are_refused(client: Client) -> None:
    c = client
    for path in ("/p/AAAAAAAAAAAAAAAAAAAAAA", "/p/<script>x", "/p/../admin", "/nothing"):
        r = c.http.get(path)
        assert r.status_code == 404 and "AAAAAAAAAAAAAAAAAAAAAA" not in r.text and "<script>x" not in r.text
    r = c.http.get(f"/p/{c.served.token('P01')}", headers={"host": "evil.example"})
    assert r.status_code == 400


def raw_post(c: Client, tok: str, body: bytes) -> Any:
    return c.http.post(f"/p/{tok}/answer", content=body,
                       headers={**ORIGIN, "content-type": "application/x-www-form-urlencoded"})


def test_duplicate_fields_bad_utf8_and_control_characters_are_refused_clearly(client: Client) -> None:
    """A field given twice is refused (never reduced to one of its values), a body that is not UTF-8 is
    named as such (not as a CSRF failure), an answer with NUL or another C0 control is refused; and
    the admin page isolates an answer's bidi overrides in <bdi>."""
    from urllib.parse import urlencode

    c = client
    consent(c, "P05")
    tok = c.served.token("P05")
    good = {**form(c.http.get(f"/p/{tok}").text), "answer": "7"}
    cases: list[tuple[bytes, int, str]] = [
        ((urlencode({**good, "rating": "2"}) + "&rating=5").encode(), 400, "The field rating is given twice"),
        ((urlencode(good) + "&answer=8").encode(), 400, "The field answer is given twice"),
        (urlencode(good).encode() + b"&rating=\xff", 400, "not UTF-8"),
        ((urlencode(good) + "&rating=%FF").encode(), 400, "not UTF-8"),
        (urlencode({**good, "answer": "4\x002"}).encode(), 400, "control character"),
        (urlencode({**good, "answer": "4\x1b[31m"}).encode(), 400, "control character"),
    ]
    for body, status, says in cases:
        r = raw_post(c, tok, body)
        assert (r.status_code, says in r.text, "security token" in r.text) == (status, True, False), (body, r.text)
    assert reads.answers(c.store, STUDY).filter(code="P05").height == 0
    typed = "\u202e42\r\n\tthen 7"
    assert raw_post(c, tok, urlencode({**good, "answer": typed}).encode()).status_code == 303
    assert reads.answers(c.store, STUDY).filter(code="P05")["answer"].to_list() == [typed]
    admin = c.http.get(f"/admin/{c.served.admin_token}").text
    assert "<bdi>\u202e42" in admin


def test_open_is_recorded_once_per_item_and_never_on_head(client: Client) -> None:
    c = client
    tok = c.served.token("P05")
    before = c.store._run("SELECT count(*) FROM study_events WHERE code = 'P05' AND event = 'open'")[0][0]
    for _ in range(50):
        c.now[0] += 1
        assert c.http.get(f"/p/{tok}").status_code == 200
        assert c.http.head(f"/p/{tok}").status_code == 200
    rows = c.store._run("SELECT detail FROM study_events WHERE code = 'P05' AND event = 'open'")
    current = reads.next_item(c.store, STUDY, "P05")
    assert current is not None and [r[0] for r in rows].count(current.item_id) == 1  # 100 requests: one row
    assert before <= len(rows) <= before + 1 and len({r[0] for r in rows}) == len(rows)
