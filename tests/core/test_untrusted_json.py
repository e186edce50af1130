"""The JSON boundary (legival_core/untrusted_json.py): limits on depth, number size, text and duplicate
keys, each refusal a `JsonRefused` naming the field and line; the same limits on ijson streams; and a
fuzz over any text and any JSON value: a value equal to Python's own reading, or a `JsonRefused`, never
another exception. The three hostile shapes of issue 45 (a 100,000-deep nesting, a 5,000-digit number,
a lone surrogate) come first; tests/cli/test_hostile_json.py sends them through the commands."""

from __future__ import annotations

import io
import json
import math
import pickle
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from legival_core.untrusted_json import (
    MAX_DEPTH,
    MAX_NUMBER_CHARS,
    JsonRefused,
    MalformedJson,
    array_items,
    check_members,
    decode_at,
    loads,
)

DEEP = '{"ok": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
LONG = '{"ok": 1, "n": ' + "1" * 5000 + "}"
SURROGATE = '{"ok": 1, "s": "a\\ud800b"}'


def refusal(doc: str | bytes, **kw: Any) -> JsonRefused:
    with pytest.raises(JsonRefused) as e:
        loads(doc, **kw)
    return e.value


@pytest.mark.parametrize(("doc", "field", "says"), [
    (DEEP, "x", f"JSON nested too deeply (more than {MAX_DEPTH} levels"),
    (LONG, "n", f"a number of 5,000 characters (at most {MAX_NUMBER_CHARS:,})"),
    (SURROGATE, "s", "invalid Unicode: a lone surrogate U+D800 in the text at character 2"),
], ids=["deep", "long-number", "lone-surrogate"])
def test_the_three_hostile_shapes_are_refused_naming_the_field(doc: str, field: str, says: str) -> None:
    e = refusal(doc)
    assert (e.field, e.line, says in e.msg) == (field, 1, True), (e.field, e.msg)
    assert str(e) == f"field '{field}': {e.msg}" and isinstance(e, json.JSONDecodeError | ValueError)
    assert not isinstance(e, MalformedJson)
    assert refusal(doc.encode()).field == field  # bytes: the same


@pytest.mark.parametrize(("doc", "field", "says"), [
    ("[" * 5000, "", "nested too deeply"),  # cut short and deep: the depth is what is named
    ('{"a":' * 100_000, "a.a.a.a...", "nested too deeply"),
    ('{"d": {"x": ' + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "}}", "d.x", "nested too deeply"),
    ('[1, {"n": -' + "9" * (MAX_NUMBER_CHARS + 1) + "}]", "[1].n", "characters (at most"),
    ('{"f": [0, 1e400]}', "f[1]", "the number 1e400 is out of range"),
    ('{"f": 1.' + "5" * (MAX_NUMBER_CHARS + 1) + "}", "f", "characters (at most"),
    ('{"k": {"\\udfff": 1}}', "k.\\udfff", "a lone surrogate U+DFFF in the key"),
    ('{"m": {"a": 1, "a": 2}}', "m", "duplicate key 'a'"),
    ('[{"a": 1, "a": 1}]', "[0]", "duplicate key 'a'"),
])
def test_other_shapes_past_a_limit(doc: str, field: str, says: str) -> None:
    e = refusal(doc)
    assert (e.field, says in e.msg) == (field, True), (e.field, e.msg)


@pytest.mark.parametrize(("doc", "line", "says"), [
    ('{"a": 1,\n "b": }', 2, "malformed JSON: Expecting value"),
    ('{"a": 1}\n{"b": 2}', 2, "malformed JSON: extra data"),
    (b'{"a": "\xff"}', 1, "not UTF-8 text: byte 0xff"),
    ("", 1, "malformed JSON"),
])
def test_what_is_not_json_is_malformed_with_its_line(doc: str | bytes, line: int, says: str) -> None:
    e = refusal(doc)
    assert isinstance(e, MalformedJson) and e.line == line and says in e.msg, (e.line, e.msg)


def test_what_is_within_the_limits_is_read_as_python_reads_it() -> None:
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads(at_limit) == json.loads(at_limit)
    refusal("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert loads("9" * MAX_NUMBER_CHARS) == int("9" * MAX_NUMBER_CHARS)
    assert loads('"\\ud83d\\ude00 \\u00e9"') == "\U0001f600 \u00e9"  # a surrogate pair is text
    assert loads(b'\xef\xbb\xbf{"a": [1.5, null, true]}') == {"a": [1.5, None, True]}  # BOM skipped
    assert math.isnan(loads('{"x": NaN}')["x"])  # Python's (and Inspect's) NaN: a field checks its range
    assert loads(SURROGATE, text=False)["s"] == "a\ud800b"  # left to a caller that checks text itself


def test_decode_at_reads_one_value_of_many_and_names_the_line() -> None:
    text = '[{"a": 1},\n {"b": "x\\ud800"}]'
    value, end = decode_at(text, 1)
    assert (value, text[end]) == ({"a": 1}, ",")
    with pytest.raises(JsonRefused) as e:
        decode_at(text, end + 1)
    assert (e.value.field, e.value.line, e.value.document) == ("b", 2, {"b": "x\ud800"})


def test_a_refusal_survives_pickling() -> None:
    """A worker process's refusal reaches the command that started it intact."""
    e = refusal(LONG)
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), str(back), back.field, back.line) == (JsonRefused, str(e), "n", 1)


# --------------------------------------------------------------------------------------------- streams


def stream(doc: str, key: str = "samples") -> list[Any]:
    return list(array_items(io.BytesIO(doc.encode()), key))


def test_a_stream_yields_each_element_under_the_same_limits() -> None:
    assert stream('{"head": {"x": [1]}, "samples": [{"a": [1, {"b": null}]}, "s", 2.5, []], "tail": 1}') == [
        {"a": [1, {"b": None}]}, "s", 2.5, []]
    for doc, field, says in [
        ('{"samples": [{"a": 1}, {"q": ' + "[" * 100_000, "q", "nested too deeply"),
        ('{"samples": [{"a": 1}, {"q": ' + "1" * 5000 + "}]}", "q", "a number out of range"),
        ('{"samples": [{"a": 1}, {"q": ["x", {"\\udfff": 1}]}]}', "q[1]", "lone surrogate"),
        ('{"samples": [{"b": {"c": 1, "c": 2}}]}', "b", "duplicate key 'c'"),
    ]:
        with pytest.raises(JsonRefused) as e:
            stream(doc)
        assert (e.value.field, says in e.value.msg) == (field, True), (doc[:60], e.value.field, e.value.msg)


def test_a_deep_stream_costs_no_memory_per_level() -> None:
    """ijson's items() keeps a prefix string per level (30,000 levels: 2 GB); the boundary's builder
    refuses at MAX_DEPTH whatever follows."""
    with pytest.raises(JsonRefused, match="nested too deeply"):
        stream('{"samples": [' + "[" * 1_000_000)


def test_the_header_check_stops_at_the_key_and_leaves_syntax_to_the_reader() -> None:
    check_members(io.BytesIO(b'{"version": 2, "eval": {"a": [1]}, "samples": [' + b"[" * 100_000), "samples")
    check_members(io.BytesIO(b'{"version": 2, "eval": {"score": NaN}}'), "samples")  # Inspect reads NaN itself
    with pytest.raises(JsonRefused) as e:
        check_members(io.BytesIO(b'{"eval": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b'}, "samples": []}'),
                      "samples")
    assert e.value.field == "eval"


# ------------------------------------------------------------------------------------------------- fuzz

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 63) + 1, 2 ** 63 - 1),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                       max_leaves=30)


def _has_surrogate(v: Any) -> bool:
    if isinstance(v, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in v)
    if isinstance(v, dict):
        return any(_has_surrogate(k) or _has_surrogate(x) for k, x in v.items())
    return isinstance(v, list) and any(_has_surrogate(x) for x in v)


@settings(max_examples=400, deadline=None)
@given(value=_VALUES)
def test_any_value_within_the_limits_reads_back_equal_or_is_refused_for_its_text(value: Any) -> None:
    doc = json.dumps(value)  # ascii escapes: a lone surrogate becomes "\\udxxx"
    if _has_surrogate(value):
        assert "lone surrogate" in refusal(doc).msg
        assert loads(doc, text=False) == value
    else:
        assert loads(doc) == value == json.loads(doc)
        assert stream(json.dumps({"samples": [value]})) == [value]


@settings(max_examples=600, deadline=None)
@given(text=st.lists(st.sampled_from([*'[]{}:,"\\ 0123456789.eE-+ntrufalsNI', "\\u", "\\ud800", "\\udc00", "\ud800",
                                       "\x00", "é"]), max_size=40).map("".join))
@example(text="[" * 3000)
@example(text='"\\ud800"')
@example(text="1" * 5000)
@example(text='{"a": 1, "a": 2}')
def test_any_text_is_a_value_or_a_refusal_never_a_crash(text: str) -> None:
    try:
        got = loads(text)
    except JsonRefused as e:
        assert isinstance(e.msg, str) and e.msg and (e.line is None or e.line >= 1)
        str(e).encode("utf-8")  # printable whatever the input held
        return
    assert got == json.loads(text) or (isinstance(got, float) and math.isnan(got))


@settings(max_examples=200, deadline=None)
@given(depth=st.integers(1, 3 * MAX_DEPTH), digits=st.integers(1, 3 * MAX_NUMBER_CHARS))
def test_the_limits_are_exact(depth: int, digits: int) -> None:
    nested = "[" * depth + "]" * depth
    if depth > MAX_DEPTH:
        assert "nested too deeply" in refusal(nested).msg
    else:
        assert loads(nested) == json.loads(nested)
    number = "7" * digits
    if digits > MAX_NUMBER_CHARS:
        assert refusal(number).msg.startswith(f"a number of {digits:,} characters")
    else:
        assert loads(number) == int(number)
