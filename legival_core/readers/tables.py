"""A user's table read row by row: CSV (plain, or gzip/zstd-compressed, opened through `input_files`) or
Parquet (named *.parquet or *.pq), each row with where it is (`FILE:LINE` for CSV, a quoted cell may span
lines; `FILE row N` for Parquet), so that a bad cell is named as `FILE:LINE: field 'F': ...`.

Only the columns asked for are read (a Parquet file's other columns are never decoded); a column that
is not there is an `InputFileError` listing the file's columns. Cells come as read: text for CSV (an
empty cell is ""), the Parquet column's type for Parquet (a null is None). What the cells must be is
the caller's to check.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from legival_core.readers.input_files import InputFileError, open_input, supported, text_lines

__all__ = ["READS", "csv_rows", "table_rows"]

READS = "this command reads CSV, plain or compressed with gzip or zstd, and Parquet"
BATCH = 4096


def _what_is_read(e: InputFileError) -> InputFileError:
    """The opener's error, ending with what a table reader reads."""
    return InputFileError(e.file, e.message.replace(supported(True), READS).replace(supported(False), READS))


def csv_rows(path: Path, columns: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, row by header) of every row of a CSV file, plain or gzip/zstd-compressed: `csv.DictReader`'s
    rows, numbered by the line the row ends on. A header without one of `columns` (or with one twice) is an
    `InputFileError`; a byte that is not UTF-8 or a row csv cannot read a ValueError naming the line;
    another container (a zip, a Parquet file) an `InputFileError` saying what it is."""

    reader = csv.DictReader(text_lines(path))
    try:
        header = list(reader.fieldnames or ())
        _missing(path, header, columns)
        for row in reader:
            yield reader.line_num, row
    except csv.Error as e:
        raise ValueError(f"{path}:{reader.line_num}: not a readable CSV row ({e})") from None


def _missing(path: Path, have: Sequence[str], columns: Sequence[str]) -> None:
    twice = sorted({c for c in columns if list(have).count(c) > 1})
    if twice:
        raise InputFileError(str(path), f"column {', '.join(map(repr, twice))} appears twice (which one is meant?)")
    gone = [c for c in columns if c not in have]
    if gone:
        shown = ", ".join(repr(c) for c in have[:20]) + (", ..." if len(have) > 20 else "") if have else "none"
        raise InputFileError(str(path), f"no column {', '.join(repr(c) for c in gone)} (its columns: {shown})")


def table_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, {column: cell}) of every row of a CSV or Parquet table, the `columns` only (module
    docstring). Raises `InputFileError` for a file that cannot be read as a table, ValueError (naming the
    line) for a CSV row that cannot be read."""
    try:
        with open_input(path, parquet=True) as f:
            parquet = f.format.kind == "parquet"
    except InputFileError as e:
        raise _what_is_read(e) from None
    if parquet:
        yield from _parquet_rows(path, columns)
        return
    try:
        for line, row in csv_rows(path, columns):
            yield f"{path}:{line}", {c: row.get(c) for c in columns}
    except InputFileError as e:
        raise _what_is_read(e) from None


def _parquet_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        _missing(path, names, columns)
        with pq.ParquetFile(path) as f:
            n = 0
            for batch in f.iter_batches(batch_size=BATCH, columns=list(dict.fromkeys(columns))):
                for row in batch.to_pylist():
                    n += 1
                    yield f"{path} row {n}", row
    except (pa.ArrowException, OSError) as e:
        raise InputFileError(str(path), f"not a readable Parquet file ({e})") from None
