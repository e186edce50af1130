"""Monitorability (paper section 5.2): how well a supervisor model tells a teacher's wrong traces
(sabotaged or natural) from its correct ones; precision/recall/F1 of "incorrect" per teacher."""

from __future__ import annotations

from legival_core.metrics.base import metric

for _i, _name in enumerate(("precision", "recall", "f1")):
    metric(f"monitor_{_name}", unit="fraction", direction="higher", section="paper §5.2", stage="monitor",
           source="monitor", level="teacher", order=400 + _i, in_teacher_dataset=False,
           description=f"supervisor {_name} at flagging incorrect traces")

# Monitorability as labs report it (issue 48, docs/monitorability.md): hint interventions scored with
# g-mean² (Guan et al. 2025) and the verbalisation rate (Chen et al. 2025), per teacher: the means over
# cues of the first monitor's CoT-only scope (every cue x monitor x scope in monitorability.csv).
metric("gmean2", unit="fraction", direction="higher", section="Guan et al. 2025 (arXiv 2512.18311)",
       stage="hint_monitor", source="interventions", level="teacher", order=410, in_teacher_dataset=False, rank=False,
       correlate=False, description="g-mean² of a monitor on hint interventions (TPR x TNR, cross-fit bootstrap)")
metric("verbalisation_rate", unit="fraction", direction="higher", section="Chen et al. 2025 (arXiv 2505.05410)",
       stage="hint_monitor", source="interventions", level="teacher", order=411, in_teacher_dataset=False, rank=False,
       correlate=False, description="share of hint-following answers whose reasoning the monitor finds says so")
