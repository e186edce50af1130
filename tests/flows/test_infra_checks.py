"""tasks/infra.py: the addresses a Ray check connects to, and `ray.init` guarded by it (a deployment
run, which no CLI pre-check precedes, fails in seconds on a cluster that is not there)."""

from __future__ import annotations

import time

import pytest

from legival_core.run_config import Execution
from tasks.infra import Unreachable, ray_endpoint


@pytest.mark.parametrize(("address", "endpoint"), [
    ("local", None),
    ("ray://10.0.0.5:10001", ("10.0.0.5", 10001)),
    ("ray://head", ("head", 10001)),  # the Ray client's default port
    ("10.0.0.5:6380", ("10.0.0.5", 6380)),
    ("head", ("head", 6379)),  # the GCS default port
    ("[::1]:6379", ("::1", 6379)),
])
def test_ray_endpoint(address: str, endpoint: tuple[str, int] | None) -> None:
    assert ray_endpoint(address) == endpoint


def test_auto_is_the_address_in_ray_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "ray://10.0.0.7:10001")
    assert ray_endpoint("auto") == ("10.0.0.7", 10001)


def test_ray_init_on_a_cluster_that_is_not_there_fails_at_once() -> None:
    import ray

    from tasks.ray_pool import ensure_ray

    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process (ensure_ray would reuse it)")
    t0 = time.perf_counter()
    with pytest.raises(Unreachable, match=r"Ray cluster at ray://127\.0\.0\.1:1 did not answer within 15 s"):
        ensure_ray(Execution(ray_address="ray://127.0.0.1:1"))
    assert time.perf_counter() - t0 < 20 and not ray.is_initialized()
