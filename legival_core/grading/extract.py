"""Answer extraction: every answer-shaped span in a text, and the rule that picks one (SPEC section 2).

Each finder returns `Candidate`s with the character span they occupy and a tier:
tier 1 = structured (`\\boxed{}`, `#### N`, JSON groupings), tier 2 = a phrase ("the answer is ...",
"final answer: ..."), tier 3 = a bare number (GSM8K teachers only).

Teachers: the LAST candidate of the best tier present wins (a boxed answer beats a later phrase).
Students: the FIRST explicit (tier 1-2) candidate to be COMPLETED wins, and with `closed=True` a
candidate only counts once text after it proves it cannot grow (`\\boxed{3` is not an answer; nor is
"the answer is 4" at the very end, since the next token may be "2"). Choosing the earliest *end* makes
extraction monotone in the text: appending text never changes an answer that was already found,
which is exactly why generation may stop as soon as `first_answer_complete` is true (SPEC section 4).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

Role = Literal["teacher", "student"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One answer found in a text: `value` is the raw answer string.

    `end` is how much of the text must be seen to know this answer (its span plus any lookahead
    character that closed it), so that a candidate found in `T + s` with `end <= len(T)` is also found
    in `T`: the property that makes "earliest end" selection monotone.
    """

    start: int
    end: int
    value: str
    tier: int


Finder = Callable[[str, bool], list[Candidate]]
"""finder(text, closed) -> candidates; `closed=True` keeps only answers that cannot grow."""


def select(cands: Iterable[Candidate], role: Role) -> Candidate | None:
    """Apply the role rule to candidates (see module docstring)."""
    cs = list(cands)
    if role == "student":
        explicit = [c for c in cs if c.tier <= 2]
        return min(explicit, key=lambda c: (c.end, c.start)) if explicit else None
    if not cs:
        return None
    best = min(c.tier for c in cs)
    return max((c for c in cs if c.tier == best), key=lambda c: (c.end, c.start))


def pick(finder: Finder, answer_text: str, reasoning: str, role: Role) -> Candidate | None:
    """Teachers: search `answer_text`, then fall back to `reasoning`. Students: the continuation only."""
    if role == "student":
        return select(finder(answer_text, True), "student")
    found = select(finder(answer_text, False), "teacher")
    if found is None and reasoning:
        found = select(finder(reasoning, False), "teacher")
    return found


# --- \boxed{...} -------------------------------------------------------------------------------

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE_RE = re.compile(r"[{}]")
MAX_BOXES_INSIDE = 16
"""A box that holds more boxes than this (nested at any depth) is not an answer: real answers hold at
most two (`\\boxed{\\boxed{42}}`), and a degenerate `\\boxed{\\boxed{\\boxed{...` loop would otherwise
make every level a candidate whose value is the whole rest of the loop (quadratic time and memory)."""


def boxed_spans(text: str) -> list[Candidate]:
    """All balanced `\\boxed{...}` / `\\fbox{...}` in order of start; an unclosed one is not returned.

    Braces are counted raw, so `\\{1,2\\}` inside a box balances itself as in Hendrycks' code. One
    pass with a stack keeps this linear even for a degenerate `\\boxed{\\boxed{\\boxed{...` loop, whose
    outer levels hold more than MAX_BOXES_INSIDE boxes and are dropped.
    """
    openers = {m.end() - 1: m for m in _BOX_RE.finditer(text)}
    if not openers:
        return []
    out: list[Candidate] = []
    stack: list[tuple[int, int]] = []  # (position of an open brace, boxes closed before it opened)
    closed_boxes = 0
    for b in _BRACE_RE.finditer(text):
        i = b.start()
        if text[i] == "{":
            stack.append((i, closed_boxes))
        elif stack:
            opened, closed_before = stack.pop()
            m = openers.get(opened)
            if m is not None:
                if closed_boxes - closed_before <= MAX_BOXES_INSIDE:
                    out.append(Candidate(m.start(), i + 1, text[opened + 1 : i].strip(), 1))
                closed_boxes += 1
    return sorted(out, key=lambda c: c.start)


def first_boxed(text: str) -> str | None:
    b = boxed_spans(text)
    return b[0].value if b else None


def last_boxed(text: str) -> str | None:
    b = boxed_spans(text)
    return b[-1].value if b else None


# --- numbers -----------------------------------------------------------------------------------

NUMBER_RE = re.compile(r"(?:-?\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+)(?:[eE][+-]?\d+)?")
"""A number as written: thousands separators, decimals, and scientific notation read whole (`1e308`
is one number, never `1` and `308`)."""


def number_closed(text: str, end: int) -> bool:
    """True when the number ending at `end` cannot grow: the next char is not a digit, a `.` or `,`
    right after it is followed by a non-digit (so "18." at the very end is still open), and an `e`
    after it does not start an exponent (so "1e" and "1e+" at the very end are still open)."""
    if end >= len(text):
        return False
    ch = text[end]
    if ch.isdigit():
        return False
    if ch in ".,":
        return end + 1 < len(text) and not text[end + 1].isdigit()
    if ch in "eE":
        nxt = text[end + 1 : end + 3]
        if not nxt or nxt[0].isdigit():
            return False
        if nxt[0] in "+-":
            return len(nxt) == 2 and not nxt[1].isdigit()
    return True


_HASH_RE = re.compile(r"####\s*(?:\$\s*)?(" + NUMBER_RE.pattern + ")")
"""`\\s*(?:\\$\\s*)?`, not `\\s*\\$?\\s*`: the two adjacent `\\s*` split a run of spaces in every way
before failing (quadratic: `#### ` + 20,000 spaces took seconds); both match the same texts."""


def hash_answers(text: str, closed: bool) -> list[Candidate]:
    """GSM8K-style `#### 72` (optionally `#### $1,000`)."""
    out = []
    for m in _HASH_RE.finditer(text):
        if closed and not number_closed(text, m.end()):
            continue
        out.append(Candidate(m.start(), min(m.end() + 1, len(text)), m.group(1), 1))
    return out


def bare_numbers(text: str, closed: bool) -> list[Candidate]:
    """Every number in the text, tier 3 (only a teacher's fallback)."""
    return [
        Candidate(m.start(), min(m.end() + 1, len(text)), m.group(0), 3)
        for m in NUMBER_RE.finditer(text)
        if not closed or number_closed(text, m.end())
    ]


# --- "the answer is ..." -------------------------------------------------------------------------

_PHRASE_RE = re.compile(
    r"(?:\bfinal\s+answer\s*(?:is|:)|\b(?:the\s+)?(?:correct\s+)?answer\s+is\b\s*:?|^[ \t*#]*answer\s*:)"
    r"[ \t*]*",
    re.IGNORECASE | re.MULTILINE,
)
MAX_PHRASE_VALUE = 300
"""A phrase whose value runs longer than this without a terminator is prose, not an answer; the
cap also keeps extraction linear on degenerate repetitive text."""
_MATH_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def _phrase_value(text: str, i: int, closed: bool) -> tuple[str, int] | None:
    """The answer after a phrase starting at `i`: a `$...$` group, or text up to a line or sentence end.

    Returns (value, end) or None when the value is not complete yet (with `closed`) or is a box
    (boxes are found by `boxed_spans`, so a phrase never duplicates one).
    """
    rest = text[i : i + MAX_PHRASE_VALUE + 2]
    if rest.startswith(("\\boxed", "\\fbox", "$\\boxed", "$$\\boxed", "\\(\\boxed", "\\[\\boxed")):
        return None
    for open_d, close_d in _MATH_DELIMS:
        if rest.startswith(open_d):
            j = rest.find(close_d, len(open_d))
            nl = rest.find("\n") if open_d in ("$", "\\(") else -1
            if j != -1 and (nl == -1 or j < nl):
                return rest[len(open_d) : j], i + j + len(close_d)
            if nl != -1:
                break  # the line ended without a closing "$": it was a currency sign, read plain text
            if closed or len(rest) > MAX_PHRASE_VALUE:
                return None  # still open (math that may close, or "$70" money), or too long
            return rest[len(open_d) :], len(text)
    for j, ch in enumerate(rest):
        if j > MAX_PHRASE_VALUE:
            return None
        if ch == "\n":
            return rest[:j], i + j + 1
        if ch in ".!?" and j + 1 < len(rest) and rest[j + 1] in " \t\n":
            return rest[:j], i + j + 2
    if closed or len(rest) > MAX_PHRASE_VALUE:
        return None
    return rest, len(text)


def phrase_answers(text: str, closed: bool) -> list[Candidate]:
    """ "The answer is X", "The final answer is X", "Final answer: X", "Answer: X" (line start)."""
    out = []
    for m in _PHRASE_RE.finditer(text):
        got = _phrase_value(text, m.end(), closed)
        if got is None:
            continue
        value, end = got
        value = value.strip().strip("*").strip().rstrip(".").strip()
        if value:
            out.append(Candidate(m.start(), end, value, 2))
    return out


# --- letters (multiple choice) -------------------------------------------------------------------


# Possessive quantifiers (`*+`, `?+`) where a run of whitespace could otherwise be split between two
# adjacent quantifiers in every way before the match fails (quadratic on a long run of spaces). The
# letter that follows is never whitespace, so giving characters back could never have matched: the
# patterns accept exactly what they accepted before.
_LETTER_VALUE_RE = re.compile(r"(?:option|choice)?\s*+[(\[]?\s*+([A-Z])\s*[)\]]?(?=$|[\s.,:;)*])", re.IGNORECASE)
_LETTER_PHRASE_RE = re.compile(
    r"(?:\b(?:the\s+)?(?:correct\s+|final\s+)?answer\s*+(?:is|:)|^[ \t*#]*+answer\s*+:)"
    r"[ \t*:]*+(?:option\s+|choice\s+)?+[(\[]?\s*+([A-Za-z])\b[)\]]?",
    re.IGNORECASE | re.MULTILINE,
)


def _letter_of(value: str, letters: str) -> str | None:
    """`C`, `(C)`, `\\text{C}`, `C.`, `C) Paris`, `**C**` -> `C` when C is a valid letter."""
    v = re.sub(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}", r"\1", value).strip().strip("*$ ")
    m = _LETTER_VALUE_RE.match(v)
    if not m:
        return None
    letter = m.group(1)
    if letter.islower() and len(v) > 1:  # "a" is an article, not a choice, unless it is alone
        return None
    letter = letter.upper()
    return letter if letter in letters else None


def letter_answers(text: str, closed: bool, letters: str = "ABCD") -> list[Candidate]:
    """Boxed letters (tier 1) and "the correct answer is (C)" / "Answer: C" phrases (tier 2)."""
    out = []
    for b in boxed_spans(text):
        letter = _letter_of(b.value, letters)
        if letter:
            out.append(Candidate(b.start, b.end, letter, 1))
    for m in _LETTER_PHRASE_RE.finditer(text):
        letter = m.group(1)
        if letter.islower() or letter not in letters:
            continue
        end = m.end()
        if end < len(text) and text[end].isalnum():
            continue
        if closed and end >= len(text) and text[end - 1] not in ")]":
            continue
        out.append(Candidate(m.start(), min(end + 1, len(text)), letter, 2))
    return out
