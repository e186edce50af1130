"""The one reader of JSON that comes from outside (docs/security.md, "JSON from outside").

Every JSON a user hands Legi-Val (a trace file's lines, a Label Studio export, human annotations, a
`legival grade` / `z3` file, a source's files: OpenAI batch output and requests, lm-eval samples and
results, Inspect `.json` logs; a `--backend-options` value; a judge model's reply) is decoded here, never
with `json.loads` at the call site (`tests/core/test_json_boundary.py` walks the source tree and fails on
a parse elsewhere that is not on its list of internal JSON, with the reason). Python's own parser is safe
to call on anything, but what it returns is not safe to use:

- **Depth**: a document nested past Python's recursion limit raises `RecursionError` (a crash where it is
  not caught), and one just under it crashes the first recursive consumer (pydantic, `canonical_json`,
  a walk). Past `MAX_DEPTH` levels of `[` or `{` a document is refused.
- **Numbers**: an integer of more than 4,300 digits raises `ValueError` in `int()` (CVE-2020-10735's
  limit), and a long one costs quadratic time; a float literal past the double's range becomes
  infinity. A number literal longer than `MAX_NUMBER_CHARS` characters, or a float out of a double's
  range, is refused. (`NaN` and `Infinity`, which Python and Inspect write, are read as Python reads them: the
  fields that take a number check its range.)
- **Text**: `"\\ud800"` is valid JSON and decodes to a lone surrogate, which no UTF-8 writer, hash or
  store accepts: a string or key holding one is refused (`text=False` leaves it to a caller that checks
  every string itself and may repair it: ingest's `trace_records.checked_text`, `--repair-text`).
- **Duplicate keys**: `{"a": 1, "a": 2}` keeps the last value in Python and the first in other tools; it
  is refused (which value is meant?).

One error type, `JsonRefused`, a `json.JSONDecodeError` (so a caller that catches that, or `ValueError`,
catches it): `msg` says what is wrong, `field` where inside the document (`annotations[0].lead_time`; ""
for the document itself), `line` the line of the text when known. Callers print
`FILE:LINE: field 'X': what`. Streams (`array_items`, `check_members`: Inspect's `.json` logs, too large
to hold) are read with ijson's event parser and built here with the same limits; its `items()` keeps a
prefix string per level, so a 30,000-deep document costs it gigabytes before any limit could apply.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["MAX_DEPTH", "MAX_NUMBER_CHARS", "JsonRefused", "MalformedJson", "array_items", "check_members", "decode_at", "loads"]

MAX_DEPTH = 128
"""Levels of `[` or `{`: a Label Studio task is 6 deep, an Inspect sample about 12."""
MAX_NUMBER_CHARS = 1000
"""A number literal's length: well under the 4,300 digits `int()` reads, and cheap to convert; above any
number a field reads on purpose (a double holds 17 significant digits), so a field's own check still
names what is wrong with a merely large one (a z3 IR's constant past its range is that step's skip)."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]', re.DOTALL)


class JsonRefused(json.JSONDecodeError):
    """JSON that is malformed or past a limit: `msg` what, `field` where in the document ("" for the
    document), `line` (and `colno`) in the text when known (`lineno` 0 when not)."""

    def __init__(self, msg: str, field: str = "", pos: int = 0, line: int | None = None, column: int = 0) -> None:
        ValueError.__init__(self, msg)
        self.msg, self.field, self.pos, self.line = msg, field, pos, line
        self.doc = ""
        self.lineno, self.colno = line or 0, column
        self.document: Any = None
        """The value as decoded, when it was decoded and then refused (a caller may name it by its id)."""

    def __str__(self) -> str:
        return f"field '{self.field}': {self.msg}" if self.field else self.msg

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.msg, self.field, self.pos, self.line, self.colno)


class MalformedJson(JsonRefused):
    """Not JSON at all (a syntax error at `pos`, text after the document, bytes that are not UTF-8), as
    opposed to JSON past a limit."""


class _BadNumber(str):
    """A number literal past the limits, kept as its text until the check names its field."""


class _Duplicate(dict[str, Any]):
    key: str


def _int(s: str) -> Any:
    return int(s) if len(s) <= MAX_NUMBER_CHARS else _BadNumber(s)


def _float(s: str) -> Any:
    if len(s) > MAX_NUMBER_CHARS:
        return _BadNumber(s)
    v = float(s)
    return v if math.isfinite(v) else _BadNumber(s)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    dup = _Duplicate(out)
    dup.key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    return dup


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_int=_int, parse_float=_float)


def loads(doc: str | bytes, *, text: bool = True) -> Any:
    """One whole JSON document (bytes are UTF-8, a leading BOM skipped), checked (module docstring)."""
    s = _text(doc)
    value, end = decode_at(s, 0, text=text)
    if s[end:].strip(" \t\r\n"):
        at = end + len(s[end:]) - len(s[end:].lstrip(" \t\r\n"))
        raise MalformedJson("malformed JSON: extra data", "", at, s.count("\n", 0, at) + 1)
    return value


def decode_at(s: str, pos: int, *, text: bool = True) -> tuple[Any, int]:
    """The JSON value starting at `pos` of `s` (whitespace before it skipped) and the index after it, as
    `json.JSONDecoder.raw_decode`, checked: a file holding many documents reads them one by one."""
    start = pos
    while start < len(s) and s[start] in " \t\r\n":
        start += 1
    try:
        value, end = _DECODER.raw_decode(s, start)
    except json.JSONDecodeError as e:
        raise MalformedJson(f"malformed JSON: {e.msg} at column {e.colno}", "", e.pos, e.lineno, e.colno) from None
    except RecursionError:
        raise _too_deep_in(s, start) from None
    _check(value, text and _may_hold_surrogates(s, start, end), s, start, end)
    return value, end


def _text(doc: str | bytes) -> str:
    if isinstance(doc, str):
        return doc[1:] if doc.startswith("\ufeff") else doc
    try:
        return bytes(doc).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = doc.count(b"\n", 0, e.start) + 1
        raise MalformedJson(f"not UTF-8 text: byte 0x{doc[e.start]:02x} at byte {e.start + 1}", "", e.start,
                          line) from None


def _at(s: str, pos: int, msg: str, field: str = "") -> JsonRefused:
    line = s.count("\n", 0, pos) + 1
    return JsonRefused(msg, field, pos, line, pos - s.rfind("\n", 0, pos))


def _may_hold_surrogates(s: str, start: int, end: int) -> bool:
    """Can the value decoded from s[start:end] hold a lone surrogate? Only through a `\\uD8xx`-`\\uDFxx`
    escape, or one in the text itself (a `str` made in Python; `isascii` is free)."""
    return bool((s.find("\\u", start, end) >= 0 and _ESCAPED_SURROGATE.search(s, start, end))
                or (not s.isascii() and _SURROGATE.search(s, start, end)))


DEEP = f"JSON nested too deeply (more than {MAX_DEPTH} levels of '[' or '{{')"


def _too_deep_in(s: str, start: int) -> JsonRefused:
    """Where the text first nests past `MAX_DEPTH` (the parser gave up before we could look): its line,
    and the keys leading there."""
    stack: list[list[Any]] = []  # [bracket, key]
    last = ""
    for m in _TOKEN.finditer(s, start):
        tok = m.group()
        if tok == "[" or tok == "{":
            stack.append([tok, None])
            if len(stack) > MAX_DEPTH:
                return _at(s, m.start(), DEEP, _keys_field([f[1] if f[0] == "{" else 0 for f in stack]))
        elif tok == "]" or tok == "}":
            if stack:
                stack.pop()
            if not stack:
                break
        elif tok == ":":
            if stack:
                stack[-1][1] = _key_of(last)
        elif tok != ",":
            last = tok
    return _at(s, start, DEEP)


def _key_of(token: str) -> str | None:
    try:
        key = json.loads(token)  # one string token: nothing to nest
    except ValueError:
        return None
    return key if isinstance(key, str) else None


def _keys_field(path: list[Any]) -> str:
    """A too-deep value's field: the keys that lead to it, up to the first array (at most 4)."""
    keys: list[str] = []
    for p in path:
        if not isinstance(p, str):
            break
        if len(keys) == 4:
            return _field(keys) + "..."
        keys.append(p)
    return _field(keys)


def _field(path: list[Any] | tuple[Any, ...]) -> str:
    out = ""
    for p in path:
        if p is None:  # a key not read yet
            continue
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            shown = p if p.isprintable() and not _SURROGATE.search(p) and len(p) <= 60 else ascii(p)[1:-1][:60]
            out += f".{shown}" if out else shown
    return out


def _check(value: Any, text: bool, s: str = "", start: int = 0, end: int = 0) -> None:
    """Refuse a decoded value past the limits (`JsonRefused` naming its field). A walk without paths
    first (nothing found: done); a document with few brackets cannot be deep, and one with no surrogate
    in its text needs no look at its strings."""
    deep = not s or s.count("[", start, end) + s.count("{", start, end) > MAX_DEPTH
    if _clean(value, text, deep):
        return
    found = _first_problem(value, text)
    if found is not None:
        path, msg = found
        field = _keys_field(path) if msg == DEEP else _field(path)
        e = _at(s, start, msg, field) if s else JsonRefused(msg, field)
        e.document = value
        raise e


def _clean(value: Any, text: bool, deep: bool) -> bool:
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        t = type(v)
        if t is str:
            if text and _SURROGATE.search(v):
                return False
        elif t is dict:
            if deep and depth > MAX_DEPTH:
                return False
            if text and any(_SURROGATE.search(k) for k in v):
                return False
            stack.extend((x, depth + 1) for x in v.values())
        elif t is list:
            if deep and depth > MAX_DEPTH:
                return False
            stack.extend((x, depth + 1) for x in v)
        elif t is _BadNumber or t is _Duplicate:
            return False
    return True


def _first_problem(value: Any, text: bool) -> tuple[list[Any], str] | None:
    """(path, what) of the first value past a limit, in document order; None when there is none."""
    stack: list[tuple[Any, list[Any]]] = [(value, [])]
    while stack:
        v, path = stack.pop()
        t = type(v)
        if t is _BadNumber:
            return path, (f"a number of {len(v):,} characters (at most {MAX_NUMBER_CHARS:,})"
                          if len(v) > MAX_NUMBER_CHARS else f"the number {v[:40]} is out of range (a double's)")
        if t is str:
            if text and (m := _SURROGATE.search(v)):
                return path, _surrogate(v, m.start())
            continue
        if t is _Duplicate or t is dict:
            if len(path) >= MAX_DEPTH:
                return path, DEEP
            if t is _Duplicate:
                return path, f"duplicate key {_field([v.key])!r} in a JSON object (which value is meant?)"
            for k in v:
                if text and (m := _SURROGATE.search(k)):
                    return [*path, k], _surrogate(k, m.start(), "key")
            stack.extend((x, [*path, k]) for k, x in reversed(v.items()))
        elif t is list:
            if len(path) >= MAX_DEPTH:
                return path, DEEP
            stack.extend((x, [*path, i]) for i, x in reversed(list(enumerate(v))))
    return None


def _surrogate(s: str, at: int, what: str = "text") -> str:
    return (f"invalid Unicode: a lone surrogate U+{ord(s[at]):04X} in the {what} at character {at + 1} (half of a "
            "UTF-16 pair, which no UTF-8 text can hold)")


# ------------------------------------------------------------------------------------------ streams


def array_items(f: IO[bytes], key: str, *, text: bool = True) -> Iterator[Any]:
    """Each element of the array that the top-level object's `key` holds, built one at a time from
    ijson's events under the same limits (the rest of the document is parsed and checked, not built).
    ijson's own errors (`ijson.JSONError`: a file cut short, NaN, which its parser refuses) propagate
    as they are; the limits raise `JsonRefused` naming the field inside the element being read (the
    element after the last one yielded)."""
    yield from _events(f, key, text, stop=None)


def check_members(f: IO[bytes], stop: str) -> None:
    """Check a top-level object's members up to the key `stop`, building nothing, before a reader that
    streams them itself parses them (Inspect's header read: ijson with a prefix per level). Past a limit:
    `JsonRefused`; what ijson cannot parse at all (NaN, which Inspect reads another way; a cut) is left
    to that reader, whose own error says why."""
    import ijson

    try:
        for _ in _events(f, None, True, stop=stop):
            pass
    except ijson.JSONError:
        return


_SCALARS = frozenset(("string", "number", "boolean", "null"))


def _events(f: IO[bytes], key: str | None, text: bool, stop: str | None) -> Iterator[Any]:
    import ijson

    depth, top_key = 0, None
    in_target = False
    frames: list[list[Any]] = []  # [container, pending key] of the element being built

    def where() -> list[Any]:
        """The path inside the element being built (inside the top-level member outside the array)."""
        path: list[Any] = [] if in_target or top_key is None else [top_key]
        for i, (c, k) in enumerate(frames):  # a list's open child is its last element; else the next one
            path.append(k if isinstance(c, dict) else len(c) - (i < len(frames) - 1))
        return path

    def add(v: Any) -> None:
        """Attach to the container being built."""
        if frames:
            c, k = frames[-1]
            if isinstance(c, dict):
                c[k] = v
            else:
                c.append(v)

    try:
        for event, value in ijson.basic_parse(f, use_float=True):
            if event == "start_map" or event == "start_array":
                depth += 1
                if depth > MAX_DEPTH:
                    raise JsonRefused(DEEP, _keys_field(where()))
                if frames or (in_target and depth == 3):
                    c: Any = {} if event == "start_map" else []
                    add(c)
                    frames.append([c, None])
                elif depth == 2 and key is not None and top_key == key and event == "start_array":
                    in_target = True
            elif event == "end_map" or event == "end_array":
                depth -= 1
                if frames:
                    done = frames.pop()[0]
                    if not frames:
                        yield done
                elif in_target and depth == 1:
                    in_target = False
            elif event == "map_key":
                if text and (m := _SURROGATE.search(value)):
                    raise JsonRefused(_surrogate(value, m.start(), "key"), _field(where()))
                if depth == 1 and not frames:
                    top_key = value
                    if stop is not None and value == stop:
                        return
                elif frames:
                    if value in frames[-1][0]:
                        raise JsonRefused(f"duplicate key {_field([value])!r} in a JSON object (which value is "
                                          "meant?)", _field(where()[:-1]))
                    frames[-1][1] = value
            elif event in _SCALARS:
                if event == "string" and text and (m := _SURROGATE.search(value)):
                    raise JsonRefused(_surrogate(value, m.start()), _field(where()))
                if frames:
                    add(value)
                elif in_target and depth == 2:
                    yield value
    except UnicodeDecodeError:  # ijson's C parser meets a lone surrogate escape: not text
        raise JsonRefused("invalid Unicode: a lone surrogate (half of a UTF-16 pair, which no UTF-8 text can hold)",
                          _field(where())) from None
    except ijson.JSONError as e:
        if "integer overflow" in str(e) or "floating point) overflow" in str(e):
            raise JsonRefused("a number out of range (a 64-bit integer or a double)", _field(where())) from None
        raise
