"""The reward server on a real two-node local Ray cluster (issue 47, tasks/reward_serve.py): one
replica per node, both serving, one HTTP proxy on the head node; the items of concurrent requests
scored in shared batches; saturation answered 503 with Retry-After; a replica killed mid-batch
answers its request with an error or a retry and logs nothing twice; a client that hangs up leaves
the server up. The students are the scripted backend (tests/plugins/scripted.py), held on a gate
file where a test needs work in flight."""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.slow
serve_mod = pytest.importorskip("ray.serve", reason="Ray Serve is not installed: make install (the `rl` extra)")

QUESTION = "Tom has 9 apples and buys 9 more. How many apples does he have?"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, body: Any = None, timeout: float = 120) -> tuple[int, Any, dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw), dict(e.headers)
        except ValueError:
            return e.code, raw.decode("utf-8", "replace"), dict(e.headers)


def _items(n: int, tag: str) -> dict[str, Any]:
    return {"items": [{"prompt": QUESTION, "completion": f"9 + 9 = 18. He has 18. The answer is \\boxed{{18}}. [{tag}{i}]",
                       "gold": "18", "tag": tag} for i in range(n)]}


def _spec(tmp: Path, gate: Path | None = None) -> Path:
    student: dict[str, Any] = {"name": "scripted-demo", "backend": "scripted-demo", "model": "scripted-demo-v1"}
    if gate is not None:
        student["backend_options"] = {"hold_after": 0, "gate": str(gate)}
    path = tmp / ("held.yaml" if gate else "reward.yaml")
    path.write_text(yaml.safe_dump({"dataset": "gsm8k", "store": str(tmp / "r.duckdb"), "components": {
        "correct": {"weight": 1.0}, "transfer": {"weight": 0.5, "step_interval": 2, "max_new_tokens": 32,
                                                 "student": student}}}))
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Path]]:
    os.environ["RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING"] = "0"  # before the cluster: spread over both nodes
    import ray
    from ray.cluster_utils import Cluster

    from legival_core.store import Store
    from tasks.reward_serve import ServeOptions, start_serving

    tmp = tmp_path_factory.mktemp("serve")
    Store(tmp / "r.duckdb").close()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    opts = ServeOptions(str(_spec(tmp)), port=_port(), replicas=2, replica_cpus=1.0, max_batch=32, batch_wait_s=0.2)
    serving = None
    try:
        cluster.wait_for_nodes()
        serving = start_serving(opts, cluster.address, str(tmp / "r.duckdb"))
        yield serving, opts, tmp
    finally:
        if serving is not None:
            serving.stop()
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        os.environ.pop("RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING", None)


def test_replicas_on_both_nodes_serve_behind_one_proxy_on_the_head(served: tuple[Any, Any, Path]) -> None:
    import ray

    from tasks.reward_serve import proxy_nodes

    serving, _opts, _tmp = served
    with ThreadPoolExecutor(16) as pool:
        nodes = {r[1]["node"] for r in pool.map(lambda _: _call(serving.url + "/health"), range(64))}
    assert len(nodes) == 2  # both replicas answered
    head = ray.get_runtime_context().get_node_id()
    assert proxy_nodes() == [head]  # one HTTP proxy, the driver's (head) node


def test_concurrent_requests_share_batches_and_are_logged_once(served: tuple[Any, Any, Path]) -> None:
    from legival_core.store import Store
    from legival_core.store.reward_log import reward_rows

    serving, _opts, tmp = served
    def counts() -> dict[str, tuple[int, int]]:
        with ThreadPoolExecutor(8) as pool:
            answers = [r[1] for r in pool.map(lambda _: _call(serving.url + "/health"), range(48))]
        return {r["node"]: (r["items"], r["batches"]) for r in answers}

    before = counts()
    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(lambda i: _call(serving.url + "/score", _items(1, f"c{i}-")), range(24)))
    assert all(status == 200 and body["results"][0]["correct"] for status, body, _ in got), got[:2]
    # a repeat of one request (a client's retry) logs nothing new
    assert _call(serving.url + "/score", _items(1, "c0-"))[0] == 200
    after = counts()
    assert set(after) == set(before) and len(after) == 2
    items = sum(after[n][0] - before[n][0] for n in after)
    batches = sum(after[n][1] - before[n][1] for n in after)
    assert items == 25 and batches < items  # requests of one item each, scored several at a time
    with Store(tmp / "r.duckdb", read_only=True) as store:
        tags = reward_rows(store)["tag"].to_list()
    assert sorted(t for t in tags if t.startswith("c")) == sorted(f"c{i}-" for i in range(24))


def test_saturation_is_a_503_with_retry_after_and_a_killed_replica_logs_nothing_twice(
        served: tuple[Any, Any, Path]) -> None:
    import ray
    from ray import serve

    from legival_core.store import Store
    from legival_core.store.reward_log import reward_rows
    from tasks.reward_serve import build_app

    serving, opts, tmp = served
    gate = tmp / "gate"
    held = replace(opts, spec_path=str(_spec(tmp, gate)), max_ongoing=1, max_queued=1, retry_after_s=7.0)
    serve.run(build_app(held), name="legival-reward", route_prefix="/", blocking=False)
    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(_call, serving.url + "/score", _items(1, f"s{i}-")) for i in range(8)]
            refused = [f.result() for f in futures[:0]]  # collected below, once the gate is open
            threading.Event().wait(0)  # nothing to wait for: the 503s come at once
            replicas = [a for a in ray.util.list_named_actors(all_namespaces=True)
                        if "RewardServer" in a["name"]]
            assert replicas
            ray.kill(ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"]))  # mid-batch
            gate.touch()
            refused = [f.result() for f in futures]
    finally:
        gate.touch()
        serve.run(build_app(opts), name="legival-reward", route_prefix="/", blocking=False)
    codes = [r[0] for r in refused]
    busy = [r for r in refused if r[0] == 503]
    assert busy and all(r[2].get("Retry-After", r[2].get("retry-after")) == "7" for r in busy), codes
    assert all(c in (200, 500, 502, 503) for c in codes), codes  # answered, retried, or a clear error
    assert _call(serving.url + "/health")[0] == 200  # the replica was replaced; the server is up
    with Store(tmp / "r.duckdb", read_only=True) as store:
        rows = reward_rows(store)
    keys = rows.filter(rows["tag"].str.starts_with("s"))["tag"].to_list()
    assert len(keys) == len(set(keys))  # nothing logged twice


def test_a_client_that_hangs_up_leaves_the_server_up(served: tuple[Any, Any, Path]) -> None:
    serving, _opts, _tmp = served
    host, port = serving.url.rsplit("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        body = json.dumps(_items(4, "gone-")).encode()
        s.sendall(b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                  + f"content-length: {len(body)}\r\n\r\n".encode() + body)
    status, body, _ = _call(serving.url + "/score", _items(1, "after-"))
    assert status == 200 and body["results"][0]["reward"] is not None
