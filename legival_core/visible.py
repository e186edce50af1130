"""Untrusted text on a terminal: shown, never obeyed (docs/security.md, "Terminals").

Trace text, teacher names, questions and file contents reach the terminal in every CLI view (`legival
steps`, the report table, `runs`, `diff`, `list`, errors that quote an input). A control character (ESC
starts a sequence that recolours, moves the cursor, retitles the window or rewrites the screen; CR
overwrites a line), a bidi control (U+202E turns the rest of a line around, so `evil.exe` reads
`exe.live`), a zero-width or other invisible format character, a line separator or a lone surrogate
is written as its escape (`\\x1b`, `\\u202e`, `\\U000e0001`): visible, and inert. `visible` is the one
function; the CLI's consoles pass every string they render through it (legival/console.py), the web
pages escape with HTML instead, and the closing JSON line keeps JSON's own escaping.
"""

from __future__ import annotations

import unicodedata
from functools import cache

__all__ = ["visible"]

UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Control, format (bidi, zero-width, tags), surrogate and line/paragraph separator characters."""
_PLANES = (0x0000, 0x10000, 0xE0000)
"""The planes that hold characters of those categories (tags and variation selectors: plane 14)."""


def _escape(cp: int) -> str:
    """Python's own escape of the character (`\\n`, `\\x1b`, `\\u202e`, `\\U000e0001`)."""
    return chr(cp).encode("unicode_escape").decode("ascii")


@cache
def _table(newlines: bool) -> dict[int, str]:
    """Code point -> its escape, for every unsafe character (computed once per process, ~50 ms)."""
    table = {cp: _escape(cp) for base in _PLANES for cp in range(base, base + 0x10000)
             if unicodedata.category(chr(cp)) in UNSAFE_CATEGORIES}
    if newlines:
        del table[ord("\n")], table[ord("\t")]
    return table


def visible(value: object, newlines: bool = False) -> str:
    """`value` as text a terminal shows as typed (module docstring). `newlines`: a newline and a tab
    stay (a multi-line text block); else they are escapes too (a table cell, one line)."""
    text = str(value)
    if text.isascii() and text.isprintable():  # the common case: nothing to escape
        return text
    return text.translate(_table(newlines))
