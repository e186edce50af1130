"""Reward-model scores (paper section 5.3): the teacher's mean of each RM metric over its traces.

Each RM of `rewards.models.DEFAULT_MODELS` has its columns registered (`rm_<name>` for a scalar RM,
`rm_<name>_min|mean|last` for a process RM), so teacher_metrics.csv has them whether or not
`legival rm` ran; an RM run with another `--model` adds its columns to the `rm` family. RM scores
are compared with transfer utility, not ranked: no direction."""

from __future__ import annotations

from legival_core.metrics.base import metric
from legival_core.rewards.models import DEFAULT_MODELS

_SECTION = "paper §5.3"

metric("rm", unit="score", direction=None, section=_SECTION, stage="rewards", source="rewards", level="trace",
       order=500, in_teacher_dataset=False, family=True,
       description="reward-model scores of other RMs, one column per RM (rm_<name>[_min|_mean|_last])")
for _i, _spec in enumerate(DEFAULT_MODELS):
    for _col in _spec.columns():
        metric(_col, unit="score", direction=None, section=_SECTION, stage="rewards", source="rewards",
               level="trace", order=501 + _i, in_teacher_dataset=False,
               description=f"mean {_spec.kind} reward of {_spec.model}" + (
                   f" ({_col.rsplit('_', 1)[1]} over steps)" if _spec.kind == "prm" else ""))
