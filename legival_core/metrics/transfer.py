"""Transfer utility columns (SPEC section 4): FOTU, SOTU, regression rate, and the two numbers they
rest on. The maths is `legival_core.transfer.utility` (one vectorised implementation); the report
aggregates it per (teacher, dataset, student), then over students and datasets."""

from __future__ import annotations

from legival_core.metrics.base import metric

_SECTION = "SPEC §4"

metric("fotu", unit="fraction", direction="higher", section=_SECTION, stage="transfer", source="transfer",
       order=200, description="first-order transfer utility: mean over bins of the students' prefix curves")
metric("sotu", unit="entropy ratio", direction="higher", section=_SECTION, stage="transfer", source="transfer",
       level="teacher", order=210, description="second-order transfer utility: entropy of first-success bins / ln B")
metric("regression_rate", unit="fraction", direction="lower", section=_SECTION, stage="transfer",
       source="transfer", order=220, description="share of depth transitions where the student's correctness drops")
metric("student_baseline_acc", unit="fraction", direction=None, section=_SECTION, stage="transfer",
       source="transfer", order=240, description="the students' accuracy with no prefix (k = 0)")
metric("rr_count", unit="transitions", direction=None, section=_SECTION, stage="transfer", source="transfer",
       order=320, correlate=False,
       description="mean raw count of correctness drops per trace (the regression rate's numerator)")
