"""Monitorability (paper section 5.2): how well a supervisor model tells a teacher's wrong traces
(sabotaged or natural) from its correct ones; precision/recall/F1 of "incorrect" per teacher."""

from __future__ import annotations

from legival_core.metrics.base import metric

for _i, _name in enumerate(("precision", "recall", "f1")):
    metric(f"monitor_{_name}", unit="fraction", direction="higher", section="paper §5.2", stage="monitor",
           source="monitor", level="teacher", order=400 + _i, in_teacher_dataset=False,
           description=f"supervisor {_name} at flagging incorrect traces")
