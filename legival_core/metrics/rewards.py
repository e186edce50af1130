"""Reward-model scores (paper section 5.3): one column per stored RM metric, `rm_<name>` for a scalar
RM and `rm_<name>_min|mean|last` for a process RM, the teacher's mean over its traces. A family:
its columns are the RMs that were run (`legival rm`)."""

from __future__ import annotations

from legival_core.metrics.base import metric

metric("rm", unit="score", direction=None, section="paper §5.3", stage="rewards", source="rewards", level="trace",
       order=500, in_teacher_dataset=False, family=True,
       description="reward-model scores, one column per RM (rm_<name>[_min|_mean|_last])")
