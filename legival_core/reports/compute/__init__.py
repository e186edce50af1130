"""Every table of the report, computed from the store with no model call: `build.compute_report` (the
store reads, then `assemble`, the pure part) into `data.ReportData`. The trace table from the
registry's metric list (`trace_table`, `trace_export`), the aggregation levels (`aggregate`), bootstrap
intervals (`bootstrap`), ranks and correlations (`stats`), the Pareto frontier (`pareto`), the
redundancy elbow (`elbow`), why a number is missing (`coverage`, `missing`), the teacher-level columns
of the other stages (`columns`, `quality_table`, `rm_scores`, `monitoring`), the step effects
(`step_effects`, `step_logit`), the human student (`human`) and transfer numbers for a subset
(`transfer_view`).
"""
