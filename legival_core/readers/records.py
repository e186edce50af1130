"""Reading JSONL files with errors that say where the bad data is.

`jsonl_records` is the one JSONL reader of the input commands (`legival ingest`, `legival grade`,
`legival z3`): every line is a record or a `LineProblem` naming the line, the field ('<encoding>' or
'<json>') and what is wrong, so a caller can stop or skip; nothing it reads raises (a UTF-8 BOM at
the start is accepted, a line nested too deeply for the JSON parser is a problem, not a crash).

`read_jsonl_records` reads the same from a file, as a stream, plain or gzip/zstd-compressed
(`legival_core.readers.input_files`: any other container raises `InputFileError`, naming it).

Dataset loaders use `read_jsonl`, which raises `ValueError` naming the file, the line and the field,
so a corrupt row is fixed at its source instead of surfacing later as a wrong grade. (It lives with
the other readers of what users give, in `legival_core.readers`, a layer the dataset modules may
import.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legival_core import untrusted_json
from legival_core.readers.input_files import read_lines

BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class LineProblem:
    """A JSONL line that is not a record: `field` is '<encoding>' or '<json>'."""

    line: int
    field: str
    message: str


def parse_json_line(raw: bytes, line: int, text: bool = False) -> dict[str, Any] | LineProblem:
    """One JSONL line (bytes, no newline) as a JSON object, or what is wrong with it, read through the
    JSON boundary (`legival_core.untrusted_json`: depth, number size, duplicate keys; with `text`, lone
    surrogates too). Without `text` a lone surrogate is left to the caller: ingest checks every string of
    a record itself (`trace_records.checked_text`), naming the field, and `--repair-text` replaces it."""
    try:
        text_ = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return LineProblem(line, "<encoding>", f"invalid UTF-8 byte 0x{raw[e.start]:02x} at column {e.start + 1}")
    try:
        rec = untrusted_json.loads(text_, text=text)
    except untrusted_json.JsonRefused as e:
        return LineProblem(line, e.field or "<json>", e.msg)
    if not isinstance(rec, dict):
        return LineProblem(line, "<json>", "each line must be a JSON object")
    return rec


def jsonl_records(data: bytes) -> Iterator[tuple[int, dict[str, Any] | LineProblem]]:
    """(1-based line number, record or problem) for every non-blank line of a JSONL file's bytes.
    A UTF-8 byte order mark at the start of the file is skipped."""
    if data.startswith(BOM):
        data = data[len(BOM):]
    return jsonl_lines(enumerate(data.split(b"\n"), start=1))


def jsonl_lines(lines: Iterable[tuple[int, bytes]], text: bool = False) -> Iterator[tuple[int, dict[str, Any] | LineProblem]]:
    """(line number, record or problem) for every non-blank one of numbered raw lines (`text`: as
    `parse_json_line`)."""
    for i, raw in lines:
        if raw.strip():
            yield i, parse_json_line(raw, i, text)


def read_jsonl_records(path: Path) -> Iterator[tuple[int, dict[str, Any] | LineProblem]]:
    """`jsonl_records` of a file, read as a stream whatever compresses it (`input_files`): a file
    that is not JSONL, or whose compressed stream is cut short, raises `InputFileError`. A lone
    surrogate in any string is a problem of its line (`legival grade`, `z3`, `judge-agreement --human`
    check no text of their own)."""
    return jsonl_lines(read_lines(Path(path)), text=True)


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(0-based row index, record) for each non-blank line; the index counts records, not lines.
    Plain, gzip or zstd JSONL (`input_files`); anything else raises `InputFileError`, a ValueError."""
    path = Path(path)
    index = 0
    for lineno, raw in read_lines(path):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad = f"invalid UTF-8 byte 0x{raw[e.start]:02x} at column {e.start + 1}"
            raise ValueError(f"{path}:{lineno}: {bad}") from None
        try:
            rec = untrusted_json.loads(line)
        except untrusted_json.JsonRefused as e:
            raise ValueError(f"{path}:{lineno}: bad JSON ({e})") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        yield index, rec | {"__line__": lineno}
        index += 1


def field(rec: dict[str, Any], name: str, path: Path, kind: type = str) -> Any:
    """rec[name], checked for presence and type."""
    line = rec.get("__line__", "?")
    if name not in rec or rec[name] is None:
        raise ValueError(f"{path}:{line}: missing field {name!r}")
    value = rec[name]
    if kind is str and isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, kind):
        raise ValueError(
            f"{path}:{line}: field {name!r} should be {kind.__name__}, got {type(value).__name__}"
        )
    return value
