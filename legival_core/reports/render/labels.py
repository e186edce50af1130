"""Short, distinct, drawable labels for names in figures (teachers, students, reward models).

A name comes from the user (a model id, a file name): it may be 300 characters long, in a script the
figure font cannot draw, or hold control characters. Drawn as typed, one such name widens every
figure it appears in until `tight_layout` gives up ("Tight layout not applied") and the axes are
squashed, and matplotlib warns about each missing glyph. So a figure draws `short_labels(names)`:
each name cleaned of what the font cannot draw, shortened to at most `WIDTH` columns with an
ellipsis in the middle (the organisation prefix and the size/variant suffix of a model id are what
tell teachers apart), and made distinct among the names of that figure. The full names stay in the
CSV tables and in the dashboard's tooltips.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable, Iterable
from functools import cache

WIDTH = 32
"""The most display columns a label takes (an East Asian wide character counts two)."""

_ELLIPSIS = "…"
_HEAD_TAIL = 6  # characters kept at each end when a label shows the place where two names differ


@cache
def _charmap() -> frozenset[int]:
    """The code points the figures' font has glyphs for (matplotlib's default family)."""
    import matplotlib
    from matplotlib import font_manager, ft2font

    path = font_manager.findfont(font_manager.FontProperties(family=matplotlib.rcParams["font.family"]))
    return frozenset(ft2font.FT2Font(path).get_charmap())


def _columns(ch: str) -> int:
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width_of(text: str) -> int:
    """Display columns of `text`: one per character, two for an East Asian wide one."""
    return sum(_columns(c) for c in text)


def drawable(name: str) -> str:
    """`name` as the font can draw it on one line: whitespace and line breaks become one space,
    invisible format characters (bidi overrides, joiners) are dropped, and a character without a
    glyph becomes the replacement character (so no 'Glyph missing' warning, no tofu box)."""
    have = _charmap()
    missing = "\ufffd" if 0xFFFD in have else "?"
    out: list[str] = []
    for ch in name:
        cat = unicodedata.category(ch)
        if cat[0] == "Z" or ch.isspace() or cat == "Cc":
            if out and out[-1] != " ":
                out.append(" ")
        elif cat in ("Cf", "Cs", "Co", "Cn"):
            continue
        else:
            out.append(ch if ord(ch) in have else missing)
    return "".join(out).strip()


def _take(text: str, budget: int) -> str:
    """The longest prefix of `text` within `budget` display columns."""
    used = 0
    for i, ch in enumerate(text):
        used += _columns(ch)
        if used > budget:
            return text[:i]
    return text


def _take_end(text: str, budget: int) -> str:
    return _take(text[::-1], budget)[::-1]


def shorten(text: str, width: int = WIDTH) -> str:
    """`text` (already `drawable`) within `width` columns: unchanged when it fits, else its start and
    its last third joined by an ellipsis."""
    if width_of(text) <= width:
        return text
    tail = _take_end(text, (width - 1) // 3)
    head = _take(text, width - 1 - width_of(tail)).rstrip()
    return head + _ELLIPSIS + tail.lstrip()


def _excerpt(text: str, at: int, width: int) -> str:
    """`text` within `width` columns showing its start, the characters from just before position
    `at` on, and its end, with an ellipsis for each part left out."""
    if width_of(text) <= width:
        return text
    head = _take(text, _HEAD_TAIL)
    tail = _take_end(text[len(head):], _HEAD_TAIL)
    start = max(len(head), at - 3)
    end_of_mid = len(text) - len(tail)
    budget = width - width_of(head) - width_of(tail) - (start > len(head)) - 1
    mid = _take(text[start:end_of_mid], budget)
    gap_after = start + len(mid) < end_of_mid
    return head + (_ELLIPSIS if start > len(head) else "") + mid + (_ELLIPSIS if gap_after else "") + tail


def _common_prefix(texts: list[str]) -> int:
    first, last = min(texts), max(texts)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return n


def _collisions(labels: dict[str, str]) -> list[list[str]]:
    by_label: dict[str, list[str]] = {}
    for name, label in labels.items():
        by_label.setdefault(label, []).append(name)
    return [sorted(group) for group in by_label.values() if len(group) > 1]


Relabel = Callable[[list[str], dict[str, str], int, set[str]], dict[str, str]]


def _at_difference(group: list[str], clean: dict[str, str], width: int, _taken: set[str]) -> dict[str, str]:
    """Names that share their start and end: show where they first differ."""
    at = _common_prefix([clean[n] for n in group])
    return {n: _excerpt(clean[n], at, width) for n in group}


def _hashed(group: list[str], clean: dict[str, str], width: int, _taken: set[str]) -> dict[str, str]:
    """Names that differ only where the font cannot draw them: a short digest of the full name."""
    return {n: shorten(clean[n], width - 7) + "~" + hashlib.sha1(n.encode("utf-8", "surrogatepass")).hexdigest()[:6]
            for n in group}


def _numbered(group: list[str], clean: dict[str, str], width: int, taken: set[str]) -> dict[str, str]:
    """The last resort, always distinct: a counter not yet used by any label."""
    out: dict[str, str] = {}
    k = 1
    for n in group:
        while True:
            suffix = f"#{k}"
            k += 1
            label = shorten(clean[n], width - len(suffix)) + suffix
            if label not in taken:
                break
        taken.add(label)
        out[n] = label
    return out


_STEPS: tuple[Relabel, ...] = (_at_difference, _hashed, _numbered)


def short_labels(names: Iterable[str], width: int = WIDTH) -> dict[str, str]:
    """Each distinct name -> its figure label: drawable, at most `width` columns (and characters), and
    no two names with the same label. Depends only on the set of names, so one figure (or one report)
    labels a name the same way wherever it appears."""
    if width < 16:
        raise ValueError(f"a label width of {width} leaves no room to tell names apart (need >= 16)")
    unique = sorted({str(n) for n in names})
    clean = {n: drawable(n) or "?" for n in unique}
    labels = {n: shorten(clean[n], width) for n in unique}
    for step in _STEPS:
        groups = _collisions(labels)
        if not groups:
            break
        taken = set(labels.values())
        for group in groups:
            labels.update(step(group, clean, width, taken))
    assert not _collisions(labels), "short_labels: _numbered always ends collisions"
    return labels
