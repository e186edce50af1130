"""Fail fast on infrastructure that is not there: the Ray cluster of `execution.ray_address` and the
Prefect API of PREFECT_API_URL each get `execution.connect_timeout_s` (15 s) to answer, checked before a
run does any work (`legival.preflight.prepare_spec_run`) and again before `ray.init` (a deployment run), so
that an address with nothing behind it is one error line naming it, not minutes of silence (Ray
retries a missing cluster for ~150 s) and two tracebacks.

The Ray check is a TCP connection to the cluster's address (the Ray client's `ray://HOST:PORT`, or a
GCS `HOST:PORT`; `auto` is the address in RAY_ADDRESS or in Ray's current-cluster file, when there is
one): it catches a wrong host or port, a stopped cluster and a firewall that drops packets. A port
that accepts connections but is not Ray is left to Ray. The Prefect check is `GET {api}/health`; any
HTTP answer counts (a Cloud workspace may answer 401 without a key, which Prefect then reports).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

RAY_CLIENT_PORT = 10001
RAY_GCS_PORT = 6379
RAY_CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")
"""Where `ray start` records the address `ray.init("auto")` connects to (Ray's default temp dir)."""


class Unreachable(RuntimeError):
    """A Ray cluster or Prefect API that did not answer in time; the message says which and where it
    is configured. Not a `ConnectionError`: a configuration to fix, never retried as transient."""


def ray_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) that `ray.init(address)` connects to first; None for 'local' and for an 'auto'
    with no recorded cluster (Ray then starts or fails at once)."""
    address = address.strip()
    if address == "local":
        return None
    if address == "auto":
        recorded = os.environ.get("RAY_ADDRESS", "").strip()
        if not recorded and RAY_CURRENT_CLUSTER.is_file():
            recorded = RAY_CURRENT_CLUSTER.read_text(encoding="utf-8", errors="replace").strip()
        if not recorded or recorded in ("auto", "local"):
            return None
        address = recorded
    client = address.startswith("ray://")
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "127.0.0.1"
    return host, port if port is not None else (RAY_CLIENT_PORT if client else RAY_GCS_PORT)


def _tcp_problem(host: str, port: int, timeout_s: float) -> str | None:
    """Why a TCP connection to host:port failed within `timeout_s`, or None when it was accepted."""
    deadline = time.monotonic() + timeout_s
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return f"unknown host {host!r} ({e.strerror})"
    problem = "no address"
    for family, kind, proto, _, sockaddr in infos:
        left = deadline - time.monotonic()
        if left <= 0:
            return "no answer"
        sock = socket.socket(family, kind, proto)
        sock.settimeout(left)
        try:
            sock.connect(sockaddr)
        except TimeoutError:
            problem = "no answer"
        except ConnectionRefusedError:
            problem = "connection refused: nothing listens there"
        except OSError as e:
            problem = e.strerror or str(e)
        else:
            return None
        finally:
            sock.close()
    return problem


def check_ray(address: str, timeout_s: float, where: str = "the spec") -> None:
    """Raise `Unreachable` when the Ray cluster at `address` does not accept a connection in time."""
    endpoint = ray_endpoint(address)
    if endpoint is None:
        return
    problem = _tcp_problem(*endpoint, timeout_s)
    if problem is not None:
        raise Unreachable(f"Ray cluster at {address} did not answer within {timeout_s:g} s "
                          f"(execution.ray_address in {where}): {problem}")


def prefect_api_url() -> str | None:
    """The Prefect API this process would talk to (PREFECT_API_URL, from the environment or the active
    Prefect profile); None when a run starts its own temporary server."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return str(url) if url else None


def check_prefect(timeout_s: float, where: str = "the spec", url: str | None = None) -> None:
    """Raise `Unreachable` when the Prefect API (`url`, else `prefect_api_url()`) does not answer in time."""
    import httpx

    url = url if url is not None else prefect_api_url()
    if url is None:
        return
    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=httpx.Timeout(timeout_s))
    except httpx.TimeoutException:
        problem = "no answer"
    except httpx.ConnectError as e:
        problem = "connection refused: nothing listens there" if "refused" in str(e).lower() else str(e)
    except httpx.HTTPError as e:
        problem = f"{type(e).__name__}: {e}"
    else:
        return
    raise Unreachable(f"Prefect API at {url} did not answer within {timeout_s:g} s (PREFECT_API_URL; the "
                      f"timeout is execution.connect_timeout_s in {where}): {problem}")
