"""The stages: everything the store computes, one shape (docs/architecture.md, "One stage protocol").

`base` holds the protocol (`plan`, `run`, `commit`), `run_stage` (the only driver) and the executors;
`registered` the stage registry (`register_stage`, `stages_in_order`, the jobs of a run); `isolation`
per-unit fault isolation; `conditions` which failures are known conditions and which are bugs. Then
one module per stage: `ingest`, `generate`, `grade`, `efficiency` (segment and efficiency), `transfer`
(+ `transfer_shards`, `transfer_timing`), `judge` (+ `judge_batch`), `step_events`, `quality`, `rewards`,
`monitor`, `study`. The report stage is `legival_core.reports.stage`.

Nothing is imported here: the registry finds the stage modules by scanning this package.
"""
