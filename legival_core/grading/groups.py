"""Connections answers: four groups of four words, as JSON or as plain lines (SPEC section 2).

Accepted JSON: any object with a "Groupings" / "groups" key (case-insensitive) whose value is a list
of lists, a list of objects with "Words"/"members", or an object of such (the Legi-Val prompt's own
format, `{"Groupings": {"1": {"Category": ..., "Words": [...]}, ...}}`), or a bare list of four lists.
Accepted lines: four lines of four comma-separated words, each optionally labelled ("Group 1: ...",
"**Weather**: ..."), separated only by blank lines, possibly inside a ``` fence.
"""

from __future__ import annotations

import json
import re
from typing import Any

from legival_core.grading.extract import Candidate
from legival_core.types import canonical_json

Groups = tuple[frozenset[str], ...]

_WORD_KEYS = ("words", "members", "group", "items")


def norm_word(w: str) -> str:
    """Case-insensitive, whitespace- and quote-insensitive form of a board word."""
    return re.sub(r"\s+", " ", w.strip().strip("\"'`*").strip()).upper()


def canonical_groups(groups: list[list[str]]) -> str:
    """Gold/extracted storage form: JSON list of groups, each a sorted upper-case list, groups sorted."""
    return canonical_json(sorted(sorted(norm_word(w) for w in g) for g in groups))


MAX_JSON_DEPTH = 32
"""Brackets nested deeper than this are not a groupings object (one nests 4 deep, plus any brackets in
its strings): such spans are skipped, so `json.loads` never recurses past Python's limit
(`RecursionError`) and a degenerate `[[[[...` costs linear time, not one parse per level."""


def _bracket_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every balanced `{...}` / `[...]` at most MAX_JSON_DEPTH deep, in one linear pass.

    String-unaware on purpose: prose before the JSON has stray quotes that would derail string
    tracking, and a candidate span is validated by `json.loads` anyway.
    """
    spans = []
    stack: list[list[Any]] = []  # [closer, start, depth of the deepest span inside]
    for m in re.finditer(r"[{}\[\]]", text):
        ch, i = m.group(0), m.start()
        if ch in "{[":
            stack.append(["}" if ch == "{" else "]", i, 0])
        elif stack and stack[-1][0] == ch:
            _, start, inner = stack.pop()
            if inner < MAX_JSON_DEPTH:
                spans.append((start, i + 1))
            if stack:
                stack[-1][2] = max(stack[-1][2], inner + 1)
        else:
            stack.clear()  # a stray closer: nothing open before it can be well-formed JSON
    return sorted(spans)


def _loads(s: str) -> Any:
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        try:
            return json.loads(re.sub(r",\s*([}\]])", r"\1", s))
        except (ValueError, RecursionError):
            return None


def _as_group(v: Any) -> list[str] | None:
    if isinstance(v, dict):
        for k, inner in v.items():
            if str(k).lower() in _WORD_KEYS and isinstance(inner, list):
                return _as_group(inner)
        return None
    if isinstance(v, list) and v and all(isinstance(w, str) and w.strip() for w in v):
        return [str(w) for w in v]
    return None


def groups_from_json(obj: Any) -> list[list[str]] | None:
    """Four groups from a parsed JSON value, or None when it is not a groupings object."""
    if isinstance(obj, dict):
        inner = next((v for k, v in obj.items() if str(k).lower() in ("groupings", "groups")), None)
        if inner is None:
            return None
        obj = list(inner.values()) if isinstance(inner, dict) else inner
    if not isinstance(obj, list) or len(obj) != 4:
        return None
    groups = [_as_group(v) for v in obj]
    if any(g is None for g in groups):
        return None
    return [g for g in groups if g is not None]


def json_groupings(text: str, closed: bool) -> list[Candidate]:
    """Every JSON groupings object or 4x list in the text (a JSON value is always self-closing)."""
    out = []
    for i, end in _bracket_spans(text):
        if text[i] == "{" and "group" not in text[i:end].lower():
            continue
        if text[i] == "[" and text.count("[", i, end) < 5:  # a bare 4x4 list has five brackets
            continue
        groups = groups_from_json(_loads(text[i:end]))
        if groups is not None:
            out.append(Candidate(i, end, canonical_groups(groups), 1))
    return out


_ITEM_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9'&.\-]*(?: [A-Za-z0-9'&.\-]+){0,2}")


def _drop_trailing_note(item: str) -> str:
    """`WORD (a note)` -> `WORD`: what `re.sub(r"\\s*\\([^)]*\\)\\s*$", "", item)` returns, in linear time
    (the regex retried every `(` and every space of a run: quadratic on a degenerate `((((...`)."""
    t = item.rstrip()
    if not t.endswith(")"):
        return item
    close = len(t) - 1
    opened = t.find("(", t.rfind(")", 0, close) + 1, close)  # the first `(` after the previous `)`
    return item if opened == -1 else item[: len(t[:opened].rstrip())]


def _line_group(line: str) -> list[str] | None:
    s = line.strip().strip("`").strip()
    s = re.sub(r"^(?:[-*•]\s+|\d+[.)]\s+)", "", s).replace("**", "")
    if "?" in s or "!" in s:
        return None
    if ":" in s:
        s = s.rsplit(":", 1)[1]
    elif re.search(r"\s[-–—]\s", s):
        s = re.split(r"\s[-–—]\s", s)[-1]
    s = s.strip().strip("[]").strip()
    parts = s.split(",")
    if len(parts) != 4:
        return None
    items = [_drop_trailing_note(it).strip().strip("\"'").strip() for it in parts]
    if not all(_ITEM_RE.fullmatch(it) for it in items):
        return None
    if any(re.match(r"(?:and|or)\s", it, re.IGNORECASE) for it in items):
        return None
    return items


def line_groupings(text: str, closed: bool) -> list[Candidate]:
    """Every run of four group lines separated only by blank lines (or fence markers)."""
    lines: list[tuple[int, int, list[str] | None]] = []
    pos = 0
    for raw in text.splitlines(keepends=True):
        start, pos = pos, pos + len(raw)
        body = raw.rstrip("\r\n")
        if not body.strip() or re.fullmatch(r"\s*```\w*\s*", body):
            continue
        terminated = raw != body or not closed
        group = _line_group(body) if terminated else None
        lines.append((start, pos if raw != body else start + len(body), group))
    out = []
    for k in range(len(lines) - 3):
        window = lines[k : k + 4]
        groups = [g for _, _, g in window]
        complete = [g for g in groups if g is not None]
        if len(complete) == 4:
            out.append(Candidate(window[0][0], window[-1][1], canonical_groups(complete), 1))
    return out


def connections_answers(text: str, closed: bool) -> list[Candidate]:
    return json_groupings(text, closed) + line_groupings(text, closed)


def parse_groups(canonical: str) -> Groups:
    """The stored canonical JSON back to a tuple of word sets."""
    return tuple(frozenset(norm_word(w) for w in g) for g in json.loads(canonical))


def groups_correct(extracted: Groups, gold: Groups) -> int:
    """How many gold groups the answer reproduces exactly (0..4), each counted once."""
    return len(set(extracted) & set(gold))
