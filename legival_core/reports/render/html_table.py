"""One table of the dashboard's paper sections as HTML (every cell escaped: names come from traces and
configs), and how a cell is printed."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def fmt_cell(v: object) -> str:
    """One cell as the dashboard prints it: '–' for a missing value, integers as integers, floats with
    at most 4 decimals (trailing zeros dropped)."""
    if v is None:
        return "\u2013"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return "\u2013"
        text = f"{v:.4f}".rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text
    return str(v)


def table_html(frame: pl.DataFrame, name: str) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{e(fmt_cell(v))}</td>" for v in row) + "</tr>"
                   for row in frame.iter_rows())
    return (f'<div class="scroll ptable"><table class="grid" data-file="{e(name)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def empty_html(name: str, why: str) -> str:
    """What stands where a file's table would: why it is empty (not run: which command; unavailable:
    why), escaped, tagged with the file (the browser test reads `data-file`)."""
    return f'<p class="empty" data-file="{html.escape(name)}">{html.escape(why)}</p>'
