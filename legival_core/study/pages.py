"""The study server's HTML pages, built with `html.escape` around every piece of stored or typed text.

Why builders and no template engine: five small pages, and every value in them is either a number or
text that must be escaped (trace text, questions, answers typed by participants): one function, `_e`,
does it, and no page has a way to insert unescaped text. The pages carry no script and load nothing
from elsewhere: they work with JavaScript off, and a Content-Security-Policy of `default-src 'none'`
(set by the server) forbids any script a payload might smuggle in.

What an item page shows is only the question and the prefix (steps 1..k): never the gold answer, the
rest of the trace, the teacher or the trace id (the study is blind). The form names the item by its
position, not its id (an id says whether an item is an attention check).
"""

from __future__ import annotations

from html import escape

from legival_core.study.answers import MAX_ANSWER_CHARS  # one validation of an answer (study.answers)

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;line-height:1.5;color:#111}
.text{white-space:pre-wrap;background:#f6f6f6;border-left:4px solid #888;padding:.75rem 1rem}
.prefix{white-space:pre-wrap;background:#f3f7ff;border-left:4px solid #4a6fd1;padding:.75rem 1rem}
textarea{width:100%;min-height:4rem;font:inherit}
fieldset{border:1px solid #ccc;margin:1rem 0}
progress{width:100%}
button{font:inherit;padding:.4rem 1.2rem;margin-top:.75rem}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}
.answer{white-space:pre-wrap;max-width:20rem;overflow-wrap:anywhere}
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def page(title: str, body: str) -> str:
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head>\n<body>\n{body}\n</body></html>\n")


def message(title: str, text: str, back: str | None = None) -> str:
    """A plain page: a refusal or a notice (never echoing the request)."""
    link = f'<p><a href="{_e(back)}">Continue</a></p>' if back else ""
    return page(title, f"<h1>{_e(title)}</h1><p>{_e(text)}</p>{link}")


def consent(consent_text: str, action: str, csrf: str) -> str:
    return page("Consent", f"""<h1>Before you start</h1>
<div class="text" id="consent">{_e(consent_text)}</div>
<form method="post" action="{_e(action)}">
<input type="hidden" name="csrf" value="{_e(csrf)}">
<button type="submit" id="agree">I agree: start</button>
</form>""")


def item(position: int, total: int, question: str, prefix: str, action: str, csrf: str, shown_at: str) -> str:
    """Item `position` (0-based) of `total`: the question, the prefix (none at k = 0), the answer form."""
    n = position + 1
    shown = (f'<h2>The start of a worked solution</h2>\n<div class="prefix" id="prefix">{_e(prefix)}</div>'
             if prefix else '<p id="no-prefix">No part of a solution is shown for this problem.</p>')
    radios = "".join(f'<label><input type="radio" name="rating" value="{r}"> {r}</label> ' for r in range(1, 6))
    return page(f"Item {n} of {total}", f"""<p><progress id="progress" value="{position}" max="{total}"
 aria-label="Progress: item {n} of {total}"></progress><br>Item {n} of {total}</p>
<h2>Problem</h2>
<div class="text" id="question">{_e(question)}</div>
{shown}
<form method="post" action="{_e(action)}">
<input type="hidden" name="csrf" value="{_e(csrf)}">
<input type="hidden" name="position" value="{position}">
<input type="hidden" name="shown_at" value="{_e(shown_at)}">
<p><label for="answer">Your final answer</label><br>
<textarea id="answer" name="answer" maxlength="{MAX_ANSWER_CHARS}" required></textarea></p>
<fieldset id="rating"><legend>I could follow this reasoning (1: not at all, 5: completely; optional)</legend>
{radios}</fieldset>
<button type="submit" id="submit">Submit answer</button>
</form>""")


def done(total: int) -> str:
    return page("Thank you", f"""<p><progress id="progress" value="{total}" max="{total}"
 aria-label="Progress: all {total} items answered"></progress></p>
<h1 id="done">Thank you</h1><p>You have answered all {total} items. You may close this page.</p>""")


def _cell(value: object, typed: bool) -> str:
    """A table cell's escaped text; a participant's typed text inside `<bdi>`, so a right-to-left
    override (U+202E) in an answer cannot reorder the cells after it."""
    text = _e("" if value is None else value)
    return f"<bdi>{text}</bdi>" if typed else text


def admin(study: str, people: list[dict[str, object]], items: list[dict[str, object]],
          answers: list[dict[str, object]], export: str) -> str:
    """Progress per participant and per item, and every answer (escaped: participants typed them)."""
    def rows(data: list[dict[str, object]], cols: tuple[str, ...], cls: dict[str, str] | None = None) -> str:
        head = "".join(f"<th>{_e(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(
            f'<td class="{(cls or {}).get(c, "")}">{_cell(r.get(c), c in (cls or {}))}</td>' for c in cols)
            + "</tr>" for r in data)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    bars = [{**p, "progress": f"{p['answered']}/{p['total']}"} for p in people]
    return page(f"Study {study}: progress", f"""<h1>Study {_e(study)}</h1>
<p><a id="export" href="{_e(export)}">Export the answers (CSV)</a></p>
<h2>Participants</h2>
<div id="participants">{rows(bars, ("code", "progress"))}</div>
<h2>Items</h2>
<div id="items">{rows(items, ("item_id", "kind", "k", "m", "assigned", "answered"))}</div>
<h2>Answers</h2>
<div id="answers">{rows(answers, ("code", "item_id", "answer", "rating", "seconds", "submitted_at"),
                        {"answer": "answer"})}</div>""")
