"""`legival reward serve`: the scoring core as a Ray Serve application (docs/reward.md "The server").

- **Replicas own the student engines**: each replica holds a `Scorer` (its students load on the first
  batch) and batches the items of every request it gets (`serve.batch`), so concurrent trainers' and
  OpenRLHF's one-item requests share the engines' batches. `--replicas N` places them over the
  cluster, one per node at most; the HTTP proxy runs on the head node only (two proxies on one machine
  would clash on the port).
- **The log** (the Goodhart watch's data, `reward_log`): every scored item is committed to the store's
  journal (`legival_core/store/journal.py`) by one logger actor on the driver's node (the journal is a
  file there) before the answer leaves: a server that runs for days never holds the store, and a
  retried item is logged once (its key).
- **Who may call**: the host guard in API mode (`legival_core/web/guard.py`: Host names the server, no
  foreign Origin, a JSON body, bounded size), and a bearer token when bound beyond loopback (a 0600
  file, compared in constant time, never logged). Saturated (`max_queued_requests`): 503 with
  Retry-After. A malformed request: 400 naming what is wrong; an item that cannot be scored: its
  error, the others scored.
"""

import asyncio
import hmac
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request  # at module level: FastAPI resolves the routes' annotations here

NAMESPACE = "legival-reward"
LOGGER = "reward-log"
MAX_BODY_BYTES = 16 << 20
"""A request body above this is refused whole (413); a completion over the spec's limit, alone."""


@dataclass(frozen=True)
class ServeOptions:
    spec_path: str
    host: str = "127.0.0.1"
    port: int = 8790
    replicas: int = 1
    token: str | None = field(default=None, repr=False)
    allow_hosts: tuple[str, ...] = ()
    max_batch: int = 64
    batch_wait_s: float = 0.05
    max_ongoing: int = 128
    max_queued: int = 256
    retry_after_s: float = 5.0
    replica_cpus: float = 1.0


class RewardLog:
    """The logger actor: appends scored rows to the store's journal on the driver's node."""

    def __init__(self, db: str) -> None:
        from legival_core.store.journal import Journal

        self.journal = Journal(db)

    def append(self, rows: list[dict[str, Any]]) -> int:
        if rows:
            self.journal.append("reward_log", rows)
        return len(rows)


def build_app(opts: ServeOptions) -> Any:
    """The Serve application (not yet run) of `opts`."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from ray import serve
    from ray.serve.config import BackpressureConfig

    from legival_core.web.guard import AllowedHosts, HostGuard

    api = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    api.add_middleware(HostGuard, allowed=AllowedHosts.for_server(opts.host, opts.allow_hosts), api=True,
                       max_body_bytes=MAX_BODY_BYTES)

    @serve.deployment(num_replicas=opts.replicas, max_replicas_per_node=1, max_ongoing_requests=opts.max_ongoing,
                      max_queued_requests=opts.max_queued,
                      backpressure_config=BackpressureConfig(status_code=503, retry_after_s=opts.retry_after_s),
                      ray_actor_options={"num_cpus": opts.replica_cpus})
    @serve.ingress(api)
    class RewardServer:
        def __init__(self, spec_path: str, token: str | None, max_batch: int, wait_s: float) -> None:
            import ray

            from legival_core.rl.score import Scorer
            from legival_core.run_config.reward import load_reward_spec

            self.spec = load_reward_spec(spec_path)
            self.scorer = Scorer(self.spec, log=False)
            self.token = token
            self.node = ray.get_runtime_context().get_node_id()
            self.batches = self.items = 0
            self.log = ray.get_actor(LOGGER, namespace=NAMESPACE) if self.spec.store is not None else None
            batched: Any = self.scored_batch
            batched.set_max_batch_size(max_batch)
            batched.set_batch_wait_timeout_s(wait_s)

        def refused(self, request: Request) -> Any:
            if self.token is None:
                return None
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode("utf-8", "replace"), f"Bearer {self.token}".encode()):
                return JSONResponse({"error": "a bearer token is required (Authorization: Bearer ...)"}, 401)
            return None

        @api.get("/health")
        async def health(self) -> dict[str, Any]:
            return {"status": "ok", "reward": self.spec.name, "spec_hash": self.scorer.spec_hash, "node": self.node,
                    "batches": self.batches, "items": self.items, "rss_mib": _rss_mib()}

        @api.post("/score")
        async def score(self, request: Request) -> Any:
            from legival_core.rl.http import native_answer, parse_native

            return await self.answer(request, lambda body: parse_native(body, self.spec.max_completion_chars),
                                     native_answer)

        @api.post("/get_reward")
        async def get_reward(self, request: Request) -> Any:
            from legival_core.rl.http import openrlhf_answer, parse_openrlhf

            step = request.query_params.get("step")
            at = int(step) if step is not None and step.isdigit() and len(step) < 16 else None
            return await self.answer(request, lambda body: parse_openrlhf(body, self.spec.max_completion_chars, at),
                                     openrlhf_answer)

        async def answer(self, request: Request, parse: Any, shape: Any) -> Any:
            from legival_core import untrusted_json
            from legival_core.rl.http import RequestRefused

            denied = self.refused(request)
            if denied is not None:
                return denied
            try:
                items = parse(untrusted_json.loads((await request.body()).decode("utf-8")))
            except UnicodeDecodeError:
                return JSONResponse({"error": "the body is not UTF-8 text"}, 400)
            except (ValueError, RequestRefused) as e:  # untrusted_json.JsonRefused is a ValueError
                return JSONResponse({"error": str(e)[:500]}, 400)
            results = await asyncio.gather(*(self.scored_batch(it) for it in items))
            return JSONResponse(shape(results))

        @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.05)
        async def scored_batch(self, items: list[Any]) -> list[Any]:
            """One batch across requests: scored together, logged before any answer leaves."""
            from legival_core.rl.score import log_rows

            results = await asyncio.to_thread(self.scorer.score, items)
            self.batches, self.items = self.batches + 1, self.items + len(items)
            if self.log is not None:
                await self.log.append.remote(log_rows(self.spec.name, self.scorer.spec_hash, items, results))
            return results

    deployment: Any = RewardServer
    return deployment.bind(opts.spec_path, opts.token, opts.max_batch, opts.batch_wait_s)


@dataclass
class Serving:
    """A running reward server: its URL, and what `stop` ends."""

    url: str
    address: str
    head: Any = None
    logger: Any = None

    def stop(self) -> None:
        """The application, its replicas and proxy, the logger, then this driver's Ray and (a local
        Ray) its helper with every Ray process."""
        import contextlib

        import ray
        from ray import serve

        with contextlib.suppress(Exception):
            serve.shutdown()
        if self.logger is not None:
            with contextlib.suppress(Exception):
                ray.kill(self.logger)
        from tasks.ray_pool import python_keeps_sigterm

        with contextlib.suppress(Exception), python_keeps_sigterm():  # Ray's shutdown resets SIGTERM otherwise
            ray.shutdown()
        if self.head is not None:
            self.head.stop()


def start_serving(opts: ServeOptions, address: str | None, store: str | None, num_cpus: int | None = None) -> Serving:
    """Start (or join, `address`) Ray, the logger when the spec logs (`store`), Serve's one HTTP proxy
    on the head node and the application; returns once it answers."""
    import ray
    from ray import serve
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from tasks.local_ray import start_head
    from tasks.ray_pool import python_keeps_sigterm

    # this driver's Ray core must not take SIGTERM from the command's stop handler (abseil's failure
    # handler would print a stack and abort): Ray's own switch
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    head = None
    if address is None:
        head = start_head(num_cpus)
        address = head.address
    serving = Serving(f"http://{_url_host(opts.host)}:{opts.port}", address, head)
    try:
        saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            with python_keeps_sigterm():  # Ray's C++ core would take SIGTERM from the command's stop handler
                ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        finally:  # ray.init puts its own SIGTERM handler (sys.exit) in place of the command's
            for sig, handler in saved.items():
                if handler is not None:
                    signal.signal(sig, handler)
        if store is not None:
            here = ray.get_runtime_context().get_node_id()
            serving.logger = ray.remote(RewardLog).options(
                name=LOGGER, namespace=NAMESPACE, num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote(store)
            ray.get(serving.logger.append.remote([]))
        with python_keeps_sigterm():
            serve.start(proxy_location="HeadOnly", http_options={"host": opts.host, "port": opts.port})
            serve.run(build_app(opts), name="legival-reward", route_prefix="/", blocking=False)
        return serving
    except BaseException:
        serving.stop()
        raise


def proxy_nodes() -> list[str]:
    """The nodes an HTTP proxy of Serve runs on (one: the head's, `proxy_location="HeadOnly"`)."""
    from ray import serve

    return sorted(serve.status().proxies)


def _rss_mib() -> float | None:
    """This replica's resident memory now (its engines included), MiB; None without /proc."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", "[::]"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
