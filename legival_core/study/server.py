"""The study server (docs/study.md "Serving a study"): participants answer in a browser.

A Starlette app (`study_app`) behind `web.guard.HostGuard`, served by `web.server.LocalServer`, the
same pieces as `legival serve` (docs/security.md: Host allow-list, Origin on every POST, bounded
requests, no access log). Routes:

- `GET /p/{token}`: the consent page until the participant's `consent` event exists, then their
  current item (the store's position: the count of their answers, so a closed tab resumes), then the
  end page. `POST /p/{token}/consent` records consent; `POST /p/{token}/answer` stores one answer.
- `GET /admin/{token}`: progress per participant and per item, every answer (escaped);
  `GET /admin/{token}/export.csv`: the answers.

Why these choices:
- **Durability**: `record_answer` commits in its own transaction before the answer's POST is answered
  (303 to `GET /p/{token}`): a participant never sees the next item of an answer that is not on disk,
  so a `kill -9` loses nothing that was acknowledged.
- **One store, one lock**: the DuckDB connection is not thread-safe and Starlette runs blocking work on
  a thread pool, so every store access holds `store_lock`. A request does a few point reads and at most
  one small write (milliseconds): 30 participants at once do not queue noticeably
  (tests/cli/test_study_serve.py measures it).
- **CSRF**: every form carries HMAC(study key, "csrf", study, code), compared in constant time, on top of
  the guard's Origin check: a page elsewhere cannot post for a participant, nor one participant with
  another's form. Missing or wrong: 403, nothing stored.
- **Time on item** is measured by the server: the item page carries `shown_at` (server time, signed
  with the key), the answer's seconds are its arrival minus that; a client cannot forge it.
- **Blind, minimal pages**: the question and the prefix only (`transfer.rollout_plan.prefix_for`, the
  same cut the model students get), never the gold, the later steps, the teacher or the trace id; the
  form names the item by its position. Tokens travel only in URL paths, which nothing logs, and no
  answer echoes the path.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from legival_core.safe_csv import neutralised
from legival_core.segment import SEGMENTER_VERSION
from legival_core.store import study as reads
from legival_core.store.db import Store
from legival_core.study import pages
from legival_core.study.tokens import token_sha256
from legival_core.transfer.rollout_plan import prefix_for
from legival_core.types import Span, Steps
from legival_core.web.guard import AllowedHosts, HostGuard, Refused
from legival_core.web.server import HEAD_TIMEOUT_S, LocalServer, bind

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")
"""The pages need no script, image or outside resource: a payload that escaped escaping would still not run."""

PAGE_HEADERS = {"content-security-policy": CSP}
"""The guard adds the rest (docs/security.md), `Referrer-Policy: same-origin` among them: under
`no-referrer` a browser sends `Origin: null` with a form POST, which the guard's Origin check refuses."""

MAX_FORM_FIELDS = 16

CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""C0 control characters (and DEL) but tab, newline and carriage return: never typed, and a NUL cuts
an answer in C tools and some CSV readers; an answer holding one is refused (400)."""


class UnknownStudy(ValueError):
    """No study of that name in the store."""


@dataclass
class ServerStats:
    """What the command's closing line reports: answers stored this session, requests the app refused
    (the guard counts its own)."""

    answers: int = 0
    refused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, answers: int = 0, refused: int = 0) -> None:
        with self._lock:
            self.answers += answers
            self.refused += refused


def _mac(key: bytes, *parts: str) -> str:
    digest = hmac.new(key, "\x00".join(parts).encode(), hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def csrf_token(key: bytes, study: str, code: str) -> str:
    """The participant's (or admin's) form token: HMAC(key, csrf, study, code)."""
    return _mac(key, "csrf", study, code)


def sign_shown_at(key: bytes, study: str, code: str, position: int, at_ms: int) -> str:
    return f"{at_ms}.{_mac(key, 'shown', study, code, str(position), str(at_ms))}"


def verify_shown_at(key: bytes, study: str, code: str, position: int, value: str) -> int | None:
    """The signed time (ms since the epoch) of an item page, None when the value is not one we signed."""
    at, _, sig = value.partition(".")
    if not at.isascii() or not at.isdigit() or len(at) > 16:
        return None
    want = sign_shown_at(key, study, code, position, int(at)).partition(".")[2]
    return int(at) if hmac.compare_digest(sig.encode("ascii", "replace"), want.encode("ascii")) else None


def make_study_server(store: Store, name: str, key: bytes, *, host: str = "127.0.0.1", port: int = 0,
                      allow_hosts: Iterable[str] = (), on_refused: Refused | None = None,
                      stats: ServerStats | None = None, head_timeout_s: float = HEAD_TIMEOUT_S) -> LocalServer:
    """The study `name` of `store` on (host, port), not yet started (`UnknownStudy`, `BadHostName`
    before the port is bound; `PortInUse` at once)."""
    allowed = AllowedHosts.for_server(host, allow_hosts)
    app = study_app(store, name, key, stats=stats)
    sock = bind(host, port)
    try:
        return LocalServer(HostGuard(app, allowed, on_refused=on_refused), sock, head_timeout_s=head_timeout_s)
    except BaseException:
        sock.close()
        raise


def study_app(store: Store, name: str, key: bytes, *, stats: ServerStats | None = None,
              clock: Callable[[], float] = time.time, segmenter: str = SEGMENTER_VERSION) -> Any:
    """The Starlette app of the module docstring over a writable `store`."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Route

    row = reads.study_row(store, name)
    if row is None:
        raise UnknownStudy(name)
    profile = row["config"].get("profile", "spec")
    consent_text = row["consent_text"]
    plan = reads.assignments(store, name)
    totals: dict[str, int] = {}
    for code in plan["code"].to_list():
        totals[code] = totals.get(code, 0) + 1
    store_lock = threading.Lock()
    texts: dict[str, tuple[str, str]] = {}
    counted = stats if stats is not None else ServerStats()

    def html(body: str, status: int = 200) -> Response:
        return HTMLResponse(body, status_code=status, headers=PAGE_HEADERS)

    def refuse(status: int, title: str, text: str, back: str | None = None) -> Response:
        counted.add(refused=1)
        return html(pages.message(title, text, back), status)

    def not_found() -> Response:
        return refuse(404, "Not found", "This link is not valid. Check that you opened the whole link you were given.")

    def who(token: str, admin: bool) -> reads.Participant | None:
        with store_lock:
            p = reads.participant_by_token_hash(store, token_sha256(token))
        return p if p is not None and p.study == name and p.admin == admin else None

    def question_and_prefix(item_id: str) -> tuple[str, str]:
        """Cut once per item and kept (trace text never changes); the later steps stay here."""
        if item_id not in texts:
            t = reads.item_text(store, name, item_id, segmenter)
            if t is None or len(t.spans) != t.m:
                raise LookupError(f"item {item_id}: its trace or steps are missing from the store")
            steps = Steps(t.reasoning, tuple(Span(a, b) for a, b in t.spans))
            texts[item_id] = (t.question, prefix_for(steps, t.k, profile))
        return texts[item_id]

    def guarded(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """A failure answers 500 with a page that says nothing of the request; one line on stderr names
        the error's type (never the path: it holds a token)."""
        async def run(request: Request) -> Response:
            try:
                return await endpoint(request)
            except Exception as e:  # noqa: BLE001 - the server keeps serving; nothing of the request leaks
                print(f"warning: study server: a request failed ({type(e).__name__})", file=sys.stderr, flush=True)
                return html(pages.message("Something went wrong", "The server could not answer. Try again in a "
                                          "moment; your earlier answers are stored."), 500)
        return run

    async def form_of(request: Request) -> dict[str, str] | Response:
        """The urlencoded form (one value per field), or the refusal to answer: 403 when it is no form
        (as a forged one), 400 naming what is wrong with a form (not UTF-8, raw or percent-encoded; a
        field given twice, which is never silently reduced to one value; too many fields)."""
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return bad_csrf()
        try:
            raw = parse_qs((await request.body()).decode("utf-8"), keep_blank_values=True,
                           max_num_fields=MAX_FORM_FIELDS, strict_parsing=False, encoding="utf-8", errors="strict")
        except UnicodeDecodeError:
            return refuse(400, "Form refused", "The form is not UTF-8 text; nothing was stored. Open your link again "
                          "and answer from there.")
        except ValueError:
            return refuse(400, "Form refused", f"The form has more than {MAX_FORM_FIELDS} fields; nothing was stored.")
        twice = sorted(k for k, v in raw.items() if len(v) > 1)
        if twice:
            return refuse(400, "Form refused", f"The field {twice[0]} is given twice; nothing was stored. Open your "
                          "link again and answer from there.")
        return {k: v[0] for k, v in raw.items()}

    def csrf_ok(form: dict[str, str], p: reads.Participant) -> bool:
        return hmac.compare_digest(form.get("csrf", "").encode("utf-8"), csrf_token(key, name, p.code).encode())

    def bad_csrf() -> Response:
        return refuse(403, "Form refused", "This form is not valid for this link (its security token is missing or "
                      "wrong), so nothing was stored. Open your own link again and answer from there.")

    def participant_page(p: reads.Participant, token: str, head: bool = False) -> Response:
        with store_lock:
            if not reads.has_event(store, name, p.code, "consent"):
                return html(pages.consent(consent_text, f"/p/{token}/consent", csrf_token(key, name, p.code)))
            current = reads.next_item(store, name, p.code)
            if current is None:
                return html(pages.done(totals.get(p.code, 0)))
            question, prefix = question_and_prefix(current.item_id)
            now = clock()
            # the first display of an item, once: a reload, a prefetch or a HEAD adds no row
            if not head and not reads.has_event(store, name, p.code, "open", current.item_id):
                reads.add_event(store, name, p.code, "open", current.item_id, _at(now))
        shown = sign_shown_at(key, name, p.code, current.position, int(now * 1000))
        return html(pages.item(current.position, current.total, question, prefix, f"/p/{token}/answer",
                               csrf_token(key, name, p.code), shown))

    async def show(request: Request) -> Response:
        token = request.path_params["token"]
        p = await run_in_threadpool(who, token, False)
        return not_found() if p is None else await run_in_threadpool(participant_page, p, token,
                                                                       request.method == "HEAD")

    async def consent(request: Request) -> Response:
        token = request.path_params["token"]
        p = await run_in_threadpool(who, token, False)
        if p is None:
            return not_found()
        form = await form_of(request)
        if not isinstance(form, dict):
            return form
        if not csrf_ok(form, p):
            return bad_csrf()

        def record() -> None:
            with store_lock:
                if not reads.has_event(store, name, p.code, "consent"):
                    reads.add_event(store, name, p.code, "consent", at=_at(clock()))
        await run_in_threadpool(record)
        return RedirectResponse(f"/p/{token}", status_code=303)

    async def answer(request: Request) -> Response:
        token = request.path_params["token"]
        p = await run_in_threadpool(who, token, False)
        if p is None:
            return not_found()
        form = await form_of(request)
        if not isinstance(form, dict):
            return form
        if not csrf_ok(form, p):
            return bad_csrf()
        back = f"/p/{token}"
        text, position, rating_text = form.get("answer"), form.get("position", ""), form.get("rating", "")
        if text is None or not text.strip():
            return refuse(400, "No answer", "Type an answer before submitting; nothing was stored.", back)
        if len(text) > pages.MAX_ANSWER_CHARS:
            return refuse(413, "Answer too long", f"An answer may hold at most {pages.MAX_ANSWER_CHARS:,} characters "
                          f"(this one has {len(text):,}); nothing was stored. Shorten it and submit again.", back)
        if CONTROL.search(text):
            return refuse(400, "Answer refused", "The answer holds a control character (such as NUL) that no "
                          "keyboard types; nothing was stored. Type the answer again and submit it.", back)
        if rating_text not in ("", "1", "2", "3", "4", "5"):
            return refuse(400, "Rating refused", "A rating is a whole number from 1 to 5, or none; nothing was "
                          "stored.", back)
        shown_ms = (verify_shown_at(key, name, p.code, int(position), form.get("shown_at", ""))
                    if position.isascii() and position.isdigit() and len(position) < 6 else None)
        if shown_ms is None:
            return refuse(400, "Form refused", "This form is damaged or not from this server; nothing was stored. "
                          "Open your link again.", back)
        rating = int(rating_text) if rating_text else None

        def store_it() -> str | None:
            with store_lock:
                current = reads.next_item(store, name, p.code)
                if current is None or current.position != int(position):
                    done = current.position if current is not None else totals.get(p.code, 0)
                    return "done" if int(position) < done else "ahead"
                now = clock()
                try:
                    reads.record_answer(store, name, p.code, current.item_id, text, rating, _at(shown_ms / 1000),
                                        round(max(0.0, now - shown_ms / 1000), 3), _at(now))
                except reads.AnswerRefused:
                    return "done"
            return None

        refused = await run_in_threadpool(store_it)
        if refused == "done":
            return refuse(409, "Already answered", "This answer was already recorded: each item takes one answer, and "
                          "the first one is kept. Nothing was changed.", back)
        if refused == "ahead":
            return refuse(409, "Not this item", "This form is for an item you have not reached; nothing was stored.",
                          back)
        counted.add(answers=1)
        return RedirectResponse(back, status_code=303)

    def admin_page(token: str) -> Response:
        with store_lock:
            people = reads.progress(store, name).to_dicts()
            items = reads.item_progress(store, name).to_dicts()
            got = reads.answers(store, name).sort("submitted_at", descending=True).to_dicts()
        return html(pages.admin(name, people, items, got, f"/admin/{token}/export.csv"))

    def export_csv() -> Response:
        with store_lock:
            got = reads.answers(store, name)
        # a participant's answer is untrusted text: neutralised as every report CSV is (safe_csv)
        return Response(neutralised(got).write_csv(), media_type="text/csv; charset=utf-8",
                        headers={"content-disposition": f'attachment; filename="{name}-answers.csv"'})

    async def admin(request: Request) -> Response:
        token = request.path_params["token"]
        if await run_in_threadpool(who, token, True) is None:
            return not_found()
        return await run_in_threadpool(admin_page, token)

    async def export(request: Request) -> Response:
        if await run_in_threadpool(who, request.path_params["token"], True) is None:
            return not_found()
        return await run_in_threadpool(export_csv)

    return Starlette(routes=[
        Route("/p/{token}", guarded(show), methods=["GET"]),
        Route("/p/{token}/consent", guarded(consent), methods=["POST"]),
        Route("/p/{token}/answer", guarded(answer), methods=["POST"]),
        Route("/admin/{token}", guarded(admin), methods=["GET"]),
        Route("/admin/{token}/export.csv", guarded(export), methods=["GET"]),
    ])


def _at(seconds: float) -> datetime:
    """A naive UTC timestamp, as the study tables store them."""
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
