"""Prefect tasks: thin, typed wrappers around `legival_core` stages, with retries on transient
failures. They run in the driver process (the only DuckDB writer); model work fans out to Ray
student engine actors from `tasks.ray_pool`.

Modules: `tasks.stages` (ingest, generate, grade, efficiency, judge, quality, report), `tasks.transfer`
(one task per teacher x dataset x student shard), `tasks.ray_pool` (the Ray engine pool),
`tasks.progress` (progress artifacts, the CLI bar, the progress file), `tasks.prefect_ui` (run names,
tags, the run logger, the rank-table artifact).
Nothing is imported here, so a Ray engine process importing `tasks.ray_pool` never loads Prefect.
"""
