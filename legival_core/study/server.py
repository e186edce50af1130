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
- **Durability, and the store left free**: the study is read from the store once, at start
  (`served.ServedStudy.load`); each answer is committed to the store's journal (`store/journal.py`,
  on disk when it returns) before its POST is answered (303 to `GET /p/{token}`): a participant never
  sees the next item of an answer that is not on disk, so a `kill -9` loses nothing that was
  acknowledged, and the store stays free for `report`, `serve`, `study grade` and runs meanwhile.
- **One lock**: Starlette runs blocking work on a thread pool; the served study's state is guarded by
  its own lock. A request does a few dictionary reads and at most one small journal commit
  (milliseconds): 30 participants at once do not queue noticeably (tests/cli/test_study_serve.py
  measures it).
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
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from legival_core.safe_csv import neutralised
from legival_core.store.study import Participant
from legival_core.study import pages
from legival_core.study.answers import AnswerRefused, checked_answer, rating_of_form
from legival_core.study.links import token_sha256
from legival_core.study.served import ServedStudy
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


@dataclass(frozen=True, slots=True)
class _Posted:
    """A participant's POST that passed the checks: whose link it came to, and its form."""

    participant: Participant
    form: dict[str, str]


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


def make_study_server(served: ServedStudy, key: bytes, *, host: str = "127.0.0.1", port: int = 0,
                      allow_hosts: Iterable[str] = (), on_refused: Refused | None = None,
                      stats: ServerStats | None = None, head_timeout_s: float = HEAD_TIMEOUT_S) -> LocalServer:
    """The study `served` on (host, port), not yet started (`BadHostName` before the port is bound;
    `PortInUse` at once)."""
    allowed = AllowedHosts.for_server(host, allow_hosts)
    app = study_app(served, key, stats=stats)
    sock = bind(host, port)
    try:
        return LocalServer(HostGuard(app, allowed, on_refused=on_refused), sock, head_timeout_s=head_timeout_s)
    except BaseException:
        sock.close()
        raise


def study_app(served: ServedStudy, key: bytes, *, stats: ServerStats | None = None,
              clock: Callable[[], float] = time.time) -> Any:
    """The Starlette app of the module docstring over `served` (read from the store at start; answers
    and events committed to the store's journal)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Route

    name = served.name
    consent_text = served.consent_text
    counted = stats if stats is not None else ServerStats()

    def html(body: str, status: int = 200) -> Response:
        return HTMLResponse(body, status_code=status, headers=PAGE_HEADERS)

    def refuse(status: int, title: str, text: str, back: str | None = None) -> Response:
        counted.add(refused=1)
        return html(pages.message(title, text, back), status)

    def not_found() -> Response:
        return refuse(404, "Not found", "This link is not valid. Check that you opened the whole link you were given.")

    def who(token: str, admin: bool) -> Participant | None:
        p = served.participant(token_sha256(token))
        return p if p is not None and p.study == name and p.admin == admin else None

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

    def csrf_ok(form: dict[str, str], p: Participant) -> bool:
        return hmac.compare_digest(form.get("csrf", "").encode("utf-8"), csrf_token(key, name, p.code).encode())

    def bad_csrf() -> Response:
        return refuse(403, "Form refused", "This form is not valid for this link (its security token is missing or "
                      "wrong), so nothing was stored. Open your own link again and answer from there.")

    def participant_page(p: Participant, token: str, head: bool = False) -> Response:
        if not served.has_event(p.code, "consent"):
            return html(pages.consent(consent_text, f"/p/{token}/consent", csrf_token(key, name, p.code)))
        current = served.next_item(p.code)
        if current is None:
            return html(pages.done(served.total(p.code)))
        question, prefix = served.question_and_prefix(current.item_id)
        now = clock()
        # the first display of an item, once: a reload, a prefetch or a HEAD adds no row
        if not head:
            served.add_event(p.code, "open", current.item_id, _at(now))
        shown = sign_shown_at(key, name, p.code, current.position, int(now * 1000))
        return html(pages.item(current.position, current.total, question, prefix, f"/p/{token}/answer",
                               csrf_token(key, name, p.code), shown))

    async def show(request: Request) -> Response:
        token = request.path_params["token"]
        p = await run_in_threadpool(who, token, False)
        return not_found() if p is None else await run_in_threadpool(participant_page, p, token,
                                                                       request.method == "HEAD")

    async def posted(request: Request) -> _Posted | Response:
        """The participant a POST to `/p/{token}/...` is for and its form, or the refusal: 404 for a token
        that is no participant's, the form's own (`form_of`), 403 for a missing or wrong CSRF token."""
        p = await run_in_threadpool(who, request.path_params["token"], False)
        if p is None:
            return not_found()
        form = await form_of(request)
        if not isinstance(form, dict):
            return form
        if not csrf_ok(form, p):
            return bad_csrf()
        return _Posted(p, form)

    async def consent(request: Request) -> Response:
        got = await posted(request)
        if not isinstance(got, _Posted):
            return got
        await run_in_threadpool(served.add_event, got.participant.code, "consent", None, _at(clock()))
        return RedirectResponse(f"/p/{request.path_params['token']}", status_code=303)

    async def answer(request: Request) -> Response:
        got = await posted(request)
        if not isinstance(got, _Posted):
            return got
        p, form = got.participant, got.form
        back = f"/p/{request.path_params['token']}"
        position = form.get("position", "")
        try:  # the one validation of an answer, a Label Studio import's too (study.answers)
            text, rating = checked_answer(form.get("answer", ""), rating_of_form(form.get("rating", "")))
        except AnswerRefused as e:
            return refuse(e.status, e.title, f"{e.what[:1].upper()}{e.what[1:]}; nothing was stored. Correct it and "
                          "submit again.", back)
        shown_ms = (verify_shown_at(key, name, p.code, int(position), form.get("shown_at", ""))
                    if position.isascii() and position.isdigit() and len(position) < 6 else None)
        if shown_ms is None:
            return refuse(400, "Form refused", "This form is damaged or not from this server; nothing was stored. "
                          "Open your link again.", back)

        def store_it() -> str | None:
            now = clock()
            return served.record_answer(p.code, int(position), text, rating, _at(shown_ms / 1000),
                                        round(max(0.0, now - shown_ms / 1000), 3), _at(now))

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
        got = served.answer_frame().sort("submitted_at", descending=True).to_dicts()
        return html(pages.admin(name, served.progress(), served.item_progress(), got, f"/admin/{token}/export.csv"))

    def export_csv() -> Response:
        # a participant's answer is untrusted text: neutralised as every report CSV is (safe_csv)
        return Response(neutralised(served.answer_frame()).write_csv(), media_type="text/csv; charset=utf-8",
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
