"""One validation of a study answer, whichever door it comes through (docs/study.md, "What an answer
may be"): the study server's form (`study.server`) and a Label Studio import (`study.label_studio`)
both call `checked_answer`, so an answer the server refuses is never stored by an import either.

- the text: a string (never a number or a list read as one), not blank, at most `MAX_ANSWER_CHARS`
  characters, no C0 control character but tab, newline and carriage return, no DEL (never typed; a NUL
  cuts an answer in C tools and some CSV readers, an ESC sequence repaints a terminal that shows it),
  no lone surrogate (not text: no UTF-8 writer accepts it). Everything else is stored as typed: HTML,
  formulas, bidi controls, emoji (every page escapes it, every CSV neutralises it);
- the rating: none, or a whole number from 1 to 5 (an `int`: not `True`, not `"5"`, not `5.0`).
"""

from __future__ import annotations

import re

MAX_ANSWER_CHARS = 2000
"""A typed answer longer than this is refused (the server: 413, with a page saying so)."""

RATINGS = range(1, 6)

CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""C0 control characters (and DEL) but tab, newline and carriage return."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAMES = {0x00: "NUL", 0x1B: "ESC", 0x7F: "DEL", 0x08: "backspace", 0x07: "BEL"}


class AnswerRefused(ValueError):
    """What is wrong with an answer: `field` ('answer' or 'rating'), `what` (a phrase a message can end
    with), the server's `status` and page `title`."""

    def __init__(self, field: str, what: str, status: int = 400, title: str = "Answer refused") -> None:
        super().__init__(f"{field}: {what}")
        self.field, self.what, self.status, self.title = field, what, status, title


def checked_answer(text: object, rating: object) -> tuple[str, int | None]:
    """(text, rating) as stored, or `AnswerRefused` naming the field (module docstring)."""
    if not isinstance(text, str):
        raise AnswerRefused("answer", f"expected text, got {kind_of(text)}")
    if not text.strip():
        raise AnswerRefused("answer", "the answer is empty. Type an answer before submitting", title="No answer")
    if len(text) > MAX_ANSWER_CHARS:
        raise AnswerRefused("answer", f"the answer has {len(text):,} characters; an answer may hold at most "
                                      f"{MAX_ANSWER_CHARS:,} characters", 413, "Answer too long")
    if m := CONTROL.search(text):
        cp = ord(m.group())
        raise AnswerRefused("answer", f"the answer holds a control character ({_NAMES.get(cp, 'control')} U+{cp:04X}"
                                      f" at character {m.start() + 1}) that no keyboard types")
    if m := _SURROGATE.search(text):
        raise AnswerRefused("answer", f"invalid Unicode: a lone surrogate U+{ord(m.group()):04X} at character "
                                      f"{m.start() + 1}")
    return text, checked_rating(rating)


def checked_rating(rating: object) -> int | None:
    if rating is None:
        return None
    if isinstance(rating, bool) or not isinstance(rating, int) or rating not in RATINGS:
        shown = repr(rating)[:40] if isinstance(rating, int | float | str) and not isinstance(rating, bool) else \
            kind_of(rating)
        raise AnswerRefused("rating", f"{shown} is not a whole number from 1 to 5", title="Rating refused")
    return rating


def rating_of_form(value: str) -> int | None:
    """A form's rating field: empty is none; "1" to "5" that number; anything else is refused."""
    if value == "":
        return None
    if value not in ("1", "2", "3", "4", "5"):
        raise AnswerRefused("rating", f"{value[:20]!r} is not a whole number from 1 to 5", title="Rating refused")
    return int(value)


def kind_of(value: object) -> str:
    """A JSON value's kind, for a message that must not echo it."""
    return {bool: "true/false", int: "a number", float: "a number", list: "a list", dict: "an object",
            type(None): "null", str: "text"}.get(type(value), type(value).__name__)
