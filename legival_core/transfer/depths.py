"""Rollout depths: the prefix lengths k (in steps) at which a student continues a teacher's trace.

SPEC section 4 ("Rollout depths") fixes `K = {0} ∪ {s, 2s, 3s, ... < m} ∪ {m}`. The released code of the
paper (ippolito-cmu/legible_cot_preprint) made a different choice, kept here as `preprint_depths` so that
the difference can be measured rather than argued about.
"""

from __future__ import annotations


def _check(m: int, step_interval: int) -> None:
    if m < 1:
        raise ValueError(f"m must be >= 1 (a trace with no steps takes no part in transfer), got {m}")
    if step_interval < 1:
        raise ValueError(f"step_interval must be >= 1, got {step_interval}")


def rollout_depths(m: int, step_interval: int = 3) -> tuple[int, ...]:
    """Depths K for a trace of m steps, ascending (SPEC section 4, "Rollout depths").

    `K = {0} ∪ {s, 2s, ... < m} ∪ {m}`: the empty prefix, every s-th step strictly before the end, and
    the full reasoning. Examples: m=1 -> (0, 1); m=3, s=3 -> (0, 3); m=7, s=3 -> (0, 3, 6, 7).
    """
    _check(m, step_interval)
    return (*range(0, m, step_interval), m)


def preprint_depths(m: int, step_interval: int = 3) -> tuple[int, ...]:
    """Depths used by the paper's released code, for comparison only (not the SPEC's K).

    `src/scripts/pedagogical_utility.py`, `process_datapoint` (commit 921eeddd), reads::

        sample_points = list(range(0, n, step_interval))
        if 0 not in sample_points:
            sample_points.insert(0, 0)
        if (n-1) not in sample_points and n > 0:
            sample_points.append(n-1)
        ...
        partial_reasoning = "\\n".join(sentences[:j])

    and `pedagogical_utility_experiment` calls it with `step_interval=3` (the function's own default is
    10). So the depths are `range(0, m, s)` plus `m - 1`, ascending and without duplicates.

    Differences from `rollout_depths` (the SPEC):

    - the full trace (k = m) is never shown to the student; the deepest prefix is m - 1 steps, so for
      m = 1 the only depth is 0;
    - when m - 1 is not a multiple of s it is added as an extra depth (m=7, s=3 -> (0, 3, 6), but
      m=8, s=3 -> (0, 3, 6, 7)), whereas the SPEC adds m;
    - the preprint's prefix of j steps is the first j sentences re-joined with "\\n", not the original
      text up to the end of step j (SPEC section 1 uses character spans).

    For n = 0 the preprint code yields [0]; here m >= 1 is required, as for `rollout_depths`, because a
    trace with no steps takes no part in transfer utility (SPEC section 4).
    """
    _check(m, step_interval)
    depths = set(range(0, m, step_interval))
    depths.add(m - 1)
    return tuple(sorted(depths))
