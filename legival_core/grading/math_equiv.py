"""MATH answer equivalence (SPEC section 2): normalised strings first, then math-verify in a worker.

The string pass decides most pairs in microseconds; only the rest pay for sympy, and they pay it in
the persistent worker process (`worker.py`) under a hard timeout, so one pathological answer costs
at most `timeout_s` and is reported as a timeout instead of hanging a run.
"""

from __future__ import annotations

from legival_core.grading.normalize import strip_string
from legival_core.grading.worker import MathVerifyWorker, Outcome, verify_in_worker


def _clean(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] == "$":
        s = s.strip("$")
    return s.strip()


def strings_equivalent(pred: str, gold: str) -> bool:
    """The cheap pass: Hendrycks-normalised strings are identical."""
    return strip_string(_clean(pred)) == strip_string(_clean(gold))


def math_equivalent(
    pred: str, gold: str, timeout_s: float | None = None, worker: MathVerifyWorker | None = None
) -> Outcome:
    """ "equal", "different" or "timeout" for a predicted MATH answer against the gold answer.

    math-verify is tried on the raw and on the normalised forms (both wrapped in `$...$`), because
    normalisation helps it with units and `x =` prefixes but can also hide structure it understands.
    `timeout_s=None` uses the process-wide default (5 s, see `worker.set_default_timeout`).
    """
    p, g = _clean(pred), _clean(gold)
    if not p:
        return "different"
    np_, ng = strip_string(p), strip_string(g)
    if np_ == ng:
        return "equal"
    pairs = [(g, p)]
    if (ng, np_) != (g, p):
        pairs.append((ng, np_))
    return verify_in_worker(pairs, timeout_s=timeout_s, worker=worker)
