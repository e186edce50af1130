"""The student engine pool on a real Ray: rows as in-process, routing, lazy model loads."""

from __future__ import annotations

from collections import defaultdict

import pytest

ray = pytest.importorskip("ray")

from legival_core.run_config import Execution, student_config  # noqa: E402
from legival_core.stages.efficiency import ensure_steps  # noqa: E402
from legival_core.stages.ingest import ingest_file  # noqa: E402
from legival_core.stages.transfer import TransferStage, TransferSummary, rollout_chunk  # noqa: E402
from legival_core.transfer.students import make_student_backend  # noqa: E402
from tasks.ray_pool import EnginePool, engine_for  # noqa: E402
from tests.conftest import REPO  # noqa: E402

DATA = REPO / "examples" / "data" / "gsm8k_md_eval_cot_5teachers.jsonl"
CONFIG = student_config(name="s", backend="scripted-demo", model="scripted-demo-v1", max_new_tokens=24)
STAGE = TransferStage(CONFIG, limit=2, traces_per_chunk=3)
WORK = STAGE.work()


@pytest.fixture(autouse=True)
def _ray_down():
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    from legival_core.store import Store

    with Store(tmp_path_factory.mktemp("pool") / "s.duckdb") as store:
        ingest_file(store, DATA)
        ensure_steps(store)
        return STAGE.plan(store)


def _sorted(rows):
    return sorted(rows, key=lambda r: (r["trace_id"], r["k"]))


def test_pool_rows_equal_in_process(plan) -> None:
    ray.init(address="local", num_cpus=2, include_dashboard=False)  # never another test's cluster
    pool = EnginePool(Execution(max_concurrent_engines=2, cpus_per_engine=1, traces_per_chunk=3))
    got = [row for batch in pool.run(WORK, plan.units) for res in batch for row in res.rows]
    want = rollout_chunk(make_student_backend(CONFIG), CONFIG, plan.units, TransferSummary())
    assert len(got) == sum(len(p) for _, p in plan.units) > 0
    assert _sorted(got) == _sorted(want)
    assert pool.loaded_engines() == 2  # each engine loaded its backend once
    pool.reset()


def test_no_work_starts_no_engine(plan) -> None:
    pool = EnginePool(Execution(max_concurrent_engines=2))
    assert list(pool.run(WORK, [])) == []
    assert pool.actors == [] and not ray.is_initialized()


def test_routing_on_two_nodes_keeps_trace_prefixes_together_in_order(plan) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address)
        cluster.wait_for_nodes()
        pool = EnginePool(Execution(max_concurrent_engines=2, cpus_per_engine=1))
        ks: dict[str, list[int]] = defaultdict(list)
        for batch in pool.run(TransferStage(CONFIG, limit=2, traces_per_chunk=2).work(), plan.units):
            for res in batch:
                for r in res.rows:
                    ks[r["trace_id"]].append(r["k"])
        assert all(v == sorted(v) for v in ks.values()), "prefixes of a trace out of ascending order"
        histories = pool.histories()
        assert len(histories) == 2 and all(histories)
        engine_of_trace: dict[str, int] = {}
        for e, hist in enumerate(histories):
            for tid in hist:
                assert engine_of_trace.setdefault(tid, e) == e, "a trace's prefixes went to two engines"
                assert engine_for(tid, 2) == e
        assert set(engine_of_trace) == {t.trace_id for t, _ in plan.units}
        # one node per engine (num_cpus=1 each on 1-CPU nodes): the work really spread over two nodes
        assert len({n for ns in pool.nodes.values() for n in ns}) == 2
        pool.reset()
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_ray_starts_and_stops_on_one_owner_thread() -> None:
    """Shard tasks run on Prefect worker threads; Ray must be started and stopped on one thread
    (ray.shutdown elsewhere waits ~15 s, docs/orchestration.md)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from tasks.ray_pool import on_ray_owner_thread

    here = on_ray_owner_thread(threading.get_ident)
    with ThreadPoolExecutor(2) as pool:
        there = {pool.submit(on_ray_owner_thread, threading.get_ident).result() for _ in range(4)}
    assert there == {here} and here != threading.get_ident()


def test_prewarm_starts_and_loads_engines_before_work(plan) -> None:
    """The benchmark flow prewarms while efficiency runs: Ray and the actors start and load their
    backends in the background; the work submitted later goes to those same engines."""
    from tasks.ray_pool import on_ray_owner_thread, shutdown_pools

    pool = EnginePool(Execution(max_concurrent_engines=2, cpus_per_engine=1, local_cpus=2))
    pool.prewarm(WORK)
    on_ray_owner_thread(lambda: None)  # the owner thread runs its queue in order: the prewarm is submitted
    actors = list(pool.actors)
    assert len(actors) == 2 and len(pool.warming) == 2
    assert all(ray.get(pool.warming)) and pool.loaded_engines() == 2
    got = [row for batch in pool.run(WORK, plan.units) for res in batch for row in res.rows]
    assert pool.actors == actors and len(got) == sum(len(p) for _, p in plan.units)
    pool.reset()
    shutdown_pools()  # stops the Ray that the owner thread started
    assert not ray.is_initialized()


def _no_worker() -> None:
    return None


def _kill_own_process(worker: None, chunk: object) -> list[object]:
    """A chunk that takes its engine's process down with it (a crashed model server, an OOM kill)."""
    import os

    os._exit(1)


def _trace_of(unit) -> str:
    return unit[0].trace_id


def test_an_engine_lost_more_than_retries_times_fails_the_run(plan) -> None:
    """`execution.retries` bounds the losses of one engine in one run: an engine that dies on every
    chunk is recreated `retries` times, then the run fails with Ray's actor error (no endless loop,
    nothing yielded)."""
    from legival_core.stages.base import Work
    from tasks.ray_pool import _actor_died

    ray.init(address="local", num_cpus=2, include_dashboard=False)  # never another test's cluster
    pool = EnginePool(Execution(max_concurrent_engines=1, cpus_per_engine=1, traces_per_chunk=3, retries=1))
    work = Work(_no_worker, _kill_own_process, 3, route=_trace_of, key="dies")
    got = []
    with pytest.raises(Exception) as info:
        for batch in pool.run(work, plan.units):
            got.append(batch)
    assert _actor_died(info.value), repr(info.value)
    assert got == [] and pool.replaced == 1  # one loss retried on a new engine, the second one fails
    assert pool.actors == []  # the failed run reset the pool: the next run starts fresh engines
