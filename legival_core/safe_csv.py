"""The one CSV writer of every report file, and its reader (docs/reports.md, "Safe outputs").

A spreadsheet runs a cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage return as a
formula: a teacher named `=HYPERLINK("http://x.invalid","click")` would be a live link in every
table that names it. `write_csv` neutralises such a text cell the OWASP way (CSV injection): it
gets a leading `'`, which a spreadsheet shows as text. Only text columns (String, Categorical,
Enum) and the header are touched: a number in a numeric column is written as the number (`-0.5`
stays `-0.5`), a null stays an empty cell.

A text cell that already begins with `'`s followed by one of those characters gets one more `'`, so
the encoding is one-to-one: `unescape` (one `'` removed from such a cell) gives back the value
written, whatever it was. `read_csv` reads a report CSV back with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

__all__ = ["DANGEROUS", "escape", "neutralised", "read_csv", "unescape", "write_csv"]

DANGEROUS = ("=", "+", "-", "@", "\t", "\r")
"""A spreadsheet cell beginning with one of these is a formula (OWASP, CSV injection)."""

PREFIX = "'"


def _formula_like(text: str) -> bool:
    """Begins with a dangerous character, after any `'` already in front of it."""
    return text.lstrip(PREFIX).startswith(DANGEROUS)


def escape(text: str) -> str:
    """One text cell as `write_csv` writes it."""
    return PREFIX + text if _formula_like(text) else text


def unescape(text: str) -> str:
    """The value of a cell `escape` wrote (the inverse of `escape`)."""
    return text[1:] if text.startswith(PREFIX) and _formula_like(text) else text


def _text_columns(frame: pl.DataFrame) -> list[str]:
    import polars as pl

    return [c for c, t in frame.schema.items() if t == pl.Utf8 or isinstance(t, (pl.Categorical, pl.Enum))]


def _formula_like_expr(col: pl.Expr) -> pl.Expr:
    import polars as pl

    bare = col.str.strip_chars_start(PREFIX)
    return pl.any_horizontal(*(bare.str.starts_with(c) for c in DANGEROUS))


def _escape_expr(name: str) -> pl.Expr:
    import polars as pl

    col = pl.col(name).cast(pl.Utf8)
    return pl.when(_formula_like_expr(col)).then(pl.lit(PREFIX) + col).otherwise(col).alias(name)


def _unescape_expr(name: str) -> pl.Expr:
    import polars as pl

    col = pl.col(name)
    marked = col.str.starts_with(PREFIX) & _formula_like_expr(col)
    return pl.when(marked).then(col.str.slice(1)).otherwise(col).alias(name)


def neutralised(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame as `write_csv` writes it: text cells and column names escaped, numbers untouched."""
    text = _text_columns(frame)
    if text:
        frame = frame.with_columns(*(_escape_expr(c) for c in text))
    if any(_formula_like(c) for c in frame.columns):
        frame = frame.rename({c: escape(c) for c in frame.columns})
    return frame


def write_csv(frame: pl.DataFrame, path: str | Path) -> None:
    """Write `frame` to `path` as CSV, every text cell neutralised (the module's docstring). Raises
    OSError when the file cannot be written."""
    neutralised(frame).write_csv(Path(path))


def read_csv(path: str | Path, **options: Any) -> pl.DataFrame:
    """A CSV that `write_csv` wrote, its text cells and column names back as they were (`options` go
    to `polars.read_csv`)."""
    import polars as pl

    frame = pl.read_csv(Path(path), **options)
    text = _text_columns(frame)
    if text:
        frame = frame.with_columns(*(_unescape_expr(c) for c in text))
    if any(c.startswith(PREFIX) for c in frame.columns):
        frame = frame.rename({c: unescape(c) for c in frame.columns})
    return frame
