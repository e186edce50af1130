"""A pool of long-lived student engine actors on Ray: one model load per engine, not per task.

Work units are (teacher, dataset, student, trace) with the trace's missing prefix depths (bins) in
ascending order. A unit is routed by a stable hash of its trace id, so every prefix of a trace goes
to the same engine, and one engine runs its units in submission order (a Ray actor with one thread
executes calls in order): its prefix cache sees a trace's prefixes shortest first. Units of one
engine are batched `traces_per_chunk` at a time into one actor call, so the backend batches across
traces too.

Engines wrap their backend in `LazyBackend`: an engine that gets no work never loads its model, and
the pool itself starts no actor (and no Ray) until there is work. Resources (`num_gpus`,
`num_cpus`) come from the spec's `execution` section and are set here, at the call site.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from legival_core.spec import Execution
from legival_core.stages.transfer import TransferSummary, TransferTrace
from legival_core.transfer.planner import PlannedRollout, StudentConfig

log = logging.getLogger("legival.orchestration")

Unit = tuple[TransferTrace, list[PlannedRollout]]


def engine_for(trace_id: str, n_engines: int) -> int:
    """Stable across processes and runs (Python's `hash` is salted per process)."""
    return int.from_bytes(hashlib.sha1(trace_id.encode()).digest()[:8], "big") % n_engines


@dataclass(slots=True)
class ChunkResult:
    rows: list[dict[str, Any]]
    stats: dict[str, int]
    engine: int
    node_id: str


class StudentEngine:
    """The actor body (wrapped with `ray.remote` by the pool)."""

    def __init__(self, config: StudentConfig, index: int) -> None:
        import tasks.scripted_students  # noqa: F401  (registers the test students in this process)
        from legival_core.backends.lazy import LazyBackend
        from legival_core.transfer.students import make_student_backend

        self.config, self.index = config, index
        self.backend = LazyBackend(lambda: make_student_backend(config))
        self.order: list[tuple[str, int]] = []

    def rollout(self, chunk: Sequence[Unit]) -> ChunkResult:
        import ray

        from legival_core.stages.transfer import rollout_chunk

        s = TransferSummary()
        rows = rollout_chunk(self.backend, self.config, chunk, s)
        self.order.extend((t.trace_id, p.k) for t, plans in chunk for p in plans)
        stats = {k: getattr(s, k) for k in ("forced", "overflow", "prefill_computed", "prefill_cached", "decode_tokens")}
        return ChunkResult(rows, stats, self.index, ray.get_runtime_context().get_node_id())

    def warm(self) -> bool:
        """Load the model now (the pool's `prewarm`), so the first chunk does not wait for it."""
        self.backend.load()
        return True

    def history(self) -> list[tuple[str, int]]:
        """(trace_id, k) in the order this engine generated them (for the routing test)."""
        return list(self.order)

    def loaded(self) -> bool:
        return self.backend.loaded

    def close(self) -> None:
        self.backend.close()


@dataclass
class EnginePool:
    config: StudentConfig
    execution: Execution
    actors: list[Any] = field(default_factory=list)
    model_loads: int = 0
    warming: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def n_engines(self) -> int:
        return self.execution.max_concurrent_engines

    def _ensure_actors(self) -> list[Any]:
        if not self.actors:
            ensure_ray(self.execution)  # outside the lock: it waits for the Ray owner thread
        with self._lock:
            if not self.actors:
                import ray

                remote = ray.remote(StudentEngine).options(
                    num_cpus=self.execution.cpus_per_engine,
                    num_gpus=self.execution.gpus_per_engine,
                    max_concurrency=1,
                    max_restarts=0,
                )
                self.actors = [remote.remote(self.config, i) for i in range(self.n_engines)]
            return self.actors

    def prewarm(self) -> None:
        """Start Ray and the engines and load their models in the background (on the Ray owner
        thread), so that this overlaps the driver's work before transfer. Calls queued on an actor
        run in order, so a chunk submitted later simply starts after its engine's `warm`."""

        def start() -> None:
            try:
                self.warming = [a.warm.remote() for a in self._ensure_actors()]
            except Exception as e:  # noqa: BLE001  (the shards start the engines again and report errors)
                log.warning("engine prewarm failed: %s: %s", type(e).__name__, e)

        on_ray_owner_thread(start, wait=False)

    def route(self, todo: Sequence[Unit], traces_per_chunk: int) -> list[list[list[Unit]]]:
        """Per engine, its chunks in submission order (units keep the plan's stable order)."""
        per_engine: list[list[Unit]] = [[] for _ in range(self.n_engines)]
        for unit in todo:
            per_engine[engine_for(unit[0].trace_id, self.n_engines)].append(unit)
        return [[units[i : i + traces_per_chunk] for i in range(0, len(units), traces_per_chunk)]
                for units in per_engine]

    def run(self, todo: Sequence[Unit], traces_per_chunk: int) -> Iterator[list[ChunkResult]]:
        """Submit every chunk, then yield finished chunks in batches as they arrive (`ray.wait`),
        so the driver commits while the engines keep working."""
        import ray

        if not todo:
            return
        actors = self._ensure_actors()
        pending = []
        routed = self.route(todo, traces_per_chunk)
        # interleave engines so that every engine starts at once
        for i in range(max((len(c) for c in routed), default=0)):
            for e, chunks in enumerate(routed):
                if i < len(chunks):
                    pending.append(actors[e].rollout.remote(chunks[i]))
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                if pending:
                    more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                    ready += more
                yield ray.get(ready)
        except BaseException as e:
            for ref in pending:
                ray.cancel(ref)
            if _actor_died(e):
                self.reset()
            raise

    def reset(self) -> None:
        import ray

        with self._lock:
            for a in self.actors:
                ray.kill(a)
            self.actors = []

    def histories(self) -> list[list[tuple[str, int]]]:
        import ray

        return ray.get([a.history.remote() for a in self.actors]) if self.actors else []

    def loaded_engines(self) -> int:
        import ray

        return sum(ray.get([a.loaded.remote() for a in self.actors])) if self.actors else 0


_pools: dict[tuple[str, str], EnginePool] = {}
_pools_lock = threading.Lock()
_started_ray = False
_ray_owner: ThreadPoolExecutor | None = None
_ray_owner_lock = threading.Lock()
_OWNER_PREFIX = "legival-ray-owner"


def on_ray_owner_thread(fn: Callable[[], Any], wait: bool = True) -> Any:
    """Run `fn` on the one long-lived thread that starts and stops Ray in this process.

    Shard tasks run on Prefect's worker threads, so the first of them would call `ray.init()`; a
    later `ray.shutdown()` on another thread (the flow's) then waits ~15 s in the driver's core-worker
    shutdown (Ray 2.60, measured: 15.1 s vs 1.4 s when the same thread does both). Doing both on one
    owner thread keeps the lazy start (no Ray at all when nothing is missing) without that cost.
    Called on the owner thread itself, `fn` runs at once; `wait=False` queues it and returns."""
    global _ray_owner
    if threading.current_thread().name.startswith(_OWNER_PREFIX):
        return fn()
    with _ray_owner_lock:
        if _ray_owner is None:
            _ray_owner = ThreadPoolExecutor(max_workers=1, thread_name_prefix=_OWNER_PREFIX)
        owner = _ray_owner
    future = owner.submit(fn)
    return future.result() if wait else None


def prewarm_engines(configs: Sequence[StudentConfig], execution: Execution) -> None:
    """Start the students' engines in the background (see `EnginePool.prewarm`)."""
    for config in configs:
        get_pool(config, execution).prewarm()


def get_pool(config: StudentConfig, execution: Execution) -> EnginePool:
    """One pool per (student, backend) for the life of the flow run, shared by its shard tasks."""
    key = (config.student_key, config.backend)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = EnginePool(config, execution)
        return pool


def loaded_engines() -> int:
    return sum(p.loaded_engines() for p in _pools.values())


def shutdown_pools() -> None:
    """Kill the engines; stop Ray only if this process started it."""
    global _started_ray
    with _pools_lock:
        for p in _pools.values():
            if p.actors:
                p.reset()
        _pools.clear()
    if _started_ray:
        import ray

        on_ray_owner_thread(ray.shutdown)
        _started_ray = False


def ensure_ray(execution: Execution) -> None:
    on_ray_owner_thread(lambda: _init_ray(execution))


def _init_ray(execution: Execution) -> None:
    global _started_ray
    import ray

    if ray.is_initialized():
        return
    if execution.ray_address == "local":
        # Ray starts workers at niceness 15 by default; here the engines ARE the work, so they must not
        # yield the CPU to every other process on a shared machine.
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(num_cpus=execution.local_cpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=execution.ray_address, log_to_driver=False)
    _started_ray = True


TRANSIENT = (ConnectionError, TimeoutError)


def _actor_died(e: BaseException) -> bool:
    from ray import exceptions as rex

    return isinstance(e, rex.RayActorError | rex.WorkerCrashedError | rex.NodeDiedError | rex.ObjectLostError)


def is_transient(e: BaseException) -> bool:
    """Worth a retry: a lost engine, node or object, or a network error inside an engine."""
    from ray import exceptions as rex

    if _actor_died(e) or isinstance(e, rex.GetTimeoutError | rex.RaySystemError | rex.OutOfMemoryError):
        return True
    if isinstance(e, rex.RayTaskError):
        return isinstance(e.cause, TRANSIENT)
    return isinstance(e, TRANSIENT)
