"""Backtracking (SPEC section 3): the share of a trace's steps that revisit or correct earlier ones.

An LLM judge's verdict is preferred where one is stored (`legival judge`); every trace also gets the
lexical fallback computed here: a step counts when it STARTS with a backtracking cue ("Wait", "But
wait", "Let me re-check", ...). Every row and report records the method that produced it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from legival_core.metrics.base import MetricValue, TraceMetric, TraceText, metric
from legival_core.segment import SEGMENTER_VERSION
from legival_core.types import Steps, canonical_json

if TYPE_CHECKING:
    from legival_core.metrics.base import Efficiency

LEXICAL_BACKTRACKING_VERSION = "1"

BACKTRACKING_CUES: tuple[str, ...] = (
    "wait",
    "but wait",
    "but",
    "however",
    "hmm",
    "alternatively",
    "actually",
    "going back",
    "on second thought",
    "let me reconsider",
    "let me re-check",
    "let me recheck",
    "let me re-examine",
    "let me re-evaluate",
    "let me check again",
    "let me try again",
    "let me start over",
    "let me go back",
    "no, ",
    "oops",
    "i made a mistake",
    "that's not right",
    "that is not right",
    "scratch that",
)
_CUE_RE = re.compile(
    r"^[\s*_>#\-\"'(]*(?:" + "|".join(re.escape(c) for c in BACKTRACKING_CUES) + r")\b",
    re.IGNORECASE,
)


def lexical_backtracking_steps(steps: Steps) -> tuple[int, ...]:
    """Step numbers (1-based) that START with a backtracking cue (SPEC section 3, fallback method).

    Leading markdown/quote characters are skipped, so "**Wait**, ..." counts; a cue in the middle of
    a step does not.
    """
    return tuple(i + 1 for i, s in enumerate(steps.sentences()) if _CUE_RE.match(s))


def backtracking_fraction(flagged: Sequence[int], m: int) -> float:
    """|distinct flagged step numbers in 1..m| / m; 0 for a trace with no steps."""
    if m == 0:
        return 0.0
    return len({s for s in flagged if 1 <= s <= m}) / m


def lexical_backtracking(steps: Steps) -> float:
    return backtracking_fraction(lexical_backtracking_steps(steps), steps.m)


def compute_lexical_backtracking(traces: Sequence[TraceText], _cfg: Efficiency) -> list[MetricValue]:
    out = []
    for t in traces:
        flagged = lexical_backtracking_steps(t.steps)
        value = len(flagged) / t.steps.m if t.steps.m else 0.0
        out.append(MetricValue(value, "lexical", detail=canonical_json({"steps": list(flagged)})))
    return out


BACKTRACKING = TraceMetric("backtracking", LEXICAL_BACKTRACKING_VERSION, lambda _cfg: {"segmenter": SEGMENTER_VERSION},
                           compute_lexical_backtracking, judged=True)

metric("backtracking", unit="fraction", direction="lower", section="SPEC §3", stage="efficiency",
       stored=BACKTRACKING, order=140,
       description="share of steps that backtrack (LLM judge where stored, else the lexical cues)")
