"""Prefect tasks: the registered stages' jobs as tasks, with retries on transient failures. They
run in the driver process (the only DuckDB writer); model work fans out to Ray student engine actors
from `tasks.ray_pool`.

Modules: `tasks.stages` (one generic task per job of any registered stage, the shard runner, the
plan task), `tasks.transfer` (a shard outside a flow), `tasks.ray_pool` (the Ray engine pool),
`tasks.progress` (progress artifacts, the CLI bar, the progress file), `tasks.prefect_ui` (run names,
tags, the run logger, the rank-table artifact).
Nothing is imported here, so a Ray engine process importing `tasks.ray_pool` never loads Prefect.
"""
