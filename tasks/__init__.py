"""Prefect tasks: the registered stages' jobs as tasks, with retries on transient failures. They
run in the driver process (the only DuckDB writer); model work fans out to Ray student engine actors
from `tasks.ray_pool`.

Modules: `tasks.stages` (one generic task per job of any registered stage, the shard runner, the
plan task), `tasks.transfer` (a shard outside a flow), `tasks.ray_pool` (the Ray engine pool),
`tasks.local_ray` (a run's local Ray, started clean), `tasks.infra` (the Ray cluster and the Prefect API
checked before work), `tasks.progress` (progress artifacts, the CLI bar, the progress file),
`tasks.prefect_ui` (run names, tags, the run logger, the rank-table artifact), `tasks.run_log` (the
run's log file), `tasks.reward_serve` (the reward server on Ray Serve), `tasks.store_lock` (the driver's
one store connection), `tasks._retry` (what is retried), `tasks.lifecycle` (a cancel from Prefect's
API, the processes a run owns).
Nothing is imported here, so a Ray engine process importing `tasks.ray_pool` never loads Prefect.
"""
