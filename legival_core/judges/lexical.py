"""The `lexical` judge: the cue-based backtracking fallback (SPEC section 3), no model and no API.

Its values are the metric `backtracking` that the efficiency stage stores for every trace
(`legival_core/metrics/backtracking.py`); "judging" with it means making sure those rows exist
(`legival_core.stages.judge.run_judge`). It is registered so that `legival list judges` shows it and
a spec's `judge.name: lexical` validates against the registry.
"""

from __future__ import annotations

from legival_core.judges.factory import JudgeInfo
from legival_core.registry import register


class LexicalJudge:
    """Cue-based backtracking (steps that start with "Wait", "Let me re-check", ...); no API call."""

    name = "lexical"
    metric = "backtracking"
    """The efficiency stage's metric that holds its values."""


register("judge", "lexical", LexicalJudge, meta=JudgeInfo(llm=False, needs_model=False, batch=False))
