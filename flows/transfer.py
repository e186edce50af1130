from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from flows._common import driver_session, load_run, selected_teachers
from tasks.prefect_ui import run_name, tagged
from tasks.ray_pool import loaded_engines, release_pool, shutdown_pools
from tasks.transfer import student_work_key, transfer_shard_task


@flow(name="transfer", flow_run_name=run_name("transfer"),
      task_runner=ThreadPoolTaskRunner(max_workers=4))  # type: ignore[arg-type]
def transfer(spec: str, db: str | None = None, teachers: list[str] | None = None) -> dict[str, Any]:
    """One task per (teacher, dataset, student) shard; each fans out on Ray.

    Students take turns: one student's shards run concurrently on its engines, then its engines are
    released before the next student's load. `execution.max_concurrent_engines` engines of one student
    fill the cluster, so a second student's engines could not be placed until the first's are gone
    (on 2 CPUs with one 2-CPU engine, submitting both students at once waited forever)."""
    s, dbp, _ = load_run(spec, db)
    shard = transfer_shard_task.with_options(retries=s.execution.retries)
    chosen = selected_teachers(s, teachers)
    shards: list[dict[str, Any]] = []
    engines = 0
    with driver_session(dbp, s.execution), tagged(s, [t.name for t in chosen]):
        for st in s.students:
            config = s.student_config(st)
            futures = [shard.submit(dbp, config, t.name, d, s.transfer.limit, s.execution)
                       for t in chosen for d in s.datasets]
            shards += [f.result().as_dict() for f in futures]
            engines += loaded_engines()
            release_pool(student_work_key(config))
        # The engines' work is done: stop them (and a local Ray) now, so that the stages after
        # transfer in the benchmark flow do not share the CPUs with idle engines and Ray's daemons.
        shutdown_pools()
    totals = {k: sum(x[k] for x in shards) for k in
              ("rollouts_total", "rollouts_cached", "rollouts_generated", "forced", "overflow", "prompt_tokens",
               "decode_tokens")}
    return {**totals, "engines_loaded": engines, "shards": shards}
