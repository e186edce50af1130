"""The table of an intervention experiment, read and checked once (`legival monitorability score`,
docs/monitorability.md): one row per sample, an instance column, the arm `x` (1: the hint was given),
the outcome `y` (1: the answer is the hint's target) and the monitor's flag `z` (1: it flagged the
reasoning), each 0 or 1, and optional grouping columns (teacher, cue, monitor...).

The file is read by `readers.tables.table_rows` (CSV plain, gzip or zstd, told by its first bytes, or
Parquet named `*.parquet` / `*.pq`), so a bad cell names its place: `FILE:LINE: field 'x': ...` in a CSV
file (the header is line 1), `FILE row N: field 'x': ...` in a Parquet file. Instance and group values
are read as text, so `7` in a CSV file and 7 in a Parquet file are the same instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from legival_core.readers.tables import table_rows

if TYPE_CHECKING:
    import polars as pl

__all__ = ["BINARY", "TableCellError", "read_intervention_table"]

BINARY = ("x", "y", "z")
"""The 0/1 columns: the arm, the outcome, the monitor's flag."""


class TableCellError(ValueError):
    """A bad cell: `where` (`FILE:LINE` or `FILE row N`), the field and what is wrong with it."""

    def __init__(self, where: str, field: str, message: str) -> None:
        super().__init__(f"{where}: field '{field}': {message}")
        self.where, self.field, self.message = where, field, message


def read_intervention_table(path: Path, instance: str = "instance", groups: Sequence[str] = ()) -> pl.DataFrame:
    """The table's rows as columns `*groups, instance` (text) and `x, y, z` (Int8, 0 or 1), in file
    order. Raises ValueError: `readers.input_files.InputFileError` for the whole file (missing, not CSV or
    Parquet, a column missing or named twice), `TableCellError` for its first bad cell (an empty instance
    or group, a value of x, y or z other than 0 or 1, a cell missing from a CSV row), or a ValueError
    naming the line of a CSV row that cannot be read."""
    import polars as pl

    keys = [*groups, instance]
    text: dict[str, list[str]] = {c: [] for c in keys}
    flags: dict[str, list[int]] = {c: [] for c in BINARY}
    for where, row in table_rows(path, [*keys, *BINARY]):
        for c in keys:
            value = row[c]
            cell = "" if value is None else str(value).strip()
            if not cell:
                raise TableCellError(where, c, "empty (every row names its instance and its groups)" if value is not None
                                     else "missing (a null, or a row with fewer cells than the header)")
            text[c].append(cell)
        for c in BINARY:
            flags[c].append(_flag(where, c, row[c]))
    return pl.DataFrame({**{c: pl.Series(c, v, dtype=pl.String) for c, v in text.items()},
                         **{c: pl.Series(c, v, dtype=pl.Int8) for c, v in flags.items()}})


def _flag(where: str, field: str, value: Any) -> int:
    """0 or 1 from a CSV cell ("0", "1") or a Parquet value (an integer, a boolean, or 0.0 / 1.0)."""
    if value is None:
        raise TableCellError(where, field, "missing (a null, or a row with fewer cells than the header): expected 0 or 1")
    if isinstance(value, str):
        cell = value.strip()
        if cell in ("0", "1"):
            return int(cell)
    elif isinstance(value, bool | int | float) and value in (0, 1):
        return int(value)
    shown = repr(value)
    raise TableCellError(where, field, f"expected 0 or 1, got {shown if len(shown) <= 60 else shown[:57] + '...'}")
