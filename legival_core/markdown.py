"""The one escape of a value shown in a markdown table (docs/reports.md, "Safe outputs").

A teacher, dataset or student name comes from the traces: in a table cell it must neither break the
table (a `|` ends the cell, a newline the row) nor inject markup (a link, an image, emphasis, HTML).
`cell` makes any value plain text of one cell: newlines and other control characters become spaces,
markdown's inline punctuation is backslash-escaped (`\\|` stays in its cell), `<`, `>` and `&` become
HTML entities. The Prefect artifacts (`diff.diff_markdown`, `tasks.prefect_ui.rank_table`) write every
cell through it; `row` joins cells into one table line.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

__all__ = ["cell", "row"]

_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
"""Newlines (\\r, \\n, NEL, the Unicode line and paragraph separators) and every other control
character: one space, so that a row stays one line."""

_PUNCT = re.compile(r"([\\`*_\[\]|~])")
"""Markdown's inline punctuation: escapes, code, emphasis, links and images, table cells, strikeout
(`<`, `>`, `&` become entities instead: an escaped `&` would show the entity's text)."""


def cell(value: object) -> str:
    """`value` as the text of one markdown table cell, shown literally."""
    text = _BREAKS.sub(" ", str(value))
    return html.escape(_PUNCT.sub(r"\\\1", text))


def row(cells: Iterable[str]) -> str:
    """One table line from cells already made safe (`cell`) or fixed by the code (headers, numbers)."""
    return "| " + " | ".join(cells) + " |"
