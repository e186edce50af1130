"""Numbers in GSM8K answers: exact rational equality after stripping `,` `$` `%` (SPEC section 2).

Comparing `Fraction`s rather than floats makes `18.00 == 18` exact and `0.1 + 0.2`-style float noise
impossible; GSM8K gold answers are integers, so no tolerance is needed.
"""

from __future__ import annotations

import re
from fractions import Fraction

from legival_core.grading.extract import NUMBER_RE

_FRAC_RE = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(\d+)\}$")
_SLASH_RE = re.compile(r"^(-?\d+)\s*/\s*(\d+)$")
_DECIMAL_RE = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE]([+-]?\d+))?")
MAX_EXPONENT = 1000
"""Scientific notation beyond 10**MAX_EXPONENT is not read as a number (its exact value is too big)."""


def clean_number_text(s: str) -> str:
    """Remove money, percent and thousands-separator decoration, and LaTeX text wrappers."""
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = s.replace("{,}", "").replace("\\!", "").replace("\\,", "").replace(",", "")
    return s.strip().rstrip(".").strip()


def to_fraction(s: str) -> Fraction | None:
    """`"1,000"`, `"$18.00"`, `"25%"`, `"\\frac{3}{4}"`, `"3/4"`, `"1.5e3"` -> an exact Fraction; None
    otherwise (also for a number too large to hold exactly)."""
    t = clean_number_text(s).replace(" ", "")
    try:
        return _exact(t)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        return None


def _exact(t: str) -> Fraction | None:
    for rx in (_FRAC_RE, _SLASH_RE):
        m = rx.match(t)
        if m:
            groups = m.groups()
            sign = -1 if len(groups) == 3 and groups[0] == "-" else 1
            num, den = int(groups[-2]), int(groups[-1])
            return sign * Fraction(num, den) if den else None
    m = _DECIMAL_RE.fullmatch(t)
    if m is None:
        return None
    exponent = m.group(1)
    if exponent is not None and (len(exponent.lstrip("+-").lstrip("0")) > 6 or abs(int(exponent)) > MAX_EXPONENT):
        return None  # 1e999999999 has a billion digits: too big to compare exactly, so not read
    return Fraction(t)


def number_in(value: str) -> str | None:
    """The number an answer string states: the whole string if numeric, else the first number after
    the last `=` ("5 - 2 = 3" states 3), else the first number in it ("18 dollars" states 18)."""
    if to_fraction(value) is not None:
        return clean_number_text(value).replace(" ", "")
    tail = value.rsplit("=", 1)[-1]
    t = clean_number_text(tail)
    frac = re.search(r"-?\\[dt]?frac\{-?\d+\}\{\d+\}", t)
    m = NUMBER_RE.search(t)
    if frac and (m is None or frac.start() <= m.start()):
        return frac.group(0)
    return m.group(0).replace(",", "") if m else None


def numbers_equal(a: str, b: str) -> bool:
    fa, fb = to_fraction(a), to_fraction(b)
    return fa is not None and fb is not None and fa == fb
