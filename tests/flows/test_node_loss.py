"""Node loss on a real two-node Ray cluster: the student engines run on the worker node (its label),
that node is killed in the middle of a transfer, and the shards still finish: the engines are
recreated on the surviving node, the lost chunks run again, and the store ends identical to an
uninterrupted run's, with no rollout committed twice (docs/orchestration.md, "Node loss")."""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from legival_core.run_config import Execution, student_config  # noqa: E402
from legival_core.stages.base import run_stage  # noqa: E402
from legival_core.stages.efficiency import ensure_steps  # noqa: E402
from legival_core.stages.ingest import ingest_file  # noqa: E402
from legival_core.stages.transfer import TransferStage  # noqa: E402
from legival_core.store import Store  # noqa: E402
from legival_core.transfer.rollout_plan import StudentConfig  # noqa: E402
from tests.flows._orchestration import small_traces, table_snapshot  # noqa: E402

pytestmark = pytest.mark.slow

LABELS = {"legival.io/engine": "student"}
SHARDS = (("openai/gpt-oss-20b", 4), ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", 4))  # 34 + 13 rollouts


def _config(delay_s: float) -> StudentConfig:
    return student_config(name="scripted", backend="scripted-demo", model="scripted-demo-v1",
                          backend_options={"delay_s": delay_s}, max_new_tokens=24, step_interval=2)


def test_worker_node_killed_mid_transfer(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    from tasks.progress import BOARD
    from tasks.ray_pool import get_pool, shutdown_pools
    from tasks.store_lock import close_stores
    from tasks.transfer import ShardStage, run_shard

    shutdown_pools()  # no pool or Ray left by another test: the engines must join the cluster below
    ray.shutdown()
    db, ref_db = tmp_path / "store.duckdb", tmp_path / "reference.duckdb"
    with Store(db) as store:
        ingest_file(store, small_traces(tmp_path / "traces.jsonl"))
        ensure_steps(store)
    shutil.copy(db, ref_db)
    with Store(ref_db) as store:  # the uninterrupted run: in-process, one trace per chunk as below
        for teacher, limit in SHARDS:
            run_stage(ShardStage(TransferStage(_config(0.0), teacher, "gsm8k", limit, 1)), store)

    # Ray's default health checks: the lost engine's calls fail ~2 s after the kill (its connection
    # drops: ActorUnavailableError), before the head marks the node dead (~15 s)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    worker = cluster.add_node(num_cpus=2, labels=LABELS)
    execution = Execution(ray_address=cluster.address, max_concurrent_engines=2, cpus_per_engine=1,
                          traces_per_chunk=1, engine_labels=LABELS, retries=1)
    config = _config(0.1)  # ~0.5-2 s per chunk (one trace, 4-17 rollouts): the kill lands mid-transfer
    committed = threading.Event()
    seen: list[tuple[int, int]] = []

    def sink(done: int, total: int) -> None:
        seen.append((done, total))
        if done > 0:
            committed.set()

    BOARD.clear()
    BOARD.add_sink(sink)
    try:
        cluster.wait_for_nodes()
        with ThreadPoolExecutor(len(SHARDS)) as threads:  # shard tasks run concurrently, sharing one pool
            futures = [threads.submit(run_shard, str(db), config, t, "gsm8k", limit, execution)
                       for t, limit in SHARDS]
            deadline = time.monotonic() + 120
            while not committed.wait(0.05):
                for f in futures:
                    if f.done():
                        f.result()  # a shard that failed raises here
                        pytest.fail("a shard finished before any chunk was committed")
                assert time.monotonic() < deadline, "no chunk committed"
            at_kill = seen[-1]
            cluster.remove_node(worker, allow_graceful=False)
            killed = time.monotonic()
            results = [f.result(timeout=180) for f in futures]
        recovery_s = time.monotonic() - killed
        pool = get_pool(TransferStage(config).work(), execution)
        head = ray.get_runtime_context().get_node_id()  # the driver's node
        replaced, nodes = pool.replaced, set().union(*pool.nodes.values())
    finally:
        BOARD.clear()
        shutdown_pools()  # the engines, and the Ray connection the pool opened on its owner thread
        close_stores()
        cluster.shutdown()

    total = sum(r.summary.rollouts_total for r in results)
    assert 0 < at_kill[0] < total, "the node was not killed mid-transfer"
    # the engines ran on the labelled worker node first; the lost ones were recreated on the head
    assert nodes == {worker.node_id, head} and replaced >= 1
    # every rollout committed exactly once (a chunk committed twice would count twice)
    assert all(r.summary.rollouts_generated == r.summary.rollouts_total > 0 for r in results)
    assert all(r.summary.rollouts_cached == 0 for r in results)
    assert seen[-1] == (total, total)
    assert table_snapshot(db) == table_snapshot(ref_db)
    assert recovery_s < 60
