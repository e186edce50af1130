"""Efficiency metrics of one trace (SPEC section 3), as pure functions.

Embedding is the only expensive part, so it is split out: `max_prev_similarity` turns a trace's step
embeddings into r_i = max_{j<i} cos(e_i, e_j) once, and `redundancy` is then a count over r for any
threshold (the 21-value sweep costs nothing more).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from legival_core.registry import register
from legival_core.types import Steps

if TYPE_CHECKING:
    import numpy as np

TOKEN_LEN_VERSION = "1"
STEP_LEN_VERSION = "1"
REDUNDANCY_VERSION = "1"
LEXICAL_BACKTRACKING_VERSION = "1"

DEFAULT_TAU = 0.8
SWEEP_THRESHOLDS: tuple[float, ...] = tuple(round(i / 20, 2) for i in range(21))


def step_len(steps: Steps) -> int:
    """m, the number of non-blank Punkt sentences."""
    return steps.m


def max_prev_similarity(embeddings: np.ndarray) -> list[float]:
    """r_i = max_{j<i} cos(e_i, e_j) for i = 2..m, from L2-normalised rows (SPEC section 3).

    Returns m - 1 values (empty when m < 2): entry i-2 belongs to step i.
    """
    import numpy as np

    m = embeddings.shape[0]
    if m < 2:
        return []
    sims = embeddings @ embeddings.T
    # Row i keeps only columns j < i: mask the diagonal and everything after it.
    sims[np.triu_indices(m)] = -np.inf
    return [float(x) for x in sims[1:].max(axis=1)]


def redundancy(max_prev: Sequence[float], tau: float = DEFAULT_TAU) -> float:
    """#{i >= 2 : r_i > tau} / (m - 1); 0 when m < 2 (then `max_prev` is empty)."""
    if not max_prev:
        return 0.0
    return sum(1 for r in max_prev if r > tau) / len(max_prev)


def redundancy_sweep(
    max_prev: Sequence[float], thresholds: Sequence[float] = SWEEP_THRESHOLDS
) -> list[float]:
    """Redundancy at each threshold: the data of the elbow report."""
    return [redundancy(max_prev, t) for t in thresholds]


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


register("metric", "step_len", step_len)
register("metric", "redundancy", redundancy)
register("metric", "backtracking_lexical", lexical_backtracking)
